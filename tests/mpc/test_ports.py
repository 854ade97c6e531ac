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


def test_a_listening_or_issued_port_is_skipped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind((ports.LOOPBACK, ports.free_port()))  # below the ephemeral range: no client takes its neighbours
        busy.listen()
        taken = busy.getsockname()[1]
        (tmp_path / "range").write_text(f"{taken + 1000}\t60999\n")
        monkeypatch.setattr(ports, "PORT_RANGE_FILE", tmp_path / "range")
        monkeypatch.setattr(ports, "LOWEST", taken)
        draws = iter([0, 5, 5, 6])  # offsets from `taken`: the listener, a free port, the same again, another
        monkeypatch.setattr(ports.secrets, "randbelow", lambda n: next(draws))
        first = ports.free_port()
        second = ports.free_port()
    assert first == taken + 5  # the listening port was skipped
    assert second == taken + 6  # taken + 5 was issued already


def test_without_a_readable_range_the_os_picks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ports, "PORT_RANGE_FILE", tmp_path / "missing")
    assert ports.below_ephemeral() is None
    port = ports.free_port()
    _bind(port)
