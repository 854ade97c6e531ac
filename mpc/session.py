"""A party's two-party CrypTen session on the MPC plane: rendezvous, dealer, teardown.

A session is one party process's membership in one job attempt's computation, named by a
session id (`<job id>.<attempt>`):

* party 0 listens on its configured address (`listen()` binds it, so the port can be
  announced before `open()`); party 1 connects to it. Both ends authenticate each other
  with TLS 1.3 and the deployment's certificates (`mpc.plane`), check the session id,
  and exchange shares over two one-way lanes (`PlaneCommunicator`);
* both parties join the session at the dealer service (its certificate must name
  `dealer_identity`) and receive their PRG keys; party 0 fetches its shares of the
  correlated randomness from it (`DealerProvider`, installed as CrypTen's TTP provider —
  CrypTen's TFP provider, which lets party 0 make every triple, is never used);
* every wait is bounded by `timeout_s` (a dead peer is noticed at once, a silent one after
  `timeout_s`); `close()` says goodbye to the dealer and leaves the process ready for
  another session; `close(force=True)` works after a peer died.

Transports: "tls" (every deployment). "tcp" (the same plane without TLS) and "gloo"
(party↔party over torch.distributed/gloo, CrypTen's own communicator) exist only to
measure what encryption costs; both are refused unless every address is loopback.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import torch

from mpc.crypten_loader import load_crypten
from mpc.fixedpoint import DEFAULT_PRECISION_BITS
from mpc.plane import communicator, gloo, provider
from mpc.plane.communicator import PlaneCommunicator
from mpc.plane.dealer_client import DealerInfo, DealerLink, open_dealer_link
from mpc.plane.rendezvous import PeerListener, check_session_id, connect_peer
from mpc.plane.tls import TlsFiles, client_context, server_context

DEFAULT_TIMEOUT_S = 120.0
"""Default bound on any single wait for a peer (rendezvous, exchange, dealer)."""
TRANSPORTS = ("tls", "tcp", "gloo")


class InsecureProviderError(RuntimeError):
    """A configuration would let one party learn the other's shares (e.g. CrypTen's TFP)."""


class SessionError(RuntimeError):
    """The session could not be set up or is used in the wrong state."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __post_init__(self) -> None:
        if not self.host:
            raise SessionError("an endpoint needs a host")
        if not 0 <= self.port < 65536:
            raise SessionError(f"port must be in 0..65535, got {self.port}")

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class SessionConfig:
    """Explicit settings of one party's session (see the module doc)."""

    rank: int
    session_id: str
    peer: Endpoint  #: party 0: the address it listens on (port 0: any free one); party 1: where party 0 listens
    dealer: Endpoint
    tls: TlsFiles | None = None
    peer_identity: str = ""  #: certificate name of the other party ("" = party<1 - rank>)
    dealer_identity: str = "dealer"
    transport: str = "tls"
    precision_bits: int = DEFAULT_PRECISION_BITS
    timeout_s: float = DEFAULT_TIMEOUT_S
    torch_threads: int = 1
    count_communication: bool = True

    def __post_init__(self) -> None:
        if self.rank not in (0, 1):
            raise SessionError(f"rank must be 0 or 1 (the dealer is a service of its own), got {self.rank}")
        try:
            check_session_id(self.session_id)
        except ValueError as exc:
            raise SessionError(str(exc)) from None
        if self.timeout_s <= 0:
            raise SessionError("timeout_s must be positive")
        if self.transport not in TRANSPORTS:
            raise SessionError(f"transport must be one of {TRANSPORTS}, got {self.transport!r}")
        if self.transport == "tls" and self.tls is None:
            raise SessionError("the tls transport needs the certificate files (tls=TlsFiles(...))")
        if self.transport != "tls" and not all(_is_loopback(e.host) for e in (self.peer, self.dealer)):
            raise SessionError(
                f"the {self.transport!r} transport is unencrypted and only for loopback measurements; "
                "use transport='tls' for any other address"
            )
        if self.transport == "gloo" and self.peer.port == 0:
            raise SessionError("the gloo transport needs a fixed rendezvous port")

    @property
    def expected_peer(self) -> str:
        return self.peer_identity or f"party{1 - self.rank}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def active_communicator() -> Any:
    """This process's CrypTen communicator (the open session's), e.g. to measure a transport."""
    load_crypten()
    import crypten.communicator as comm

    return comm.get()


