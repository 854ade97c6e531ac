"""The emulated network itself: namespaces, links, delay lines, shaping, capture, cleanup."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.netlab.capture import Capture, tcpdump_missing
from harness.netlab.emulation import Emulation, link_problems
from harness.netlab.flows import find, read_streams
from harness.netlab.lab import HOST_IFACE, Lab, LabError, namespaces, sweep
from harness.netlab.shaping import LinkProfile, qdisc
from harness.netlab.tls_records import only_hellos_in_clear, parse_records, server_hello_version
from mpc.plane.certificate_authority import make_certs

pytestmark = pytest.mark.needs_netns
HOSTS = {"alpha": "10.31.0.1", "beta": "10.31.0.2", "gamma": "10.31.0.3"}
PEERS = str(Path(__file__).with_name("wire_peers.py"))


def _connect(lab: Lab, a: str, b: str) -> str:
    """What a TCP connect from a to a closed port of b meets: "timeout" (no path) or a refusal."""
    target = f"{HOSTS[b]}:1"
    return json.loads(lab.run(a, [sys.executable, PEERS, "try-connect", target], timeout=30).stdout)[target]


def _ours(lab: Lab) -> list[str]:
    return sorted(n for n in namespaces() if n.startswith(lab.tag))


def test_hosts_reach_each_other_only_inside_their_namespaces(tmp_path):
    lab = Lab(HOSTS)
    with lab:
        assert _ours(lab) == sorted(lab.tag + n for n in [*HOSTS, "sw"])
        emu = Emulation(lab, tmp_path)
        for a, b in (("alpha", "beta"), ("beta", "gamma"), ("gamma", "alpha")):
            assert emu.measure(a, b, pings=3, nbytes=100_000)["throughput_bytes"] == 100_000
        routes = lab.run("alpha", ["ip", "-o", "route"]).stdout
        assert "10.31.0.0/24 dev eth0" in routes and "default" not in routes
        host_addrs = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
        assert "10.31.0." not in host_addrs  # nothing was added to the machine's own interfaces
    assert _ours(lab) == []


def test_namespaces_are_removed_when_the_test_fails():
    lab = Lab(HOSTS)
    with pytest.raises(RuntimeError), lab:
        sleeper = lab.popen("alpha", ["sleep", "600"])
        raise RuntimeError("the test body failed")
    assert _ours(lab) == []
    assert sleeper.poll() is not None  # processes started in the lab are stopped too


def test_a_lab_left_by_a_dead_process_is_swept():
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    stale = f"sfnl{int(dead.stdout)}-alpha"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in sweep()
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True, check=False)
    assert stale not in namespaces()


def test_bad_host_names_and_mixed_networks_are_refused():
    with pytest.raises(LabError, match="host name"):
        Lab({"Party-0": "10.31.0.1"})
    with pytest.raises(LabError, match="one /24 network"):
        Lab({"a": "10.31.0.1", "b": "10.32.0.1"})


def test_single_host_lab_puts_every_address_on_loopback(tmp_path):
    with Lab(HOSTS, single_host=True) as lab:
        assert len({h.ns for h in lab.hosts.values()}) == 1
        addrs = lab.run("alpha", ["ip", "-o", "addr", "show", "dev", "lo"]).stdout
        assert all(f"{a}/32" in addrs for a in HOSTS.values())
        assert Emulation(lab, tmp_path).measure("alpha", "gamma", pings=3, nbytes=100_000)["rtt_ms_min"] < 5


def test_delay_and_rate_really_apply(tmp_path):
    profile = LinkProfile("test", rtt_ms=20.0, rate_mbit=40.0)
    with Lab(HOSTS) as lab:
        emu = Emulation(lab, tmp_path)
        record = emu.calibrate(profile, "alpha", "beta", nbytes=6_000_000)
        counters = emu.close()
    # a packet cannot arrive before its delay, the real-time delay lines are not late, and the
    # throughput stays under the rate: the emulated link is the profile's
    assert link_problems(record) == []
    assert "tbf" in record["qdisc"]["host"] and "rate 40Mbit" in record["qdisc"]["switch"]
    assert counters["alpha"]["a_to_b"]["bytes"] >= 6_000_000
    assert counters["alpha"]["a_to_b"]["dropped"] == 0


def test_a_host_standing_for_several_gets_their_links_rate(tmp_path):
    """beta and gamma stand for 3 hosts each: between them 3 links' rate, with alpha one link's."""
    profile = LinkProfile("test", rate_mbit=40.0)
    with Lab(HOSTS) as lab:
        with pytest.raises(LabError, match="no host"):
            Emulation(lab, tmp_path, stands_for={"delta": 2})
        emu = Emulation(lab, tmp_path, stands_for={"beta": 3, "gamma": 3})
        emu.apply(profile)
        assert {h: emu.rate_mbit(h) for h in HOSTS} == {"alpha": 40.0, "beta": 120.0, "gamma": 120.0}
        assert "rate 120Mbit" in qdisc(lab.hosts["gamma"].ns, HOST_IFACE)
        wide = emu.measure("gamma", "beta", pings=3, nbytes=6_000_000)["throughput_mbit"]
        narrow = emu.measure("alpha", "beta", pings=3, nbytes=3_000_000)["throughput_mbit"]
    assert narrow <= 40.0 * 1.05 < 60.0 < wide <= 120.0 * 1.05


def test_a_link_taken_down_cuts_its_host_off(tmp_path):
    with Lab(HOSTS) as lab:
        emu = Emulation(lab, tmp_path)
        lab.set_link("beta", up=False)
        assert _connect(lab, "alpha", "beta") == "timeout"  # no answer at all, not even a reset
        lab.set_link("beta", up=True)
        assert _connect(lab, "alpha", "beta") == "ConnectionRefusedError"
        assert emu.measure("alpha", "beta", pings=2, nbytes=10_000)["throughput_bytes"] == 10_000


def test_a_cut_path_separates_two_hosts_and_spares_their_other_links(tmp_path):
    with Lab(HOSTS) as lab:
        emu = Emulation(lab, tmp_path)
        lab.set_path("alpha", "beta", up=False)
        assert _connect(lab, "alpha", "beta") == "timeout"
        for a, b in (("alpha", "gamma"), ("beta", "gamma")):
            assert emu.measure(a, b, pings=2, nbytes=10_000)["throughput_bytes"] == 10_000
        lab.set_path("alpha", "beta", up=True)
        assert _connect(lab, "alpha", "beta") == "ConnectionRefusedError"
        assert emu.measure("alpha", "beta", pings=2, nbytes=10_000)["throughput_bytes"] == 10_000


@pytest.mark.skipif(tcpdump_missing() is not None, reason=str(tcpdump_missing()))
def test_capture_finds_bytes_sent_in_the_clear_and_recognises_tls13(tmp_path):
    certs = make_certs(tmp_path / "certs", ips=(HOSTS["beta"],))
    secret = bytes(range(7, 7 + 64)) * 4
    profile = LinkProfile("test", rtt_ms=2.0, rate_mbit=200.0)
    with Lab(HOSTS) as lab:
        Emulation(lab, tmp_path).apply(profile)
        with Capture(lab, tmp_path / "bridge.pcap") as cap:
            for serve, send in (
                (["serve-plain", "7001"], ["send-plain", HOSTS["beta"], "7001", secret.hex()]),
                (
                    ["serve-tls", "7002", str(certs["party1"]), str(certs["party1_key"])],
                    ["send-tls", HOSTS["beta"], "7002", str(certs["ca"]), secret.hex()],
                ),
            ):
                server = lab.popen("beta", [sys.executable, PEERS, *serve], stdout=subprocess.PIPE, text=True)
                assert server.stdout.readline().strip() == "listening"
                lab.run("alpha", [sys.executable, PEERS, *send])
                assert int(server.stdout.readline()) == len(secret)
                server.wait(10)
        assert cap.stats["captured"] > 0
    streams = read_streams(tmp_path / "bridge.pcap", cap.ifindexes)
    assert all(s.gaps == 0 and s.isn is not None for s in streams.values())  # every stream whole
    assert len(read_streams(tmp_path / "bridge.pcap")) == len(streams)  # all ports: the same flows, seen 3 times
    plain = streams[(HOSTS["alpha"], next(s.sport for s in streams.values() if s.dport == 7001), HOSTS["beta"], 7001)]
    hits = find(streams, {"secret": secret[:32]})
    assert [(n, s.key) for n, s in hits] == [("secret", plain.key)]  # found in the clear, nowhere else
    tls_up = next(s for s in streams.values() if s.dport == 7002)
    tls_down = next(s for s in streams.values() if s.sport == 7002)
    for s in (tls_up, tls_down):
        verdict = parse_records(s.payload)
        assert verdict.well_formed and only_hellos_in_clear(verdict), verdict
    assert server_hello_version(tls_down.payload) == 0x0304
    assert parse_records(plain.payload).error is not None


def test_a_link_that_is_not_the_profile_is_reported():
    record = {
        "profile": {"rtt_ms": 40.0, "rate_mbit": 100.0},
        "measured": {"rtt_ms_min": 0.3, "throughput_mbit": 900.0},
    }
    problems = link_problems(record)
    assert len(problems) == 2 and "minimum RTT" in problems[0] and "throughput" in problems[1]
    lan = {"profile": {"rtt_ms": 0.5, "rate_mbit": 1000.0}, "measured": {"rtt_ms_min": 0.492, "throughput_mbit": 940.0}}
    assert link_problems(lan) == []  # a delay line's jitter of a few per cent is the profile
    lan["measured"]["rtt_ms_min"] = 0.46
    assert link_problems(lan) == ["minimum RTT 0.46 ms outside [0.475, 1.55] ms"]
