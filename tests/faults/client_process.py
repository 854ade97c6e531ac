"""One FL client as its own process, so that a test can kill it (SIGKILL) and start it again.

    python client_process.py ROOT CLIENT ROUND M

(tests/ on PYTHONPATH, for the helpers package) waits until round ROUND is open on both parties, prints
"ready", waits for a line on stdin, then submits its deterministic gradient for the round
(helpers.fault_helpers.gradient) and prints the receipt as JSON — or {"error": ..., "outcome": ...}
when the SDK raises. Its outbox is the deployment's (`LocalDeployment.client`), so a
restarted process resumes the same sharing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from client_sdk import RoundClosedError, StarfishError
from harness.local import LocalDeployment

from helpers.fault_helpers import gradient, samples


def main(root: str, client: str, round_index: int, m: int) -> int:
    dep = LocalDeployment(Path(root))
    with dep.client(client) as sdk:
        resuming = sdk.outbox.load(f"round:{round_index}") is not None
        view = None if resuming else sdk.wait_for_round(round_index - 1, timeout_s=120)
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            model_hash = view.model_hash if view is not None else None
            receipt = sdk.submit(round_index, gradient(client, round_index, m), samples(client), model_hash)
        except RoundClosedError as exc:
            print(json.dumps({"error": str(exc), "outcome": exc.status.outcome}), flush=True)
            return 0
        except StarfishError as exc:
            print(json.dumps({"error": str(exc), "outcome": ""}), flush=True)
            return 0
        status = sdk.upload_status(round_index)
        out = {
            "round": receipt.round,
            "resumed": receipt.resumed,
            "duplicate": list(receipt.duplicate),
            "content_sha256": list(receipt.content_sha256),
            "binding_sha256": receipt.binding_sha256,
            "outcome": status.outcome,
        }
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
