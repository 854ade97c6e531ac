"""Processes of a job: the per-party worker (JSON lines over pipes) and the spawned dealer.

The worker's protocol (both directions are JSON objects, one per line, between this
party's own processes; nothing is pickled):

    worker → party   {"kind": "progress", "step", "t", "total", "detail", "bytes"}
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

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
    host: str
    port: int
    precision_bits: int
    session_timeout_s: float
    step_check: str
    allow_remote: bool
    task_timeout_s: float
    task_poll_s: float

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=1, sort_keys=True))
        return path

    @classmethod
    def read(cls, path: Path) -> "WorkerSpec":
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or set(data) != set(cls.__dataclass_fields__):
            raise ValueError(f"{path} is not a worker spec")
        return cls(**data)


Handler = Callable[[dict[str, Any]], dict[str, Any] | None]


class WorkerProcess:
    """A running `python -m server.jobs.worker`; messages go to `handler` on a reader thread."""

    def __init__(self, spec_path: Path, log_path: Path, handler: Handler):
        self.spec_path = spec_path
        self.log_path = log_path
        self.handler = handler
        self.proc: subprocess.Popen | None = None
        self.result: dict[str, Any] | None = None
        self._write_lock = threading.Lock()
        self._reader: threading.Thread | None = None

    def start(self) -> "WorkerProcess":
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "server.jobs.worker", "--spec", str(self.spec_path)],
                cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        (self.spec_path.parent / "worker.pid").write_text(str(self.proc.pid))
        self._reader = threading.Thread(target=self._read, name=f"job-worker-{self.proc.pid}", daemon=True)
        self._reader.start()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _reply(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            with self._write_lock:
                self.proc.stdin.write((json.dumps(message) + "\n").encode())
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the worker is gone; its exit is seen by poll()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
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
            try:
                reply = self.handler(msg)
            except Exception as exc:  # the worker gets the error and fails its attempt
                log.exception("handling a %s message of the job worker failed", msg.get("kind"))
                reply = {"ok": False, "error": str(exc)}
            if "id" in msg:
                self._reply({"id": msg["id"], **(reply or {"ok": True})})

    def poll(self) -> int | None:
        """Exit code once the worker has exited (and its output was read), else None."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            return None
        if self._reader is not None:
            self._reader.join(KILL_WAIT_S)
        return code

    def kill(self) -> None:
        """Stop the worker (SIGKILL) and close its pipes."""
        if self.proc is None:
            return
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


def spawn_dealer(port: int, host: str, precision_bits: int, timeout_s: float, allow_remote: bool,
                 log_path: Path) -> subprocess.Popen:
    """Start a dealer (CrypTen TTP) for one session at host:port (`starfish dealer --sessions 1`).

    In a local deployment this process stands in for the third operator's dealer: it is a
    separate process that only hands out correlated randomness and never sees data shares.
    """
    cmd = [sys.executable, "-m", "starfish.cli", "dealer", "--host", host, "--port", str(port), "--sessions", "1",
           "--timeout", str(timeout_s), "--precision-bits", str(precision_bits)]
    if allow_remote:
        cmd.append("--allow-remote")
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=log_file, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    (log_path.parent / "dealer.pid").write_text(str(proc.pid))
    return proc


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
