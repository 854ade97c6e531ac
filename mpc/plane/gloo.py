"""The unencrypted reference transport: party↔party over torch.distributed/gloo.

This is CrypTen's own `DistributedCommunicator` (world size 2, no TTP rank: the dealer
link stays `mpc.plane.dealer_client`). It exists only so benchmarks can measure what the
TLS plane costs against the plaintext plane it replaced; `SessionConfig` refuses it for
any non-loopback address. Beware: torch's TCPStore (the rendezvous, hosted by party 0)
listens on every interface while a gloo session is being set up — one more reason it is
never used outside loopback measurements.
"""

from __future__ import annotations

import datetime
import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from mpc.crypten_loader import load_crypten


@contextmanager
def _distributed_timeout(timeout_s: float) -> Iterator[None]:
    """Give torch.distributed's group constructors a timeout while CrypTen calls them
    (CrypTen passes none, and gloo would wait 30 minutes for a hung peer)."""
    dist = torch.distributed
    timeout = datetime.timedelta(seconds=timeout_s)
    originals = (dist.init_process_group, dist.new_group)
    dist.init_process_group = functools.partial(originals[0], timeout=timeout)  # type: ignore[assignment]
    dist.new_group = functools.partial(originals[1], timeout=timeout)  # type: ignore[assignment]
    try:
        yield
    finally:
        dist.init_process_group, dist.new_group = originals  # type: ignore[assignment]


def open(rank: int, host: str, port: int, timeout_s: float) -> None:
    """Join the gloo group of two parties at tcp://host:port (party 0 hosts the store)."""
    crypten = load_crypten()
    os.environ.update(
        {"DISTRIBUTED_BACKEND": "gloo", "RENDEZVOUS": f"tcp://{host}:{port}", "WORLD_SIZE": "2", "RANK": str(rank)}
    )
    with _distributed_timeout(timeout_s):
        try:
            crypten.communicator._init(use_threads=False, rank=rank, world_size=2, init_ttp=False)
        except BaseException:
            close(graceful=False)
            raise


def close(graceful: bool) -> None:
    """Leave the gloo group; without `graceful` (a peer died) just drop the local state."""
    crypten = load_crypten()
    from crypten.communicator import DistributedCommunicator

    dist = torch.distributed
    if graceful and DistributedCommunicator.instance is not None:
        try:
            crypten.communicator.uninit()
            return
        except Exception:  # a broken group: reset the state below
            pass
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # the group may already be broken; the state is reset below
            pass
    DistributedCommunicator.instance = None
