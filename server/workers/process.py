"""A job's worker process per party and session attempt (JSON lines over pipes).

Workers are started ahead of need (`Standby`): they import torch and CrypTen, then wait
on stdin for their session. The protocol (JSON objects, one per line, between this
party's own processes; nothing is pickled):

    party → worker   {"kind": "spec", "path"}   the session attempt to run
    worker → party   {"kind": "listening", "port"}   party0: where party1 must connect
                     {"kind": "session", "session_id", "dealer": {...}}   who serves it
                     {"kind": "progress", "step", "t", "total", "detail", "bytes"}
                     {"kind": "checkpoint", "t", "digest"}
                     {"kind": "post_tasks", "id", ...}   (the party answers {"id", "ok", "error"})
                     {"kind": "result", "model_hash"}
    party → worker   replies to requests; closing the pipe tells the worker its party died.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs for one session attempt (written as JSON)."""

    job_id: str
    role: int
    attempt: int
    data_dir: str
    job_dir: str
    arch: str
    targets: list[str]
    strategy: str
    parameters: dict[str, Any]
    base_round: int
    base_model_hash: str
    session_id: str
    peer_host: str  #: party0: the address it listens on; party1: where party0 listens
    peer_port: int  #: party0: 0 = any free port
    peer_identity: str
    dealer_host: str
    dealer_port: int
    dealer_identity: str
    tls_ca: str
    tls_cert: str
    tls_key: str
    precision_bits: int
    session_timeout_s: float
    step_check: str
    task_timeout_s: float
    task_poll_s: float
    #: `[privacy]` DP settings (DPSettings fields); empty when DP is off
    dp: dict[str, Any]
    #: what the session computes: "unlearn" (a job's attempt, `server.jobs.attempt`) or
    #: "stage1_clip" (a Stage I round's clipped, noised aggregate, `server.stage1_clip_attempt`);
    #: a worker refuses a spec of another kind than its session module's `TASK`
    task: str = "unlearn"

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=1, sort_keys=True))
        return path

    @classmethod
    def read(cls, path: Path) -> WorkerSpec:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or set(data) != set(cls.__dataclass_fields__):
            raise ValueError(f"{path} is not a worker spec")
        return cls(**data)


Handler = Callable[[dict[str, Any]], dict[str, Any] | None]


def spawn_worker(session_module: str, log_path: Path) -> subprocess.Popen:
    """Start `python -m server.workers.worker <session_module>`; it imports the module that
    runs its kind of session, then waits for a spec on stdin."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "server.workers.worker", session_module],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


class Standby:
    """Keeps one started process (imports done) ready, so a session attempt does not wait
    for torch and CrypTen to load; `take()` hands it out and starts the next one."""

    def __init__(self, spawn: Callable[[Path], subprocess.Popen], log_dir: Path, name: str, enabled: bool):
        self._spawn = spawn
        self._log_dir = log_dir
        self._name = name
        self._enabled = enabled
        self._lock = threading.Lock()
        self._proc: tuple[subprocess.Popen, Path] | None = None
        self._closed = False
        self._count = 0

    def _new(self) -> tuple[subprocess.Popen, Path]:
        self._count += 1
        path = self._log_dir / f"{self._name}-{os.getpid()}-{self._count}.log"
        return self._spawn(path), path

    def fill(self) -> None:
        with self._lock:
            if self._enabled and not self._closed and (self._proc is None or self._proc[0].poll() is not None):
                self._proc = self._new()

    def take(self) -> tuple[subprocess.Popen, Path]:
        """A started process and its log file (a fresh one when none is waiting); a
        replacement is started for the next taker."""
        with self._lock:
            ready, self._proc = self._proc, None
            if ready is None or ready[0].poll() is not None:
                ready = self._new()
        if self._enabled:
            threading.Thread(target=self.fill, name=f"standby-{self._name}", daemon=True).start()
        return ready

    def close(self) -> None:
        with self._lock:
            self._closed = True
            waiting, self._proc = self._proc, None
        if waiting is not None:
            stop_process(waiting[0])


class WorkerProcess:
    """A started worker handed one session attempt; its messages go to `handler`."""

    def __init__(self, proc: subprocess.Popen, handler: Handler, log_path: Path | None = None):
        self.proc = proc
        self.handler = handler
        self.log_path = log_path
        self.result: dict[str, Any] | None = None
        self.listening = threading.Event()
        self.port = 0  #: party0: the port its worker listens on (once `listening` is set)
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"job-worker-{proc.pid}", daemon=True)
        self._reader.start()

    @classmethod
    def assign(cls, proc: subprocess.Popen, log_path: Path, spec_path: Path, handler: Handler) -> WorkerProcess:
        """Hand a started worker its attempt; records `worker.pid` and a link to its log."""
        worker = cls(proc, handler, log_path)
        folder = spec_path.parent
        (folder / "worker.pid").write_text(str(proc.pid))
        link = folder / f"{spec_path.stem}.log"
        if not link.exists():
            os.symlink(log_path, link)
        worker._reply({"kind": "spec", "path": str(spec_path)})
        return worker

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _reply(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            with self._write_lock:
                self.proc.stdin.write((json.dumps(message) + "\n").encode())
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the worker is gone; its exit is seen by poll()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                log.warning("job worker %d wrote a line that is not JSON; ignored", self.proc.pid)
                continue
            if not isinstance(msg, dict):
                continue
            if msg.get("kind") == "result":
                self.result = msg
            elif msg.get("kind") == "listening" and isinstance(msg.get("port"), int):
                self.port = msg["port"]
                self.listening.set()
            try:
                reply = self.handler(msg)
            except Exception as exc:  # the worker gets the error and fails its attempt
                log.exception("handling a %s message of the job worker failed", msg.get("kind"))
                reply = {"ok": False, "error": str(exc)}
            if "id" in msg:
                self._reply({"id": msg["id"], **(reply or {"ok": True})})

    def wait_listening(self, timeout_s: float) -> int:
        """party0: the port its worker listens on; raises OSError if it exits or takes too long."""
        deadline = time.monotonic() + timeout_s
        while not self.listening.wait(0.1):
            if self.proc.poll() is not None:
                raise OSError(f"the worker exited with code {self.proc.returncode} before listening")
            if time.monotonic() > deadline:
                raise OSError(f"the worker did not open its MPC listener within {timeout_s:.0f} s")
        return self.port

    def poll(self) -> int | None:
        """Exit code once the worker has exited (and its output was read), else None."""
        code = self.proc.poll()
        if code is None:
            return None
        self._reader.join(KILL_WAIT_S)
        return code

    def kill(self) -> None:
        """Stop the worker (SIGKILL) and close its pipes."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        try:
            self.proc.wait(KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            log.error("job worker %d did not exit after SIGKILL", self.proc.pid)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


def stop_process(proc: subprocess.Popen | None) -> None:
    """Terminate a child process we started, then kill it if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(KILL_WAIT_S)
