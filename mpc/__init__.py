"""Two-party computation library of Starfish (no import of server, unlearning or the SDK).

* `primitives` — `Secret` and the `Primitives` every backend implements (arithmetic,
  comparison, share load/export, public all-gather);
* `protocols/` — composite protocols, one file each (SecGE2/3/4, SecMax, SecMI, SecMul3,
  SecSel, SecSP, SecSrt, SecTC), functions over the primitives;
* `backend` — `Backend`: the primitives with the protocols bound as methods, the interface
  the unlearning algorithms are written against; `plain_backend` (float64 reference) and
  `crypten_backend` (CrypTen 2PC) implement it;
* `fixedpoint`, `masks` — codecs without torch: fixed point, client-side sharing, seed-compressed
  masks expanded with AES-256-CTR (the client SDK imports them); `costs` — cost ledger; `ports` — free local ports;
* `crypten_loader` (the only CrypTen import), `session` (one party's session: peer
  connection, dealer link, timeouts), `cluster` (dealer service + two parties for tests and
  benches);
* `plane/` — the MPC plane: TLS 1.3 channels between the parties (`communicator`,
  CrypTen's Communicator on them), the dealer service and its request kinds
  (`dealer_service`, `dealer_ops`, `dealer_client`, `provider`), AES-CTR streams (`prg`),
  certificates (`certs`, `tls`).

Numerical ranges and guarantees: docs/NUMERICS.md; CrypTen specifics: docs/CRYPTEN.md; the
plane: docs/DEPLOY.md.
"""
