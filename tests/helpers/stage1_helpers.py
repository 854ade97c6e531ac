"""Helpers of the Stage I integration tests: clients as threads, plaintext FedAvg reference,
and a scan of a data directory for anything that looks like a client gradient in the clear."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from mpc.fixedpoint import encode

F = 16


def run_clients(dep, grad_fns: dict, rounds: range, record: dict, **client_kw) -> list[BaseException]:
    """Each client runs `rounds` through the SDK in its own thread; records (g, n) per round."""
    errors: list[BaseException] = []

    def worker(cid: str) -> None:
        try:
            with dep.client(cid, **client_kw) as c:
                c.register()
                for r in rounds:

                    def fn(params, r=r):
                        g, n = grad_fns[cid](params)
                        record[(r, cid)] = (np.asarray(g, dtype=np.float64), n)
                        return g, n

                    receipt = c.run_round(fn, after=r - 1, timeout_s=120)
                    assert receipt.round == r, f"{cid} submitted to round {receipt.round}, expected {r}"
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(cid,)) for cid in grad_fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return errors


def wait_committed(dep, round_index: int, timeout_s: float = 180.0):
    admin = dep.admin()
    try:
        end = time.time() + timeout_s
        while time.time() < end:
            status = admin.status()
            if status.latest_committed >= round_index:
                return status
            if status.error:
                raise AssertionError(f"training halted: {status.error}")
            time.sleep(0.05)
        raise TimeoutError(f"round {round_index} not committed within {timeout_s} s")
    finally:
        admin.close()


def fedavg_step(previous: np.ndarray, uploads: list[tuple[np.ndarray, int]], lr: float) -> np.ndarray:
    """Plaintext FedAvg: M_i = M_{i−1} − η·Σ n_j g_j / Σ n_j (float64)."""
    total = sum(n for _, n in uploads)
    return previous.astype(np.float64) - lr * sum(n * g for g, n in uploads) / total


def tolerance(lr: float, expected: np.ndarray) -> np.ndarray:
    """Fixed-point rounding (2^-f per coordinate, averaged) plus float32 rounding of the model."""
    return lr * 2.0**-F + 2 * np.finfo(np.float32).eps * np.maximum(1.0, np.abs(expected))


def _patterns(g: np.ndarray) -> list[bytes]:
    """Byte patterns of 4 consecutive coordinates of g in every plain encoding we could leak."""
    window = g[:4] if g.size >= 4 else g
    return [window.astype("<f4").tobytes(), window.astype("<f8").tobytes(), encode(window, F).astype("<i8").tobytes()]


def scan_for_plaintext(data_dir: Path, gradients: list[np.ndarray]) -> list[str]:
    """Files of a party's data dir that contain some gradient in a plain encoding."""
    hits = []
    files = [p for p in Path(data_dir).rglob("*") if p.is_file()]
    blobs = {p: p.read_bytes() for p in files}
    for g in gradients:
        for pat in _patterns(g):
            hits += [f"{p}" for p, data in blobs.items() if pat in data]
    return hits


def share_is_unrelated(share: np.ndarray, gradient: np.ndarray) -> tuple[float, float]:
    """(|correlation| between the share and the encoded gradient, fraction of negative ring elements)."""
    x = encode(gradient, F).astype(np.float64)
    s = share.astype(np.float64)
    corr = abs(float(np.corrcoef(s, x)[0, 1]))
    return corr, float(np.mean(share < 0))
