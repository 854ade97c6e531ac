"""Network namespaces joined by a bridge: one namespace per emulated host.

Topology (`Lab(hosts).create()`), with `P = sfnl<pid>-`::

    P<host>  eth0 (address/24) ══veth══ l<i>  ┐
                                                 │ switch namespace P"sw": bridge br0
       (delayed link: l<i> ⇄ delay line ⇄ d<i> ══veth══ b<i> ── br0;  direct: l<i> ── br0)

Every name carries the creating process's id, so concurrent labs never collide and a lab
whose creator died can be recognised and removed (`sweep`). Nothing is created outside
the lab's own namespaces: the machine's interfaces, routes and firewall are untouched.
With `single_host=True` every host is the same namespace and every address sits on its
loopback interface: the same addresses and configs, no wire (the reference run).

`close()` stops the lab's processes and deletes its namespaces; it runs on `with` exit,
at interpreter exit and when the object is collected, and is idempotent.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Self

PREFIX = "sfnl"
"""Every namespace a lab creates is named PREFIX<pid>-<host>."""
NAME_RE = re.compile(rf"^{PREFIX}(\d+)-[a-z0-9]+$")
SWITCH = "sw"
BRIDGE = "br0"
HOST_IFACE = "eth0"
STOP_WAIT_S = 5.0
LINK_UP_WAIT_S = 5.0


class LabError(RuntimeError):
    """A namespace, link or process of the lab could not be set up."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], check=False, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def unavailable() -> str | None:
    """Why a lab cannot be built on this machine (None when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (this process is not root)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    veth = _ip("-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1", check=False)
    _ip("netns", "del", probe, check=False)
    if veth.returncode != 0:
        return f"cannot create a veth pair: {veth.stderr.strip()}"
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def namespaces() -> list[str]:
    """Names of every network namespace on the machine (`ip netns list`)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def sweep() -> list[str]:
    """Delete the namespaces of labs whose creating process is gone; returns their names."""
    removed = []
    for name in namespaces():
        m = NAME_RE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _kill_namespace_processes(name)
            if _ip("netns", "del", name, check=False).returncode == 0:
                removed.append(name)
    return removed


