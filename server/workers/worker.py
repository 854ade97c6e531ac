"""A party's job worker: `python -m server.workers.worker`.

One process per session attempt (CrypTen's communicator is process-global; a crash only
loses this attempt): a job's attempt (`attempt.run_attempt`) or, with Stage I DP, a
round's clip session (`clip_attempt.run_clip`; the spec's `task` says which). It sets up
its pipe to the party (`parent_link`), imports torch and CrypTen, then waits for its first
message from the party, {"kind": "spec", "path": attempt-K.json}; so a party can keep one
worker started in advance (the import takes seconds) and hand it the next attempt.

Exit codes: 0 done, 1 failed (traceback in the job log), 3 the party process went away,
4 the dealer service failed the session (`server.workers.failures` blames the dealer).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

from server.file_modes import restrict_umask
from server.workers.failures import EXIT_DEALER
from server.workers.parent_link import ParentLink
from server.workers.process import WorkerSpec

EXIT_FAILED = 1
log = logging.getLogger("server.workers.worker")


def _preload() -> None:
    """Import the heavy modules (torch, CrypTen, the algorithms) before the party hands over a session."""
    import server.jobs.attempt  # noqa: F401
    import server.stage1_clip_attempt  # noqa: F401
    import unlearning.starfish.strategy  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="server.workers.worker", description="Starfish job worker (one session attempt; spec read from stdin)"
    )
    parser.parse_args(argv)
    restrict_umask()  # checkpoints, task files and reports: 0600 / 0700 (server.file_modes)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s worker %(levelname)s %(message)s")
    link = ParentLink()
    _preload()
    spec = link.wait_spec()
    try:
        from server.jobs.attempt import run_attempt
        from server.stage1_clip import STAGE1_CLIP
        from server.stage1_clip_attempt import run_clip

        if WorkerSpec.read(spec).task == STAGE1_CLIP:
            return run_clip(spec, link)
        return run_attempt(spec, link)
    except Exception as exc:
        log.error("job attempt failed:\n%s", traceback.format_exc())
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
