"""Link profiles and bandwidth shaping with `tbf` (the qdisc this kernel has).

A profile names the round-trip time between two hosts and the rate of every link. A
host-to-host path crosses two links (the sender's and the receiver's) and each round trip
crosses each of them in both directions, so each delay-line direction adds `rtt / 4`
(`hop_delay_us`). Rates are capped on both ends of each link: the host's `eth0` (what it
sends) and the switch-side `l<i>` (what it receives).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from harness.netlab.lab import LabError


@dataclass(frozen=True)
class LinkProfile:
    """An emulated network: round-trip time between hosts, rate of each link (None: not set)."""

    name: str
    rtt_ms: float | None = None
    rate_mbit: float | None = None

    def hop_delay_us(self, base_rtt_ms: float = 0.0) -> float:
        """Delay per delay-line direction so that the host-to-host RTT is `rtt_ms`, given the
        RTT the undelayed path already has (`base_rtt_ms`, measured)."""
        if self.rtt_ms is None:
            return 0.0
        return max(0.0, (self.rtt_ms - base_rtt_ms) * 1000.0 / 4.0)

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "rtt_ms": self.rtt_ms, "rate_mbit": self.rate_mbit}


DIRECT = LinkProfile("direct")
"""Links straight to the bridge: no delay line, no rate cap."""
LAN = LinkProfile("lan", rtt_ms=0.5, rate_mbit=1000.0)
WAN = LinkProfile("wan", rtt_ms=40.0, rate_mbit=100.0)
PROFILES = {p.name: p for p in (DIRECT, LAN, WAN)}


def tbf_args(rate_mbit: float, rtt_ms: float | None) -> list[str]:
    """`tc qdisc ... tbf` parameters: burst of ≥ 2 ms at the rate (and ≥ 64 KiB, so a GSO
    frame passes whole), queue of ≥ 2 bandwidth-delay products (and ≥ 1 MiB)."""
    bytes_per_s = rate_mbit * 1e6 / 8
    burst = max(64 * 1024, int(bytes_per_s * 0.002))
    limit = max(1 << 20, int(2 * bytes_per_s * (rtt_ms or 0.0) / 1000))
    return ["tbf", "rate", f"{rate_mbit:g}mbit", "burst", str(burst), "limit", str(limit)]


def _tc(ns: str, *args: str) -> None:
    proc = subprocess.run(["ip", "netns", "exec", ns, "tc", *args], check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LabError(f"tc {' '.join(args)} in {ns}: {proc.stderr.strip()}")


def shape(ns: str, iface: str, rate_mbit: float | None, rtt_ms: float | None = None) -> None:
    """Cap `iface`'s egress at `rate_mbit` (None removes the cap)."""
    subprocess.run(
        ["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", iface, "root"], check=False, capture_output=True
    )
    if rate_mbit is not None:
        _tc(ns, "qdisc", "add", "dev", iface, "root", *tbf_args(rate_mbit, rtt_ms))


def qdisc(ns: str, iface: str) -> str:
    """What `tc qdisc show` reports for `iface` (for the record of a measurement)."""
    proc = subprocess.run(
        ["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", iface], check=False, capture_output=True, text=True
    )
    return proc.stdout.strip()
