"""Party-side functions for the two-party tests: fn(backend, rank, *args) -> revealed values.

They live in their own module so the spawned party processes can import them. Inputs
are plain tensors known to the test; party 0 shares the first operand set, party 1 the
second, then both run the same protocol and reveal the results.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from mpc.crypten_backend import CrypTenBackend, CrypTenSecret, OutOfStepError, TruncationFaultError
from mpc.protocols import sectc


def arithmetic(
    backend: CrypTenBackend, rank: int, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
) -> dict[str, torch.Tensor]:
    """add/sub/neg/mul/matmul/sum/dot/mul3 of x (party 0) and y (party 1); w is public (n, 3)."""
    a, b = backend.share(x, src=0), backend.share(y, src=1)
    return {
        "add": backend.reveal(backend.add(a, b)),
        "sub": backend.reveal(backend.sub(a, b)),
        "neg": backend.reveal(backend.neg(a)),
        "mul": backend.reveal(backend.mul(a, b)),
        "square": backend.reveal(backend.square(a)),
        "mul_public": backend.reveal(backend.mul(a, w[:, 0])),
        "add_public": backend.reveal(backend.add(a, w[:, 1])),
        "matmul_public": backend.reveal(backend.matmul(a, w)),
        "public_matmul": backend.reveal(backend.matmul(w.T, b)),
        "outer": backend.reveal(backend.matmul(backend.reshape(a, (-1, 1)), backend.reshape(b, (1, -1)))),
        "sum": backend.reveal(backend.sum(a)),
        "dot": backend.reveal(backend.dot(a, b)),
        "mul3": backend.reveal(backend.mul3(a, b, w[:, 2])),
        # the same local products with the public operand prepared (encoded) once
        "mul_prepared": backend.reveal(backend.mul(a, backend.prepare(w[:, 0]))),
        "matmul_prepared": backend.reveal(backend.matmul(a, backend.prepare(w))),
        "prepared_matmul": backend.reveal(backend.matmul(backend.prepare(w.T), b)),
        "dot_prepared": backend.reveal(backend.dot(a, backend.prepare(w[:, 0]))),
        "dot_public": backend.reveal(backend.dot(a, w[:, 0])),
    }


def fixed_products(
    backend: CrypTenBackend, rank: int, rows: torch.Tensor, xs: list[torch.Tensor], shape: tuple[int, ...]
) -> dict[str, Any]:
    """Fix the rows of `rows` (party 1's) in one call, then multiply the stack (reshaped to
    `shape`) by each x (party 0's, fresh every product) and once more in a measured step;
    fix the first row again; scalar products of fixed rows with each other (`fixed_dot`)."""
    fixed = backend.fix([backend.share(row, src=1) for row in rows])
    products = []
    for x in xs:  # one round each: each product draws the next round's pair ahead
        with backend.fixed_repeats(True):
            products.append(backend.reveal(backend.fixed_matmul(backend.share(x, src=0), fixed, shape)))
    x = backend.share(xs[0], src=0)
    with backend.fixed_repeats(False), backend.step("product"):  # its pair was drawn in the last round
        backend.fixed_matmul(x, fixed, shape)
    again = backend.fix([backend.share(rows[0], src=1)])
    single = backend.reveal(backend.fixed_matmul(backend.share(xs[0][..., :1, :1], src=0), again, (1, *rows[0].shape)))
    # scalar products of fixed operands: each with itself and with the next, and one across fixings
    firsts, seconds = fixed + fixed + again, fixed + fixed[1:] + fixed[:1] + fixed[:1]
    with backend.step("dots"):
        dots = backend.fixed_dot(firsts, seconds)
    return {
        "products": products,
        "single": single,
        "dots": backend.reveal(dots),
        "dots_cost": backend.ledger.to_dict()["dots"],
        "numbers": [f.number for f in fixed + again],
        "current": all(backend.fixed_current(f) for f in fixed + again),
        "cost": backend.ledger.to_dict()["product"],
    }


def compare(
    backend: CrypTenBackend, rank: int, a: torch.Tensor, b: torch.Tensor, uv_i: torch.Tensor, uv_j: torch.Tensor
) -> dict[str, torch.Tensor]:
    """SecGE, SecGE2, SecGE3, SecGE4, SecSel on grid inputs."""
    sa, sb = backend.share(a, src=0), backend.share(b, src=1)
    ui, vi = backend.share(uv_i[:, 0], src=0), backend.share(uv_i[:, 1], src=0)
    uj, vj = backend.share(uv_j[:, 0], src=1), backend.share(uv_j[:, 1], src=1)
    bit = backend.ge(sa, sb)
    wi, wj = backend.ge(ui, 0.0), backend.ge(uj, 0.0)
    ai, aj = backend.square(ui), backend.square(uj)
    return {
        "ge": backend.reveal(bit),
        "ge_public": backend.reveal(backend.ge(sa, 0.25)),
        "ge2": backend.reveal(backend.ge2(ui, vi, uj, vj)),
        "ge3": backend.reveal(backend.ge3(wi, backend.share(uv_i[:, 2], src=0), wj, backend.share(uv_j[:, 2], src=1))),
        "ge4": backend.reveal(backend.ge4(wi, ai, vi, wj, aj, vj)),
        "select": backend.reveal(backend.select(bit, sa, sb)),
        "select_public": backend.reveal(backend.select(bit, a * 0 + 0.5, sb)),
        "ai": backend.reveal(ai),
        "aj": backend.reveal(aj),
    }


def sort(
    backend: CrypTenBackend, rank: int, keys: torch.Tensor, payload: torch.Tensor, method: str
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    k, p = backend.share(keys, src=0), backend.share(payload, src=1)
    with backend.step("sort"):
        sk, sp = backend.sort_desc(k, p, method)
    return backend.reveal(sk), backend.reveal(sp), backend.ledger.to_dict()["sort"]


def top_set(
    backend: CrypTenBackend, rank: int, keys: torch.Tensor, k: int, method: str
) -> tuple[tuple[int, ...], dict[str, Any], dict[str, Any]]:
    """SecTop's opened set and its cost, then the cost of sorting the same keys (SecSrt)."""
    shared = backend.share(keys, src=0)
    with backend.step("top"):
        chosen = backend.top_set(shared, k, method)
    with backend.step("sort"):
        backend.sort_desc(shared, backend.zeros((keys.shape[0],)), method)
    costs = backend.ledger.to_dict()
    return chosen, costs["top"], costs["sort"]


def maximum(backend: CrypTenBackend, rank: int, x: torch.Tensor, dim: int) -> torch.Tensor:
    return backend.reveal(backend.max(backend.share(x, src=1), dim))


def threshold(
    backend: CrypTenBackend,
    rank: int,
    g: torch.Tensor,
    delta: torch.Tensor,
    sample: torch.Tensor | None,
    block: int | None = None,
) -> torch.Tensor:
    """SecTC's flags; `block`: the coordinates compared per call (the module's default: None)."""
    saved = sectc.BLOCK_ELEMENTS
    sectc.BLOCK_ELEMENTS = saved if block is None else block
    try:
        return backend.threshold_flags(backend.share(g, src=0), backend.share(delta, src=1), sample)
    finally:
        sectc.BLOCK_ELEMENTS = saved


def inverse(backend: CrypTenBackend, rank: int, k: torch.Tensor, method: str) -> torch.Tensor:
    """[K⁻¹] by `method`, revealed."""
    return backend.reveal(backend.inverse(backend.share(k, src=0), method))


def inverse_with_mask(backend: CrypTenBackend, rank: int, k: torch.Tensor, cond: float) -> torch.Tensor:
    """SecMI's [K⁻¹] when its random mask R is a matrix of condition number `cond` (the rare
    draw near a singular R, forced: R = Q₁·diag(1, …, 1, 1/cond)·Q₂ from a fixed seed, each
    party holding R/2; known to both, which only a test may do)."""
    gen = torch.Generator().manual_seed(5)
    q1, _ = torch.linalg.qr(torch.randn(k.shape, generator=gen, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(k.shape, generator=gen, dtype=torch.float64))
    singular = torch.ones(k.shape[:-1], dtype=torch.float64)
    singular[..., -1] = 1.0 / cond
    return secmi_with_mask(backend, k, q1 @ torch.diag_embed(singular) @ q2)


def inverse_with_singular_mask(
    backend: CrypTenBackend, rank: int, k: torch.Tensor, seed: int, at: tuple[int, int]
) -> torch.Tensor:
    """SecMI's [K⁻¹] when its mask R (Gaussian from `seed`, each party holding R/2) has a zero
    column `at` = (matrix, column): the opened N = K·R is then exactly singular there."""
    mask = torch.randn(k.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    mask[at[0], :, at[1]] = 0.0
    return secmi_with_mask(backend, k, mask)


def secmi_with_mask(backend: CrypTenBackend, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SecMI's [K⁻¹], revealed, with the mask R = `mask` (each party holding R/2) for this call
    only: the party's backend lives for the whole session, so its own draw comes back after."""
    backend.random = lambda shape: CrypTenSecret(backend._encode(mask / 2, backend.f), backend.f)  # type: ignore[method-assign]
    try:
        return backend.reveal(backend.inverse(backend.share(k, src=0), "secmi"))
    finally:
        del backend.random


def divide(backend: CrypTenBackend, rank: int, a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    sa, sb = backend.share(a, src=0), backend.share(b, src=1)
    return {"secret": backend.reveal(backend.div(sa, sb)), "public": backend.reveal(backend.div(sa, b))}


def load_and_reveal(backend: CrypTenBackend, rank: int, shares: tuple[np.ndarray, np.ndarray]) -> torch.Tensor:
    """Each party loads its own externally made int64 share (no communication), then reveals."""
    return backend.reveal_encoded(backend.load_shares(shares[rank]))


def out_of_step(backend: CrypTenBackend, rank: int, x: torch.Tensor) -> str:
    """Party 0 multiplies while party 1 compares: both must detect it."""
    a = backend.share(x, src=0)
    try:
        if rank == 0:
            backend.mul(a, a)
        else:
            backend.ge(a, 0.0)
    except OutOfStepError as exc:
        return f"OutOfStepError: {exc}"
    return "no error"


def step_mismatch(backend: CrypTenBackend, rank: int) -> str:
    try:
        with backend.step(f"step-{rank}"):
            pass
    except OutOfStepError as exc:
        return f"OutOfStepError: {exc}"
    return "no error"


def products(backend: CrypTenBackend, rank: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | str:
    """Element-wise SecMul; returns the product or the detected truncation fault."""
    try:
        return backend.reveal(backend.mul(backend.share(x, src=0), backend.share(y, src=1)))
    except TruncationFaultError as exc:
        return f"TruncationFaultError: {exc}"


def costs(backend: CrypTenBackend, rank: int, n: int) -> dict[str, Any]:
    a = backend.share(torch.ones(n, dtype=torch.float64), src=0)
    with backend.step("mul"):
        backend.mul(a, a)
    with backend.step("ge"):
        backend.ge(a, 0.0)
    return backend.ledger.to_dict()


def hang_then_reveal(backend: CrypTenBackend, rank: int, sleep_s: float) -> str:
    """Party 1 hangs (sleeps) while party 0 waits for it in a reveal."""
    a = backend.share(torch.ones(3, dtype=torch.float64), src=0)
    if rank == 1:
        time.sleep(sleep_s)
        return "woke up"
    _timed_wait(lambda: backend.reveal(a))
    return "revealed"


def die_then_mul(backend: CrypTenBackend, rank: int) -> str:
    """Party 1 dies abruptly; party 0's next interactive step must fail fast."""
    a = backend.share(torch.ones(3, dtype=torch.float64), src=0)
    if rank == 1:
        os._exit(3)
    _timed_wait(lambda: backend.reveal(backend.mul(a, a)))
    return "finished"


def _timed_wait(step: Any) -> None:
    """Run an interactive step; on failure say how long the party waited."""
    start = time.monotonic()
    try:
        step()
    except Exception as exc:
        raise RuntimeError(f"peer wait failed after {time.monotonic() - start:.2f} s: {exc}") from exc


def reinit_party(rank: int, certs: str, dealer_port: int, session_ids: list[str], ports: Any, out: Any) -> None:
    """Open, use and close one session per id in THIS process (re-initialisation); party 0
    announces each session's listening port on `ports`."""
    from pathlib import Path

    from mpc.plane.tls import TlsFiles
    from mpc.session import Endpoint, Session, SessionConfig

    d = Path(certs)
    tls = TlsFiles(d / "ca.pem", d / f"party{rank}.pem", d / f"party{rank}.key")
    results = []
    for sid in session_ids:
        port = 0 if rank == 0 else ports.get(timeout=60)
        config = SessionConfig(
            rank=rank,
            session_id=sid,
            peer=Endpoint("127.0.0.1", port),
            dealer=Endpoint("127.0.0.1", dealer_port),
            tls=tls,
            timeout_s=60,
        )
        session = Session(config)
        if rank == 0:
            ports.put(session.listen())
        with session:
            backend = CrypTenBackend()
            x = backend.share(torch.tensor([1.5, -2.0], dtype=torch.float64), src=0)
            results.append(backend.reveal(backend.mul(x, x)).tolist())
    out.put((rank, results))


def scalar_products(backend: CrypTenBackend, rank: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """SecSP of rows of x and y (secret · secret) revealed."""
    return backend.reveal(backend.dot(backend.share(x), backend.share(y)))


def square_root(backend: CrypTenBackend, rank: int, a: torch.Tensor) -> torch.Tensor:
    return backend.reveal(backend.sqrt(backend.share(a, src=0)))


def clip_and_noise(backend: CrypTenBackend, rank: int, x: torch.Tensor, clip: float, sigma: float) -> dict[str, Any]:
    """SecClip of party 0's rows, then the clipped rows revealed plainly and with distributed noise."""
    clipped = backend.clip_norm(backend.share(x, src=0), clip)
    return {
        "clipped": backend.reveal(clipped),
        "noised": backend.reveal_noised(clipped, sigma),
        "noised_zero": backend.reveal_noised(clipped, 0.0),
    }


def keyed_noise(backend: CrypTenBackend, rank: int, keys: tuple[bytes, bytes], other: bytes, n: int) -> dict:
    """Each party's `keyed_random` under its own key, twice, then under another key of its own."""
    first = backend.reveal(backend.keyed_random((n,), keys[rank]))
    again = backend.reveal(backend.keyed_random((n,), keys[rank]))
    changed = backend.reveal(backend.keyed_random((n,), other if rank == 0 else keys[rank]))
    return {"first": first, "again": again, "changed": changed}


def blocked_requests(
    backend: CrypTenBackend, rank: int, block: int, x: torch.Tensor, rows: torch.Tensor, c: torch.Tensor
) -> dict[str, Any]:
    """With request blocks of `block` elements: x² and x·x (elementwise pairs and triples), the
    batched product c @ rows (c: (n, 1, k), rows: (n·k, m) fixed), the summed product
    c.reshape(1, n·k) @ rows and the scalar products of consecutive fixed rows; and how many
    dealer requests party 0 made for them."""
    from mpc.plane import request_blocks
    from mpc.plane.provider import session_link

    outer, request_blocks.BLOCK_ELEMENTS = request_blocks.BLOCK_ELEMENTS, block
    try:
        a = backend.share(x, src=0)
        fixed = backend.fix([backend.share(row, src=1) for row in rows])
        cs = backend.share(c, src=0)
        before = session_link().requests
        square, product = backend.square(a), backend.mul(a, a)
        n, k, m = c.shape[0], c.shape[2], rows.shape[1]
        batched = backend.fixed_matmul(cs, fixed, (n, k, m))
        summed = backend.fixed_matmul(backend.reshape(cs, (1, n * k)), fixed, (n * k, m))
        dots = backend.fixed_dot(fixed[:-1], fixed[1:])
        made = session_link().requests - before
    finally:
        request_blocks.BLOCK_ELEMENTS = outer
    return {
        "square": backend.reveal(square),
        "product": backend.reveal(product),
        "batched": backend.reveal(batched),
        "summed": backend.reveal(summed),
        "dots": backend.reveal(dots),
        "requests": made,
    }
