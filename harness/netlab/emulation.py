"""Put a link profile on every link of a lab, and check it with measurements.

`Emulation(lab).apply(profile)` wires each host's link through a delay line
(`harness.netlab.delay_line`, run in the switch namespace) when the profile has a round-trip time,
and caps both ends of each link with `tbf` when it has a rate. A namespace that stands for
several hosts (`stands_for`: the clients' host runs every client of a federation) gets that
many links' rate on its one link, so its hosts together have what as many links would give
them, each with the profile's delay. `calibrate(profile, a, b)`
measures the undelayed path between hosts a and b first, sets the per-hop delay so that the
total round trip is the profile's, then measures again: the returned record (target,
per-hop delay, measured RTT and throughput, the qdiscs and each delay line's counters) is
what a benchmark reports before trusting the link.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.netlab.lab import HOST_IFACE, SWITCH, Lab, LabError, stop_process
from harness.netlab.shaping import DIRECT, LinkProfile, qdisc, shape

PROBE_PORT = 7999
PINGS = 50
CALIBRATION_ROUNDS = 3
CALIBRATION_MARGIN_MS = 0.02
"""Aim this far above the profile's RTT, so the final measurement's minimum is not below it."""
READY_TIMEOUT_S = 30.0


class Emulation:
    """Delay lines and shaping on the links of `lab`; delay-line counters go to `stats_dir`;
    `stands_for` maps a host to the number of hosts it stands for (default 1)."""

    def __init__(self, lab: Lab, stats_dir: Path, stands_for: dict[str, int] | None = None) -> None:
        self.lab = lab
        self.stands_for = dict(stands_for or {})
        if unknown := set(self.stands_for) - set(lab.hosts):
            raise LabError(f"no host {sorted(unknown)} in the lab")
        if any(n < 1 for n in self.stands_for.values()):
            raise LabError(f"a host stands for at least one host: {self.stands_for}")
        self.stats_dir = Path(stats_dir)
        self.stats_dir.mkdir(parents=True, exist_ok=True)
        self.profile: LinkProfile = DIRECT
        self.hop_delay_us = 0.0
        self._lines: dict[str, tuple[subprocess.Popen, Path]] = {}
        self._generation = 0

    def apply(self, profile: LinkProfile, hop_delay_us: float | None = None) -> None:
        """Put `profile` on every link (per-hop delay: the profile's rtt / 4 unless given)."""
        if self.lab.single_host:
            raise LabError("a single-host lab has no links to emulate")
        self.stop_delay_lines()
        self.profile = profile
        self.hop_delay_us = profile.hop_delay_us() if hop_delay_us is None else hop_delay_us
        self._generation += 1
        for h in self.lab.hosts.values():
            delayed = profile.rtt_ms is not None
            if delayed:
                self._start_line(h.name)
            self.lab.set_delayed(h.name, delayed)
            rate = self.rate_mbit(h.name)
            shape(h.ns, HOST_IFACE, rate, profile.rtt_ms)
            shape(self.lab.switch, h.link, rate, profile.rtt_ms)

    def rate_mbit(self, host: str) -> float | None:
        """The cap of `host`'s link: the profile's rate times the hosts it stands for."""
        if self.profile.rate_mbit is None:
            return None
        return self.profile.rate_mbit * self.stands_for.get(host, 1)

    def _start_line(self, host: str) -> None:
        h = self.lab.hosts[host]
        stats = self.stats_dir / f"delay-{host}-{self._generation}.json"
        argv = [
            sys.executable,
            "-m",
            "harness.netlab.delay_line",
            h.link,
            h.relay_port,
            "--delay-us",
            f"{self.hop_delay_us:.1f}",
        ]
        proc = self.lab.popen(SWITCH, [*argv, "--stats", str(stats)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            stop_process(proc)
            raise LabError(f"the delay line of {host} did not start (exit {proc.poll()})")
        self._lines[host] = (proc, stats)

    def stop_delay_lines(self) -> dict[str, Any]:
        """Stop the running delay lines; returns their counters by host."""
        out = {}
        for host, (proc, stats) in self._lines.items():
            stop_process(proc)
            if stats.exists():
                out[host] = json.loads(stats.read_text())
        self._lines.clear()
        return out

    def measure(self, a: str, b: str, pings: int = 50, nbytes: int = 20_000_000) -> dict[str, Any]:
        """RTT and throughput from host a to host b through the current links (`harness.netlab.probe`)."""
        address = self.lab.hosts[b].address
        server = self.lab.popen(
            b, [sys.executable, "-m", "harness.netlab.probe", "serve", "--bind", address, "--port", str(PROBE_PORT)]
        )
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                argv = [
                    sys.executable,
                    "-m",
                    "harness.netlab.probe",
                    "measure",
                    "--to",
                    address,
                    "--port",
                    str(PROBE_PORT),
                ]
                proc = subprocess.run(
                    self.lab.command(a, [*argv, "--pings", str(pings), "--bytes", str(nbytes)]),
                    check=False,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                if proc.returncode == 0:
                    return json.loads(proc.stdout)
                if time.monotonic() > deadline or server.poll() is not None:
                    raise LabError(f"link probe {a} -> {b} failed: {proc.stderr.strip()[-500:]}")
                time.sleep(0.3)  # the server may not listen yet
        finally:
            stop_process(server)

    def calibrate(self, profile: LinkProfile, a: str, b: str, nbytes: int = 20_000_000) -> dict[str, Any]:
        """Apply `profile` with the per-hop delay corrected for the path's own RTT; measure.

        The undelayed path's minimum RTT sets the first per-hop delay; while the measured
        minimum RTT is below the profile's (the undelayed minimum was inflated by a busy
        machine), the shortfall is added and the link measured again."""
        record: dict[str, Any] = {"profile": profile.as_dict(), "between": [a, b]}
        if profile.rtt_ms is not None:
            self.apply(profile, hop_delay_us=0.0)
            base = self.measure(a, b, pings=PINGS, nbytes=1_000_000)
            record["undelayed_rtt_ms_min"] = base["rtt_ms_min"]
            hop = profile.hop_delay_us(base["rtt_ms_min"])
            for _ in range(CALIBRATION_ROUNDS):
                self.apply(profile, hop_delay_us=hop)
                measured = self.measure(a, b, pings=PINGS, nbytes=1_000_000)["rtt_ms_min"]
                short_ms = profile.rtt_ms + CALIBRATION_MARGIN_MS - measured
                if short_ms <= 0:
                    break
                hop += short_ms * 1000.0 / 4
        else:
            self.apply(profile)
        record["hop_delay_us"] = self.hop_delay_us
        record["link_rates_mbit"] = {name: self.rate_mbit(name) for name in self.lab.hosts}
        record["measured"] = self.measure(a, b, nbytes=nbytes)
        h = self.lab.hosts[a]
        record["qdisc"] = {"host": qdisc(h.ns, HOST_IFACE), "switch": qdisc(self.lab.switch, h.link)}
        return record

    def close(self) -> dict[str, Any]:
        return self.stop_delay_lines()


RTT_SLACK_MS = 1.0
"""Accepted excess of the minimum measured RTT over the profile's (plus 10 %)."""
RTT_SHORTFALL = 0.05
"""Accepted shortfall of the minimum measured RTT below the profile's: a delay line's timer
moves a single packet of a sub-millisecond LAN profile by a few per cent (0.492 ms measured
for 0.5 ms); an undelayed path is far below (≈ 0.05 ms on loopback veths)."""
RATE_SHORTFALL = 0.5
"""A throughput below this share of the profile's rate is reported."""


def link_problems(record: dict[str, Any]) -> list[str]:
    """Why a `calibrate` record does not show the profile's link (empty: trust it).

    The minimum RTT must lie between 5 % below the profile's RTT and 10 % + 1 ms above it:
    lower means packets were not delayed, higher that the delay lines lag. The throughput must
    not exceed the rate by more than 5 % (the shaping works) nor fall below half of it."""
    profile, measured = record["profile"], record["measured"]
    problems = []
    rtt, rate = profile.get("rtt_ms"), profile.get("rate_mbit")
    if rtt is not None:
        low, high = rtt * (1 - RTT_SHORTFALL), rtt * 1.1 + RTT_SLACK_MS
        if not low <= measured["rtt_ms_min"] <= high:
            problems.append(f"minimum RTT {measured['rtt_ms_min']} ms outside [{low:.3f}, {high:.2f}] ms")
    if rate is not None:
        got = measured["throughput_mbit"]
        if got > rate * 1.05 or got < rate * RATE_SHORTFALL:
            problems.append(f"throughput {got} Mbit/s outside [{rate * RATE_SHORTFALL:g}, {rate * 1.05:g}] Mbit/s")
    return problems
