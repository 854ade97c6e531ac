"""Run the recipe's operators on emulated hosts: each service in its own namespace.

`OperatorHosts(lab, recipe)` starts an operator with its systemd unit's command line
(`Recipe.command`) inside the namespace of the host of the same name, logs to
`<root>/logs/<name>.log`, and waits until the service listens on its configured address
(seen from inside that namespace with `ss`). `firewall(name)` loads the recipe's nftables
rules into that host. Data directories can be saved and restored between runs, so the same
job can be run on several networks from one Stage I history.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

from netlab.lab import Lab, LabError, stop_process
from starfish.multihost.recipe import OPERATORS, PARTIES, Recipe

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
            env = self.recipe.environment(name)
            argv = ["env", *(f"{k}={v}" for k, v in env.items()), *self.recipe.command(name)]
            with open(self.log_path(name), "ab") as log:
                self.procs[name] = self.lab.popen(name, argv, stdout=log, stderr=subprocess.STDOUT)
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
        for name in PARTIES:
            target = self.recipe.data_dir(name)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(Path(src) / name, target)
