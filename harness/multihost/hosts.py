"""Run the recipe's operators on emulated hosts: each service in its own namespace.

`OperatorHosts(lab, recipe)` starts an operator with its installed systemd unit's command
line (`Recipe.command`) inside the namespace of the host of the same name, as systemd would
without being PID 1 here: a clean environment (the unit's `Environment=` plus what systemd
sets for `User=`), working directory `/`, and the unit's user (`Recipe.user`, switched to
with `setpriv`: no capabilities, no new privileges). It logs to `<root>/logs/<name>.log`
and waits until the service listens on its configured address (seen from inside that
namespace with `ss`). `firewall(name)` loads the recipe's nftables
rules into that host. Data directories can be saved and restored between runs, so the same
job can be run on several networks from one Stage I history.
"""

from __future__ import annotations

import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.multihost.recipe import OPERATORS, PARTIES, Recipe
from harness.netlab.lab import Lab, LabError, stop_process

START_TIMEOUT_S = 180.0
"""A party imports torch at start: slow on a loaded machine."""


class OperatorHosts:
    """The operators' services of `recipe`, each in its namespace of `lab`."""

    def __init__(self, lab: Lab, recipe: Recipe) -> None:
        self.lab = lab
        self.recipe = recipe
        self.procs: dict[str, subprocess.Popen] = {}
        (recipe.root / "logs").mkdir(parents=True, exist_ok=True)

    def start(self, names: tuple[str, ...] = OPERATORS, firewall: bool = True) -> None:
        """Start the operators (loading their firewall rules first, on a multi-host lab)."""
        if firewall and not self.lab.single_host:
            for name in names:
                self.firewall(name)
        for name in names:
            with open(self.log_path(name), "ab") as log:
                self.procs[name] = self.lab.popen(
                    name, service_argv(self.recipe, name), stdout=log, stderr=subprocess.STDOUT, cwd="/"
                )
        for name in names:
            self.wait_listening(name)

    def log_path(self, name: str) -> Path:
        return self.recipe.root / "logs" / f"{name}.log"

    def wait_listening(self, name: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until `name` listens on its `listen` address (or raise, naming its log)."""
        host, port = self.recipe.address(name).rsplit(":", 1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            proc = self.procs[name]
            if proc.poll() is not None:
                raise LabError(f"{name} exited with {proc.returncode}; see {self.log_path(name)}")
            out = self.lab.run(name, ["ss", "-Hltn", f"src {host}:{port}"]).stdout
            if out.strip():
                return
            time.sleep(0.3)
        raise LabError(f"{name} does not listen on {host}:{port} after {timeout_s:.0f} s; see {self.log_path(name)}")

    def check_alive(self) -> None:
        """Raise LabError naming the operator (and its log) whose service exited."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise LabError(f"{name} exited with {proc.returncode}; see {self.log_path(name)}")

    def stop(self, names: tuple[str, ...] | None = None, sig: int = signal.SIGTERM) -> None:
        for name in reversed(names or tuple(self.procs)):
            proc = self.procs.pop(name, None)
            if proc is not None:
                stop_process(proc, sig=sig, wait_s=30.0)

    def firewall(self, name: str) -> None:
        """Load the recipe's nftables rules for `name` into its host."""
        self.lab.run(name, ["nft", "-f", str(self.recipe.firewall(name))])

    def save_data(self, dest: Path) -> None:
        """Copy each party's data directory (services stopped) to `dest/<name>`."""
        for name in PARTIES:
            shutil.copytree(self.recipe.data_dir(name), Path(dest) / name, dirs_exist_ok=False)

    def restore_data(self, src: Path) -> None:
        """Replace each party's data directory by the copy in `src/<name>`."""
        user = pwd.getpwnam(self.recipe.user)
        for name in PARTIES:
            target = self.recipe.data_dir(name)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(Path(src) / name, target)
            for path in (target, *target.rglob("*")):  # the service user's, as the service left it
                shutil.chown(path, user.pw_uid, user.pw_gid)


AS_USER = """set -e
user=$1; spare=$2; closed=$3; prefix=$4; shift 4
if [ -n "$closed" ]; then
  mount --bind "$prefix" "$spare"
  mount -t tmpfs -o mode=0755,size=64k starfish-hide "$closed"
  mkdir -p "$prefix"
  mount --bind "$spare" "$prefix"
fi
exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups --no-new-privs \
  --inh-caps=-all --bounding-set=-all -- "$@"
"""
"""Switch to the service user. When the interpreter lives under a directory that user cannot
enter (a per-user Python under /root), that directory is replaced, in this process's own
mount namespace (`ip netns exec` gives each command one), by an empty one showing only the
interpreter's installation; nothing else of it is visible to the service."""


def _closed_ancestor(path: Path) -> Path | None:
    """The outermost directory above `path` that others may not enter (None: all open)."""
    closed = [p for p in reversed(path.parents) if p != Path("/") and not p.stat().st_mode & 0o001]
    return closed[0] if closed else None


def service_argv(recipe: Recipe, name: str) -> list[str]:
    """The argv that runs `name`'s unit command as systemd would run it (module doc)."""
    account = pwd.getpwnam(recipe.user)
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": account.pw_dir,
        "USER": recipe.user,
        "LOGNAME": recipe.user,
        **recipe.environment(name),
    }
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *recipe.command(name)]
    if account.pw_uid == 0:
        return argv
    prefix = Path(sys.base_prefix).resolve()
    closed = _closed_ancestor(prefix)
    spare = recipe.root / "mnt" / name
    spare.mkdir(parents=True, exist_ok=True)
    hide = [str(closed), str(prefix)] if closed is not None else ["", ""]
    return ["sh", "-c", AS_USER, "sh", recipe.user, str(spare), *hide, *argv]
