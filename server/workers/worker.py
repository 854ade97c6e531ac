"""A party's worker process: `python -m server.workers.worker <session module>`.

One process per session attempt (CrypTen's communicator is process-global; a crash only
loses this attempt). The party names, on the command line, the module that runs its kind
of session: `server.jobs.attempt` (a job's attempt) or `server.stage1_clip_attempt` (a
Stage I round's clip session). Such a module holds `TASK` (the `WorkerSpec.task` it runs)
and `run_session(spec_path, link) -> int`; so this process knows neither kind and neither
kind imports the other. The worker sets up its pipe to the party (`parent_link`), imports
the session module (torch, CrypTen, the algorithms), then waits for its first message from
the party, {"kind": "spec", "path": attempt-K.json}; so a party can keep one worker started
in advance (the import takes seconds) and hand it the next attempt.

Exit codes: 0 done, 1 failed (traceback in the job log), 3 the party process went away,
4 the dealer service failed the session (`server.workers.failures` blames the dealer).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType

from server.file_modes import restrict_umask
from server.workers.failures import EXIT_DEALER
from server.workers.parent_link import ParentLink
from server.workers.process import WorkerSpec

EXIT_FAILED = 1
log = logging.getLogger("server.workers.worker")


def load_session_module(name: str) -> ModuleType:
    """Import the module that runs this worker's kind of session; it must hold `TASK` and `run_session`."""
    if not name.startswith("server."):
        raise ValueError(f"{name!r} is not a session module of the party runtime")
    module = importlib.import_module(name)
    if not isinstance(getattr(module, "TASK", None), str) or not callable(getattr(module, "run_session", None)):
        raise ValueError(f"{name} holds no TASK and run_session(spec_path, link)")
    return module


def run_spec(module: ModuleType, spec: Path, link: ParentLink) -> int:
    """Run the handed-over attempt; a spec of another kind of session is refused."""
    task = WorkerSpec.read(spec).task
    if task != module.TASK:
        raise ValueError(f"{spec} is a {task!r} session; this worker runs {module.TASK!r} sessions")
    return module.run_session(spec, link)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="server.workers.worker", description="Starfish worker (one session attempt; spec read from stdin)"
    )
    parser.add_argument("session_module", help="the module that runs the session, e.g. server.jobs.attempt")
    args = parser.parse_args(argv)
    restrict_umask()  # checkpoints, task files and reports: 0600 / 0700 (server.file_modes)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s worker %(levelname)s %(message)s")
    link = ParentLink()
    module = load_session_module(args.session_module)
    spec = link.wait_spec()
    try:
        return run_spec(module, spec, link)
    except Exception as exc:
        log.error("session attempt failed:\n%s", traceback.format_exc())
        return EXIT_DEALER if _dealer_failed(exc) else EXIT_FAILED


def _dealer_failed(exc: BaseException) -> bool:
    """Whether the attempt failed because the dealer service refused or lost its session."""
    from mpc.plane.dealer_client import DealerError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DealerError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)  # the session is closed; skip the slow interpreter teardown of torch/gloo
