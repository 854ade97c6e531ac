"""CrypTen session management: rendezvous, provider, timeouts, teardown (DESIGN §2, §10).

A session is one process's membership in a 2-party CrypTen computation:

* ranks 0 and 1 are the parties, rank 2 (= WORLD_SIZE) is the dealer running CrypTen's
  TTPServer; all three rendezvous over TCP at `host:port` (rank 0 hosts the store);
* the triple provider is TTP. CrypTen's default TFP provider lets party 0 generate every
  triple and unmask every opened value; it is refused unless `allow_tfp=True`, a switch
  reserved for unit tests;
* CrypTen passes no timeout to torch.distributed (gloo would wait 30 minutes on a hung
  peer); we wrap `init_process_group` and `new_group` so every collective, the rendezvous
  and an idle dealer give up after `timeout_s`;
* gloo carries shares and dealer traffic unencrypted, so a non-loopback host is refused
  unless `allow_remote=True` (deployments must then use a private network or a tunnel);
* `close()` tears the communicator down so the same process can open a new session (on a
  NEW port); `close(force=True)` also works after a peer died.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch

from mpc.fixedpoint import DEFAULT_PRECISION_BITS
from mpc.onnx_shim import load_crypten

PARTY_WORLD_SIZE = 2
"""Two computing parties; the dealer takes rank PARTY_WORLD_SIZE."""
DEALER_RANK = PARTY_WORLD_SIZE
DEFAULT_TIMEOUT_S = 120.0
"""Default bound on any single wait for a peer (rendezvous, collective, idle dealer)."""


class InsecureProviderError(RuntimeError):
    """A configuration would let one party learn the other's shares (e.g. CrypTen's TFP)."""


class SessionError(RuntimeError):
    """The session could not be set up or is used in the wrong state."""


@dataclass(frozen=True)
class SessionConfig:
    """Explicit settings of one process's CrypTen session."""

    rank: int
    port: int
    host: str = "127.0.0.1"
    precision_bits: int = DEFAULT_PRECISION_BITS
    timeout_s: float = DEFAULT_TIMEOUT_S
    provider: str = "TTP"
    allow_tfp: bool = False
    allow_remote: bool = False
    torch_threads: int = 1
    count_communication: bool = True

    def __post_init__(self) -> None:
        if self.rank not in (0, 1, DEALER_RANK):
            raise SessionError(f"rank must be 0, 1 (parties) or {DEALER_RANK} (dealer), got {self.rank}")
        if not 0 < self.port < 65536:
            raise SessionError(f"port must be in 1..65535, got {self.port}")
        if self.timeout_s <= 0:
            raise SessionError("timeout_s must be positive")
        if self.provider == "TFP" and not self.allow_tfp:
            raise InsecureProviderError(
                "CrypTen's TFP provider lets party 0 generate all triples and unmask every value; "
                "use the TTP provider with a separate dealer (TFP is only for unit tests)"
            )
        if self.provider not in ("TTP", "TFP"):
            raise SessionError(f"unsupported provider {self.provider!r}; use 'TTP'")
        if self.provider == "TFP" and self.rank == DEALER_RANK:
            raise SessionError("the TFP provider has no dealer")
        if not self.allow_remote and not _is_loopback(self.host):
            raise SessionError(
                f"host {self.host!r} is not a loopback address; the gloo data plane is unencrypted, "
                "so a remote rendezvous needs allow_remote=True over a private network or tunnel"
            )

    @property
    def is_dealer(self) -> bool:
        return self.rank == DEALER_RANK

    @property
    def rendezvous(self) -> str:
        return f"tcp://{self.host}:{self.port}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextmanager
def _distributed_timeout(timeout_s: float) -> Iterator[None]:
    """Give torch.distributed's process-group constructors a timeout while CrypTen calls them."""
    dist = torch.distributed
    timeout = datetime.timedelta(seconds=timeout_s)
    originals = (dist.init_process_group, dist.new_group)
    dist.init_process_group = functools.partial(originals[0], timeout=timeout)  # type: ignore[assignment]
    dist.new_group = functools.partial(originals[1], timeout=timeout)  # type: ignore[assignment]
    try:
        yield
    finally:
        dist.init_process_group, dist.new_group = originals  # type: ignore[assignment]


def configure(config: SessionConfig) -> None:
    """Set the environment and CrypTen's global config for `config` (no communication)."""
    crypten = load_crypten()
    torch.set_num_threads(config.torch_threads)
    os.environ.update(
        {
            "DISTRIBUTED_BACKEND": "gloo",
            "RENDEZVOUS": config.rendezvous,
            "WORLD_SIZE": str(PARTY_WORLD_SIZE),
            "RANK": str(config.rank),
        }
    )
    crypten.cfg.mpc.provider = config.provider
    crypten.cfg.encoder.precision_bits = config.precision_bits
    crypten.cfg.communicator.verbose = config.count_communication
    if crypten.cfg.mpc.provider == "TFP" and not config.allow_tfp:  # defence in depth
        raise InsecureProviderError("refusing to run with the TFP provider")


class Session:
    """A party's CrypTen session; use as a context manager or call open()/close()."""

    def __init__(self, config: SessionConfig) -> None:
        if config.is_dealer:
            raise SessionError("the dealer runs mpc.dealer.run_dealer, not a party session")
        self.config = config
        self._open = False

    def open(self) -> "Session":
        """Rendezvous with the other party and the dealer (blocks up to timeout_s)."""
        if self._open:
            raise SessionError("session already open")
        crypten = load_crypten()
        if crypten.is_initialized():
            raise SessionError("another CrypTen session is open in this process; close it first")
        configure(self.config)
        with _distributed_timeout(self.config.timeout_s):
            try:
                crypten.init()
            except Exception:
                force_teardown()
                raise
        self._open = True
        return self

    def close(self, force: bool = False) -> None:
        """Leave the session; `force` skips the goodbye to the dealer (peer already gone)."""
        if not self._open:
            return
        self._open = False
        if force:
            force_teardown()
            return
        crypten = load_crypten()
        try:
            crypten.uninit()
        except Exception:
            force_teardown()
            raise
        finally:
            _uninit_ttp_client()

    @property
    def is_open(self) -> bool:
        return self._open

    def __enter__(self) -> "Session":
        return self.open()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(force=exc_type is not None)


def _uninit_ttp_client() -> None:
    load_crypten()
    from crypten.mpc.provider.ttp_provider import TTPClient

    TTPClient.uninit()


def force_teardown() -> None:
    """Drop all process-group state after a failure (DESIGN §10 re-init recipe)."""
    load_crypten()
    from crypten.communicator import DistributedCommunicator

    dist = torch.distributed
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # the group may already be broken; the state is reset below
            pass
    DistributedCommunicator.instance = None
    _uninit_ttp_client()
