"""`StarfishFedAvg`: Flower's FedAvg strategy with every round run through the Starfish parties.

Flower's round loop (`Strategy.start`), sampling, client-side evaluation, metric
aggregation and server-side evaluation stay Flower's. What changes:

* `configure_train` opens Starfish round i on party0 (which tells party1) and sends the
  sampled nodes M_{i−1} as the parties hold it, with the round number and η in the config;
* the ClientApps (with `StarfishMod`) upload their updates as secret shares to the parties
  and reply with metrics and a receipt only — the Flower server never sees an update;
* `aggregate_train` asks party0 to close the round once the clients that replied are on
  both parties, waits for the commit and returns the public aggregate M_i from the parties;
* `unlearn` files an unlearning request (admin RPC), runs the clients the job asks for
  (`TaskRelay`), then the remaining clients' federated evaluation of the result (EVALUATE
  messages; the published accuracies are logged and in the report), and returns the
  unlearned model, which is the parties' newest global model: the next round starts from
  it, and the forgotten clients' nodes are not sent training rounds again (party0 refuses
  their uploads). A job filed by someone else (a client asking
  for its own unlearning, an operator) is followed the same way before the next round opens.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result

from client_sdk.admin import AdminClient
from client_sdk.errors import StarfishError
from proto.starfish.v1 import admin_pb2
from starfish_flower import keys, logs, preflight
from starfish_flower.jobs import TaskRelay, log_evaluation
from starfish_flower.rounds import CommittedRound, GlobalModel, RoundDriver

log = logs.get(__name__)


@dataclass(frozen=True)
class UnlearnOutcome:
    job_id: str
    succeeded: bool
    error: str
    arrays: ArrayRecord | None  #: the unlearned model M̂ (the parties' newest global model)
    model_hash: str
    report: dict[str, Any] = field(default_factory=dict)  #: the job report (what was revealed, costs, erasure)


class StarfishFedAvg(FedAvg):
    """FedAvg whose aggregation runs under Starfish (see module doc); FedAvg's arguments apply."""

    def __init__(
        self,
        admin: AdminClient,
        arch: str,
        lr: float,
        round_timeout_s: float = 600.0,
        nodes_timeout_s: float = 300.0,
        **fedavg_kwargs: Any,
    ):
        super().__init__(**fedavg_kwargs)
        self.admin = admin
        self.arch = arch
        self.lr = lr
        self.round_timeout_s = round_timeout_s
        self.nodes_timeout_s = nodes_timeout_s  #: how long `start` waits for min_available_nodes nodes
        self.min_cohort = 0  #: the parties' k ([privacy] min_cohort), read by `start`
        self.outcomes: list[UnlearnOutcome] = []  #: every unlearning job this strategy followed to its end
        self.rounds: list[CommittedRound] = []  #: Starfish rounds committed by this strategy
        self.nodes: dict[str, int] = {}  #: Starfish client id → Flower node id (learned from receipts)
        self.forgotten: set[str] = set()  #: targets of the unlearning jobs seen to succeed: never sampled again
        self.relay = TaskRelay(admin, (self.arrayrecord_key, self.configrecord_key))
        self._driver: RoundDriver | None = None
        self._train_config = ConfigRecord()

    # -- the run ------------------------------------------------------------------------------
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Flower's loop, from the parties' newest model (M_0 = `initial_arrays` on a fresh start),
        after the checks of `starfish_flower.preflight` (one clear error when they fail)."""
        self._preflight(grid)
        self._driver = RoundDriver(self.admin, initial_arrays, self.round_timeout_s)
        current = self._driver.install(self.arch, initial_arrays, self.lr)
        self._train_config = train_config or ConfigRecord()
        return super().start(grid, current.arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn)

    def summary(self) -> None:
        super().summary()
        log.info("\t└──> Starfish: aggregation by the two parties (arch %s, η %g)", self.arch, self.lr)

    def _preflight(self, grid: Grid) -> None:
        """party0 opens rounds on request and FedAvg's sampling can meet the parties' k."""
        status = self.admin.status()
        preflight.check_opening(status)
        self.min_cohort = int(status.min_cohort)
        nodes = preflight.wait_for_nodes(grid, self.min_available_nodes, self.nodes_timeout_s)
        preflight.check_cohort(nodes, self.fraction_train, self.min_train_nodes, len(self._skipped()), self.min_cohort)

    def _skipped(self) -> set[int]:
        """Node ids of forgotten clients: erased clients cannot upload again."""
        return {self.nodes[c] for c in self.forgotten if c in self.nodes}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Open Starfish round i and sample as FedAvg does, among the nodes not forgotten."""
        if self.fraction_train == 0.0:
            return []
        model = self._open_round(grid)
        config = ConfigRecord({**dict(config), keys.ROUND: model.round + 1, keys.LR: model.lr, keys.ARCH: model.arch})
        config["server-round"] = server_round
        skip = self._skipped()
        eligible = [n for n in grid.get_node_ids() if n not in skip]
        size = min(preflight.sample_size(len(eligible), self.fraction_train, self.min_train_nodes), len(eligible))
        preflight.check_cohort(len(eligible), self.fraction_train, self.min_train_nodes, 0, self.min_cohort)
        node_ids = random.sample(eligible, size)
        log.info("configure_train: sampled %d of %d nodes (%d forgotten)", size, len(eligible), len(skip))
        record = RecordDict({self.arrayrecord_key: model.arrays, self.configrecord_key: config})
        return self._construct_messages(record, node_ids, MessageType.TRAIN)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        driver = self._require_driver()
        valid, _ = self._check_and_log_replies(list(replies), is_train=True, validate=False)
        stamps = self._receipts(valid, driver.latest.round + 1)
        if not stamps:
            log.warning("Starfish round %d: no client uploaded; the round stays open", driver.latest.round + 1)
            return None, None
        log.info("Starfish round %d: closing with %d uploads", driver.latest.round + 1, len(stamps))
        done = replace(
            driver.commit(list(stamps)),
            upload_bytes=sum(int(s[keys.UPLOAD_BYTES]) for s in stamps.values()),
            client_sdk_s=sum(float(s[keys.SDK_SECONDS]) for s in stamps.values()),
        )
        self.rounds.append(done)
        log.info(
            "Starfish round %d committed: %d members, model %s", done.round, len(done.members), done.model_hash[:12]
        )
        metrics = self.train_metrics_aggr_fn([m.content for m in valid], self.weighted_by_key)
        metrics["starfish-round"] = done.round
        metrics["starfish-members"] = len(done.members)
        return driver.latest.arrays, metrics

    # -- unlearning ---------------------------------------------------------------------------
    def unlearn(
        self,
        grid: Grid,
        targets: list[str],
        parameters: dict[str, Any] | None = None,
        strategy: str = "starfish",
        timeout_s: float = 3600.0,
    ) -> UnlearnOutcome:
        """File an unlearning request, run the clients it asks for, return the unlearned model."""
        self._require_driver()
        job_id = self.admin.unlearn(targets, strategy, parameters)
        log.info("Starfish: unlearning %s filed as job %s", targets, job_id)
        return self._conclude(job_id, self._follow(grid, job_id, timeout_s))

    def _conclude(self, job_id: str, final: admin_pb2.JobStatus) -> UnlearnOutcome:
        """The outcome of a job that ended: on success its targets join `forgotten` (never
        sampled again) and M̂ is the parties' newest model; logged with a summary."""
        driver = self._require_driver()
        if final.state != admin_pb2.JOB_STATE_SUCCEEDED:
            state = admin_pb2.JobState.Name(final.state)
            log.error("Starfish: unlearning job %s ended %s: %s", job_id, state, final.error)
            outcome = UnlearnOutcome(job_id, False, final.error, None, "")
            self.outcomes.append(outcome)
            return outcome
        report = json.loads(self.admin.job_report(job_id).report_json)
        self.forgotten.update(report["job"]["targets"])
        model = driver.refresh()
        if model.hash != report["job"]["model_hash"]:
            raise StarfishError(
                f"job {job_id} produced {report['job']['model_hash'][:12]}, party0 serves {model.hash[:12]}"
            )
        log.info(
            "Starfish: unlearning job %s succeeded in %.1f s: %s forgotten, unlearned model %s is global model %d",
            job_id,
            final.seconds,
            ", ".join(report["job"]["targets"]),
            model.hash[:12],
            model.round,
        )
        log_evaluation(job_id, final.federated_evaluation)
        outcome = UnlearnOutcome(job_id, True, "", model.arrays, model.hash, report)
        self.outcomes.append(outcome)
        return outcome

    def settle(self, grid: Grid, timeout_s: float | None = None) -> list[UnlearnOutcome]:
        """Follow every queued or running unlearning job to its end (e.g. one a client filed
        for itself in the last round); their outcomes, also appended to `outcomes`."""
        self._require_driver()
        ended = [
            self._conclude(job_id, self._follow(grid, job_id, timeout_s or self.round_timeout_s))
            for job_id in self.relay.active_jobs()
        ]
        return ended

    def _follow(self, grid: Grid, job_id: str, timeout_s: float) -> admin_pb2.JobStatus:
        driver = self._require_driver()
        config = ConfigRecord({**dict(self._train_config), keys.LR: driver.latest.lr, keys.ARCH: driver.latest.arch})
        return self.relay.follow(grid, job_id, self.nodes, driver.latest.arrays, config, timeout_s)

    # -- helpers ------------------------------------------------------------------------------
    def _require_driver(self) -> RoundDriver:
        if self._driver is None or self._driver.latest is None:
            raise RuntimeError("StarfishFedAvg: call start() first")
        return self._driver

    def _open_round(self, grid: Grid) -> GlobalModel:
        """Open the next round; first follow any unlearning job (the round starts from its model)."""
        driver = self._require_driver()
        for _ in range(3):
            for job_id in self.relay.active_jobs():
                log.info("Starfish: following unlearning job %s before the next round", job_id)
                self._conclude(job_id, self._follow(grid, job_id, self.round_timeout_s))
                driver.refresh()
            try:
                return driver.open()
            except StarfishError:
                if not self.relay.active_jobs():  # not a job filed meanwhile
                    raise
        raise StarfishError("unlearning jobs keep arriving: no round could open")

    def _receipts(self, replies: list[Message], round_index: int) -> dict[str, ConfigRecord]:
        """Client id → receipt, for the replies that carry a receipt of round i; remembers node ids."""
        stamps = {}
        for msg in replies:
            stamp = msg.content.config_records.get(keys.REPLY)
            if stamp is None or int(stamp[keys.ROUND]) != round_index:
                log.warning(
                    "reply from node %d carries no Starfish receipt of round %d", msg.metadata.src_node_id, round_index
                )
                continue
            client = str(stamp[keys.CLIENT_ID])
            self.nodes[client] = msg.metadata.src_node_id
            stamps[client] = stamp
            if str(stamp.get(keys.UNLEARN_JOB, "")):
                log.info("Starfish: %s asked for its own unlearning (job %s)", client, stamp[keys.UNLEARN_JOB])
        return stamps