def _kill_namespace_processes(ns: str) -> None:
    for pid in _ip("netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


@dataclass(frozen=True)
class Host:
    """One emulated host: its namespace, address and the switch-side end of its link."""

    name: str
    index: int
    address: str
    ns: str
    prefix_len: int

    @property
    def link(self) -> str:
        """Switch-side interface facing this host (`ip link set <link> down` cuts it off)."""
        return f"l{self.index}"

    @property
    def relay_port(self) -> str:
        """Switch-side interface between this host's delay line and the bridge."""
        return f"d{self.index}"

    @property
    def bridge_port(self) -> str:
        return f"b{self.index}"


class Lab:
    """Emulated hosts on one bridge (see module doc); `hosts` maps name -> IPv4 address."""

    def __init__(self, hosts: Mapping[str, str], prefix_len: int = 24, single_host: bool = False) -> None:
        self.tag = f"{PREFIX}{os.getpid()}-"
        self.single_host = single_host
        names = list(hosts)
        for name in names:
            if not re.fullmatch(r"[a-z0-9]{1,8}", name) or name == SWITCH:
                raise LabError(f"host name {name!r}: 1-8 lower-case letters or digits, not {SWITCH!r}")
        nets = {ipaddress.ip_interface(f"{a}/{prefix_len}").network for a in hosts.values()}
        if len(nets) != 1:
            raise LabError(f"all addresses must share one /{prefix_len} network, got {sorted(map(str, nets))}")
        self.hosts = {
            n: Host(n, i, hosts[n], self.tag + ("host" if single_host else n), prefix_len) for i, n in enumerate(names)
        }
        self.switch = self.tag + SWITCH
        self._procs: list[subprocess.Popen] = []
        self._created: list[str] = []
        self._finalizer = weakref.finalize(self, _teardown, self._created, self._procs)
        atexit.register(self._finalizer)

    # -- building -------------------------------------------------------------------------
    def create(self) -> Lab:
        """Create the namespaces, bridge and links (all links direct, no delay, no shaping)."""
        try:
            if self.single_host:
                self._create_single()
            else:
                self._create_switched()
        except BaseException:
            self.close()
            raise
        return self

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _create_single(self) -> None:
        ns = next(iter(self.hosts.values())).ns
        self._add_ns(ns)
        for h in self.hosts.values():
            _ip("-n", ns, "addr", "add", f"{h.address}/32", "dev", "lo")

    def _create_switched(self) -> None:
        self._add_ns(self.switch)
        _ip("-n", self.switch, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", self.switch, "link", "set", BRIDGE, "up")
        for h in self.hosts.values():
            self._add_ns(h.ns)
            _ip("link", "add", HOST_IFACE, "netns", h.ns, "type", "veth", "peer", "name", h.link, "netns", self.switch)
            _ip("-n", self.switch, "link", "add", h.relay_port, "type", "veth", "peer", "name", h.bridge_port)
            _ip("-n", h.ns, "addr", "add", f"{h.address}/{h.prefix_len}", "dev", HOST_IFACE)
            _ip("-n", h.ns, "link", "set", HOST_IFACE, "up")
            for iface in (h.link, h.relay_port, h.bridge_port):
                _ip("-n", self.switch, "link", "set", iface, "up")
            self.set_delayed(h.name, False)

    def set_delayed(self, host: str, delayed: bool) -> None:
        """Wire a host's link through its delay line (`d<i>`/`b<i>`) or straight to the bridge."""
        h = self.hosts[host]
        attached, detached = (h.bridge_port, h.link) if delayed else (h.link, h.bridge_port)
        _ip("-n", self.switch, "link", "set", detached, "nomaster")
        _ip("-n", self.switch, "link", "set", attached, "master", BRIDGE)

    def bridge_ports(self) -> list[str]:
        """Interfaces currently attached to the bridge (where a capture listens)."""
        out = _ip("-n", self.switch, "-o", "link", "show", "master", BRIDGE).stdout
        return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.strip()]

    def ifindex(self, ns: str, iface: str) -> int:
        out = _ip("-n", ns, "-o", "link", "show", iface).stdout
        return int(out.split(":", 1)[0])

    # -- processes ------------------------------------------------------------------------
    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """`argv` run inside a host's namespace (or the switch's, host = "sw")."""
        ns = self.switch if host == SWITCH else self.hosts[host].ns
        return ["ip", "netns", "exec", ns, *argv]

    def popen(self, host: str, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start a process inside a host's namespace; the lab stops it on close()."""
        proc = subprocess.Popen(self.command(host, argv), start_new_session=True, **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, host: str, argv: Sequence[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run a command inside a host's namespace and wait; raises LabError when it fails."""
        proc = subprocess.run(self.command(host, argv), check=False, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise LabError(f"{' '.join(argv)} in {host}: {proc.stderr.strip() or proc.returncode}")
        return proc

    def set_link(self, host: str, up: bool) -> None:
        """Bring a host's link up or down at the switch (`ip link set l<i> up|down`).

        Bringing it up returns once the link is operational and no host remembers a failed
        address resolution from the outage (those would answer "no route to host")."""
        link = self.hosts[host].link
        _ip("-n", self.switch, "link", "set", link, "up" if up else "down")
        if up:
            self._await_operational(link)
            self._forget_failed_neighbours()

    def _await_operational(self, link: str, wait_s: float = LINK_UP_WAIT_S) -> None:
        deadline = time.monotonic() + wait_s
        while "state UP" not in _ip("-n", self.switch, "-o", "link", "show", link).stdout:
            if time.monotonic() > deadline:
                raise LabError(f"link {link} is not operational {wait_s:.0f} s after being brought up")
            time.sleep(0.05)

    def _forget_failed_neighbours(self) -> None:
        for ns in sorted({h.ns for h in self.hosts.values()}):
            _ip("-n", ns, "neigh", "flush", "all", check=False)

    def set_path(self, a: str, b: str, up: bool) -> None:
        """Cut (or restore) the path between two hosts at the switch while each keeps its link
        to every other host: both hosts' bridge ports are marked `isolated`, and the bridge
        never forwards between two isolated ports. One such cut at a time."""
        attached = set(self.bridge_ports())
        for host in (a, b):
            h = self.hosts[host]
            port = h.link if h.link in attached else h.bridge_port
            argv = ["bridge", "link", "set", "dev", port, "isolated", "off" if up else "on"]
            proc = subprocess.run(self.command(SWITCH, argv), check=False, capture_output=True, text=True)
            if proc.returncode != 0:
                raise LabError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.returncode}")
        if up:
            self._forget_failed_neighbours()

    # -- teardown -------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every process the lab started, then delete its namespaces (idempotent)."""
        self._finalizer()

    def __enter__(self) -> Self:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, wait_s: float = STOP_WAIT_S) -> None:
    """Signal a process group started by the lab and reap it (SIGKILL after `wait_s`)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(wait_s)


def _teardown(created: list[str], procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):
        stop_process(proc)
    procs.clear()
    for ns in reversed(created):
        _kill_namespace_processes(ns)
        _ip("netns", "del", ns, check=False)
    created.clear()
