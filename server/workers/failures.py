"""Which process made a session attempt fail (docs/JOBS.md §6).

One dead process takes the whole session down: when party1's worker is killed, party0's
worker sees its connection close and exits with code 1 a moment later, and so does the
dealer's session. The attempt's failure is blamed on the process that died first, judged
from what each process of the attempt did:

1. killed by a signal (SIGKILL, the OOM killer, ...): nobody else kills a session
   process while the attempt runs, so this is the cause;
2. gone: a party process that is unreachable, restarted during the session, or whose
   worker exited because the party process went away (exit code 3); the dealer, when a
   worker exited because the dealer failed its session (exit code 4);
3. failed: exited with an error of its own (the last error line of its log is quoted).

Processes still running are not blamed. The failure is recorded on the job
(`last_error`, `failed_process`) and shown by JobStatus.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from server.workers.parent_link import EXIT_ORPHANED

#: exit code of a worker whose session the dealer failed (server.workers.worker.EXIT_DEALER)
EXIT_DEALER = 4
#: party1's job error when its restart ended the session (server.jobs.follower)
RESTARTED = "party1 restarted during the session"
#: blame order: the first kind found is the cause
KINDS = ("killed", "gone", "failed")
LOG_TAIL_BYTES = 16384


@dataclass(frozen=True)
class Observed:
    """What one process of the attempt did: `kind` is "running", "exited" (code 0) or one of KINDS."""

    process: str  #: "party0 worker", "party1 worker", "dealer", "party0", "party1"
    kind: str
    detail: str


@dataclass(frozen=True)
class Failure:
    """Why a session attempt failed: the process blamed and a one-line error."""

    process: str
    error: str


def exit_description(code: int) -> str:
    """ "killed by SIGKILL" or "exited with code 1"."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def observe_exit(process: str, code: int | None, log_path: Path | None = None) -> Observed:
    """Classify a process by its exit code (None: still running)."""
    if code is None:
        return Observed(process, "running", "still running")
    if code == 0:
        return Observed(process, "exited", "exited normally")
    if code < 0:
        return Observed(process, "killed", exit_description(code))
    if code == EXIT_DEALER and process.endswith(" worker"):
        last = last_error_line(log_path) if log_path is not None else ""
        return Observed("dealer", "gone", "failed the session" + (f" ({process}: {last})" if last else ""))
    if code == EXIT_ORPHANED and process.endswith(" worker"):
        party = process.removesuffix(" worker")
        return Observed(party, "gone", f"{party} went away during the session (its worker exited with it)")
    last = last_error_line(log_path) if log_path is not None else ""
    return Observed(process, "failed", exit_description(code) + (f": {last}" if last else ""))


def observe_party1(theirs) -> Observed:
    """What party1's side of the attempt did, from its job state (peer PeerJobState; None:
    party1 is unreachable). party1 reports its worker's exit code and error."""
    if theirs is None:
        return Observed("party1", "gone", "is unreachable (process down or restarting)")
    if theirs.state != "failed":
        return Observed("party1 worker", "running", theirs.state)
    if theirs.error.startswith(RESTARTED):
        return Observed("party1", "gone", "restarted during the session")
    if not theirs.worker_exited:
        return Observed("party1", "failed", theirs.error)
    seen = observe_exit("party1 worker", theirs.worker_exit_code or 1)
    detail = theirs.error.removeprefix("party1 worker ")
    return seen if seen.kind != "failed" else Observed(seen.process, "failed", detail)


def last_error_line(log_path: Path) -> str:
    """The last line of a process log that names an error (the exception of a traceback)."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - LOG_TAIL_BYTES))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        text = line.strip()
        if text and ("Error" in text or "Exception" in text or "error" in text):
            return text[:300]
    return ""


def blame(observed: list[Observed]) -> Failure:
    """The failure of an attempt from what its processes did (rules in the module docstring)."""
    for kind in KINDS:
        found = [o for o in observed if o.kind == kind]
        if found:
            first = found[0]
            others = "; ".join(f"{o.process}: {o.detail}" for o in observed if o is not first and o.kind != "running")
            return Failure(first.process, f"{first.process} {first.detail}" + (f" (then {others})" if others else ""))
    running = ", ".join(o.process for o in observed)
    return Failure("unknown", f"the session ended without a result ({running})")
