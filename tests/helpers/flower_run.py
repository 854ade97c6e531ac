"""The Flower simulation of test_flower_simulation, run as its own process (inside a
loopback-only network namespace): four virtual clients on Flower's Simulation Engine (Ray)
through StarfishMod and StarfishFedAvg against party0 and party1 as real processes; three
rounds, an unlearning job relayed through Flower (then its federated evaluation by the
remaining nodes' evaluate function), two more rounds. Writes what the Flower
side saw to a JSON file for the test to check against the parties' stores.

    python flower_run.py DEPLOYMENT_DIR RESULT_JSON
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from flwr.app import ArrayRecord, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from harness.local import LocalDeployment
from proto.wire import model_hash
from starfish_flower import Parties, StarfishFedAvg, StarfishMod, identity_from_credentials
from starfish_flower.arrays import flatten

from helpers.flower_app import NODES, initial_arrays, make_client_app
from helpers.plumbing_schedule import PLUMBING_SCHEDULE

ARCH = "logreg-6"
ROUNDS_BEFORE, ROUNDS_AFTER = 3, 2
CLIENTS = [f"client{i}" for i in range(NODES)]


class RecordingFedAvg(StarfishFedAvg):
    """Counts train replies that carry any ArrayRecord (none may) and error replies (none is
    expected: the forgotten client's node is not sampled after the unlearning)."""

    replies_with_arrays = 0
    error_replies = 0

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        self.replies_with_arrays += sum(1 for r in replies if r.has_content() and r.content.array_records)
        self.error_replies += sum(1 for r in replies if r.has_error())
        return super().aggregate_train(server_round, replies)


def server_app(dep: LocalDeployment, record: dict) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context) -> None:
        def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            record["flower_hashes"].append(model_hash(ARCH, flatten(arrays)))
            return MetricRecord({})

        try:
            with dep.admin() as admin:
                strategy = RecordingFedAvg(
                    admin, ARCH, 1.0, fraction_train=1.0, min_train_nodes=NODES, min_available_nodes=NODES
                )
                strategy.start(grid, initial_arrays(), ROUNDS_BEFORE, evaluate_fn=evaluate_fn)
                outcome = strategy.unlearn(grid, ["client0"], parameters={"beta": 0.25, **PLUMBING_SCHEDULE})
                record["outcome"] = {
                    "job_id": outcome.job_id,
                    "succeeded": outcome.succeeded,
                    "error": outcome.error,
                    "model_hash": outcome.model_hash,
                    "arrays_hash": model_hash(ARCH, flatten(outcome.arrays)) if outcome.arrays else "",
                    "report": outcome.report,
                }
                strategy.start(grid, outcome.arrays, ROUNDS_AFTER, evaluate_fn=evaluate_fn)
                record["rounds"] = [{"round": r.round, "members": r.members} for r in strategy.rounds]
                record["replies_with_arrays"] = strategy.replies_with_arrays
                record["error_replies"] = strategy.error_replies
                record["tasks_answered"] = strategy.relay.answered
                record["evaluations_answered"] = strategy.relay.evaluated
        except BaseException:  # noqa: BLE001  (reported by the test)
            record["error"] = traceback.format_exc()

    return app


def main(root: Path, out: Path) -> None:
    dep = LocalDeployment(
        root,
        clients=CLIENTS,
        rounds={"deadline_s": 600.0, "poll_s": 0.05, "opening": "on_request"},
        jobs={"poll_s": 0.1, "retry_backoff_s": 0.3, "session_timeout_s": 60.0, "standby": "always"},
    )
    record: dict = {"flower_hashes": []}
    os.environ["STARFISH_OUTBOX"] = str(root / "outbox")  # the virtual clients' SDK outboxes, inside the deployment
    dep.start()
    try:
        mod = StarfishMod(
            Parties(dep.address(0), dep.address(1), dep.ca_cert), identity_from_credentials(dep.cred_path)
        )
        backend = {"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2, "include_dashboard": False}}
        run_simulation(server_app(dep, record), make_client_app([mod]), NODES, backend_config=backend)
    finally:
        dep.stop()
        out.write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