def configure(config: SessionConfig) -> None:
    """CrypTen's global settings for `config` and the dealer provider (no communication)."""
    crypten = load_crypten()
    torch.set_num_threads(config.torch_threads)
    crypten.cfg.mpc.provider = "TTP"
    crypten.cfg.encoder.precision_bits = config.precision_bits
    crypten.cfg.communicator.verbose = config.count_communication
    provider.install(None)


class Session:
    """A party's session; use as a context manager or call listen()/open()/close()."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        self._listener: PeerListener | None = None
        self._link: DealerLink | None = None
        self._open = False

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def dealer(self) -> DealerInfo | None:
        """Which dealer (address, certificate identity and fingerprint) serves this session."""
        return self._link.info if self._link is not None else None

    def listen(self) -> int:
        """party 0: bind the configured address now; returns the port party 1 must connect to."""
        cfg = self.config
        if cfg.rank != 0:
            raise SessionError("only party 0 listens")
        if cfg.transport == "gloo":
            return cfg.peer.port
        if self._listener is None:
            ctx = server_context(cfg.tls) if cfg.tls is not None else None
            self._listener = PeerListener(cfg.peer.host, cfg.peer.port, ctx)
        return self._listener.port

    def open(self) -> Session:
        """Meet the other party and join the session at the dealer (blocks up to timeout_s each)."""
        if self._open:
            raise SessionError("session already open")
        crypten = load_crypten()
        if crypten.communicator.is_initialized():
            raise SessionError("another CrypTen session is open in this process; close it first")
        configure(self.config)
        try:
            self._meet_peer()
            self._join_dealer()
            crypten._setup_prng()
        except BaseException:
            self._teardown(graceful=False)
            raise
        self._open = True
        return self

    def _meet_peer(self) -> None:
        cfg = self.config
        if cfg.transport == "gloo":
            gloo.open(cfg.rank, cfg.peer.host, cfg.peer.port, cfg.timeout_s)
            return
        if cfg.rank == 0:
            self.listen()
            assert self._listener is not None
            channel = self._listener.accept_peer(cfg.session_id, cfg.expected_peer if cfg.tls else "", cfg.timeout_s)
            self._listener = None
        else:
            ctx = client_context(cfg.tls) if cfg.tls is not None else None
            expect = cfg.expected_peer if cfg.tls else ""
            channel = connect_peer(cfg.peer.host, cfg.peer.port, ctx, expect, cfg.session_id, cfg.timeout_s)
        communicator.install(PlaneCommunicator(cfg.rank, channel))

    def _join_dealer(self) -> None:
        cfg = self.config
        ctx = client_context(cfg.tls) if cfg.transport == "tls" and cfg.tls is not None else None
        expect = cfg.dealer_identity if ctx is not None else ""
        self._link = open_dealer_link(
            cfg.dealer.host, cfg.dealer.port, ctx, expect, cfg.session_id, cfg.rank, cfg.timeout_s
        )
        provider.install(self._link)

    def close(self, force: bool = False) -> None:
        """Leave the session; `force` skips the goodbyes (a peer is already gone)."""
        if not self._open:
            return
        self._open = False
        self._teardown(graceful=not force)

    def _teardown(self, graceful: bool) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._link is not None:
            self._link.close(graceful=graceful)
        provider.install(None)
        if self.config.transport == "gloo":
            gloo.close(graceful)
        else:
            PlaneCommunicator.shutdown()
        communicator.install(None)

    def __enter__(self) -> Session:
        return self.open()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(force=exc_type is not None)
