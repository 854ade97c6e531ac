"""Two-party computation library of Starfish.

* `backend` — the `Backend` interface the unlearning algorithms are written against;
  `plain_backend` (float64 reference) and `crypten_backend` (CrypTen 2PC) implement it.
* `protocols/` — composite protocols (SecGE2/3/4, SecSel, SecMax, SecSrt, SecMI, SecTC)
  written once on the primitives.
* `fixedpoint` — numpy-only codec and client-side sharing; `costs` — cost ledger.
* `onnx_shim` (the only CrypTen import), `session` (rendezvous, TTP provider, timeouts),
  `dealer` (TTP server process), `cluster` (dealer + two parties for tests and benches).

Numerical ranges and guarantees: docs/NUMERICS.md.
"""
