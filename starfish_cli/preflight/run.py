"""Run the preflight checks of one operator's config and print the pass/fail table.

A party config (it has `role`) is checked for: the config itself; its TLS certificate
(identity `partyN`) and erasure-signing certificate; both keys; the bind addresses
(`listen`, `peer_listen`, party0's MPC port, the metrics endpoint); the other party's peer
port (mutual TLS 1.3, identity `[tls] peer_name`) and the dealer (identity `[jobs]
dealer_identity`); the clock. A dealer config (it has `[parties]`) is checked for its
certificate (identity `--identity`, default `dealer`), key, its bind addresses (`listen`,
the metrics and health endpoints) or, with `bind` off (the dealer runs and holds them),
its own gRPC health service (SERVING, with the dealer's identity), and the clock.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from starfish_cli.preflight import checks
from starfish_cli.preflight.checks import FAIL, PASS, Check


@dataclass(frozen=True)
class Options:
    user: str | None = None  #: the service user that must own the keys (None: not checked)
    warn_days: float = 21.0
    timeout_s: float = 5.0
    identity: str = "dealer"  #: the dealer's own identity
    reach: bool = True  #: connect to the peers (off before they are up)
    bind: bool = True  #: check the service's addresses are free (off while it runs and holds them)


def _party(path: Path, opts: Options) -> list[Check]:
    from server.config import ConfigError, load_config

    try:
        cfg = load_config(path)
    except (ConfigError, OSError, ValueError) as exc:
        return [Check(f"config {path}", FAIL, f"invalid: {exc}")]
    rows = [Check(f"config {path}", PASS, f"{cfg.name}")]
    tls = cfg.tls
    rows += checks.key_file(tls.key, opts.user)
    rows += checks.certificate(tls.cert, tls.key, tls.ca, cfg.name, opts.warn_days)
    if cfg.signing.cert is not None and cfg.signing.key is not None:
        rows += checks.key_file(cfg.signing.key, opts.user)
        rows += checks.certificate(cfg.signing.cert, cfg.signing.key, tls.ca, cfg.name, opts.warn_days, signing=True)
    binds = {"client API": cfg.listen, "peer service": cfg.peer_listen, "admin API": cfg.admin_listen}
    if cfg.role == 0 and cfg.jobs.mpc_port:
        binds["MPC plane"] = f"{cfg.jobs.mpc_host}:{cfg.jobs.mpc_port}"
    if cfg.observability.metrics_listen:
        binds["metrics"] = cfg.observability.metrics_listen
    if opts.bind:
        rows += [checks.bindable(address, what) for what, address in binds.items() if address]
    if opts.reach:
        peers = {"peer": (cfg.peer_address, tls.peer_name), "dealer": (cfg.jobs.dealer, cfg.jobs.dealer_identity)}
        for what, (address, identity) in peers.items():
            if address:
                rows.append(checks.reachable(address, identity, tls.ca, tls.cert, tls.key, what, opts.timeout_s))
    return rows


def _dealer(path: Path, opts: Options) -> list[Check]:
    from mpc.plane.dealer_config import DealerConfigError, load_dealer_config

    try:
        cfg = load_dealer_config(path)
    except (DealerConfigError, OSError, ValueError) as exc:
        return [Check(f"config {path}", FAIL, f"invalid: {exc}")]
    rows = [Check(f"config {path}", PASS, f"dealer for {' and '.join(cfg.parties)}")]
    if cfg.tls is None:
        return [*rows, Check("TLS", FAIL, "the dealer config has no [tls]")]
    rows += checks.key_file(cfg.tls.key, opts.user)
    rows += checks.certificate(cfg.tls.cert, cfg.tls.key, cfg.tls.ca, opts.identity, opts.warn_days)
    binds = {"dealer service": f"{cfg.host}:{cfg.port}", "metrics": cfg.metrics_listen, "health": cfg.health_listen}
    if opts.bind:
        rows += [checks.bindable(address, what) for what, address in binds.items() if address]
    if not opts.bind and cfg.health_listen:  # the dealer runs: it holds its ports and answers
        tls = cfg.tls
        rows.append(checks.serving(cfg.health_listen, opts.identity, tls.ca, tls.cert, tls.key, opts.timeout_s))
    return rows


def run_checks(path: Path, opts: Options) -> list[Check]:
    """Every check of the config at `path` (a party's or the dealer's)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return [Check(f"config {path}", FAIL, f"unreadable: {exc}")]
    rows = _dealer(path, opts) if "parties" in data else _party(path, opts)
    return [*rows, checks.clock()]


def table(rows: list[Check]) -> str:
    width = max(len(r.name) for r in rows)
    lines = [f"{'check':{width}s}  result  detail", f"{'-' * width}  ------  ------"]
    lines += [f"{r.name:{width}s}  {r.status:6s}  {r.detail}" for r in rows]
    failed = sum(r.status == FAIL for r in rows)
    lines.append(f"{failed} failed, {sum(r.status == PASS for r in rows)} passed of {len(rows)}")
    return "\n".join(lines)
