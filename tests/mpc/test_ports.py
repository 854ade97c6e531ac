"""mpc.ports.free_port: ports below the ephemeral range, bindable, never handed out twice."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mpc import ports


def _bind(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((ports.LOOPBACK, port))


def test_ports_lie_below_the_ephemeral_range_and_are_distinct() -> None:
    span = ports.below_ephemeral()
    if span is None:
        pytest.skip(f"{ports.PORT_RANGE_FILE} is not readable here")
    picked = [ports.free_port() for _ in range(300)]
    assert len(set(picked)) == len(picked)
    assert all(span[0] <= p < span[1] for p in picked)
    for p in picked[:20]:
        _bind(p)  # free when handed out, nothing else took it


def _two_free_offsets(taken: int) -> tuple[int, int]:
    """Two offsets above `taken` whose ports are bindable now (another process may hold any
    fixed neighbour of the listener)."""
    free = [k for k in range(1, 200) if ports._bindable(ports.LOOPBACK, taken + k)]
    assert len(free) >= 2, "no two free ports next to the listener"
    return free[0], free[1]


def test_a_listening_or_issued_port_is_skipped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ports, "_issued", set())  # ports this worker issued earlier play no part
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind((ports.LOOPBACK, ports.free_port()))  # below the ephemeral range: no client takes its neighbours
        busy.listen()
        taken = busy.getsockname()[1]
        (tmp_path / "range").write_text(f"{taken + 1000}\t60999\n")
        monkeypatch.setattr(ports, "PORT_RANGE_FILE", tmp_path / "range")
        monkeypatch.setattr(ports, "LOWEST", taken)
        a, b = _two_free_offsets(taken)
        draws = iter([0, a, a, b])  # offsets from `taken`: the listener, a free port, the same again, another
        monkeypatch.setattr(ports.secrets, "randbelow", lambda n: next(draws))
        first = ports.free_port()
        second = ports.free_port()
    assert first == taken + a  # the listening port was skipped
    assert second == taken + b  # taken + a was issued already


def test_without_a_readable_range_the_os_picks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ports, "PORT_RANGE_FILE", tmp_path / "missing")
    assert ports.below_ephemeral() is None
    port = ports.free_port()
    _bind(port)
