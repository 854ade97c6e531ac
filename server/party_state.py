"""Process-wide state of one party shared by its services and its coordinator."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from server.aggregation import RunningSums
from server.config import PartyConfig
from server.open_round_shares import OpenRoundShares
from server.stage1_clip import Stage1Clipper
from server.stage1_dp import Stage1Privacy
from server.store import Store, TaskRecord
from server.upload_check_peer import FollowerChecks, VerdictLog


@dataclass
class PartyState:
    config: PartyConfig
    store: Store
    tasks_changed: threading.Condition = field(default_factory=threading.Condition)
    stopping: threading.Event = field(default_factory=threading.Event)
    running_sums: RunningSums = field(default_factory=RunningSums)  #: Σ n_j·[g_j] of the open round so far
    #: the open round's shares as acknowledged, for the upload check (server.open_round_shares)
    open_shares: OpenRoundShares = field(default_factory=OpenRoundShares)
    #: set while an unlearning job is queued or runs: the coordinator opens no new round. Durable
    #: (`Store.training_pause`): restored here, before the coordinator or an admin call can open one
    training_paused: threading.Event = field(default_factory=threading.Event)
    #: set by a job that waited `jobs.pause_training_after_s`: the coordinator ends the open
    #: round now (closes it with its consistent uploads, or abandons it below the minimum cohort)
    end_open_round: threading.Event = field(default_factory=threading.Event)
    #: rounds the admin asked party0 to open (`[rounds] opening = "on_request"`)
    open_requests: set[int] = field(default_factory=set)
    #: rounds party1 confirmed open since this process started; notified on `rounds_changed`
    open_on_both: set[int] = field(default_factory=set)
    rounds_changed: threading.Condition = field(default_factory=threading.Condition)
    #: distributed DP of Stage I: noise keys and release log (None: `[privacy] dp = false`)
    stage1_dp: Stage1Privacy | None = None
    #: with DP, each round's aggregate is clipped and noised in a 2PC session (server.stage1_clip)
    stage1_clip: Stage1Clipper | None = None
    #: party1: the input-validation batches party0 leads, and the verdicts seen (server.upload_check_peer)
    checks: FollowerChecks = field(default_factory=FollowerChecks)
    verdicts: VerdictLog | None = None

    def __post_init__(self) -> None:
        if self.verdicts is None:
            self.verdicts = VerdictLog(self.config.data_dir / "input-checks")
        if self.store.training_pause() is not None:
            self.training_paused.set()
        settings = self.config.dp.settings
        if settings is not None and self.stage1_dp is None:
            self.stage1_dp = Stage1Privacy(self.config.data_dir, settings)
        if self.stage1_dp is not None and self.stage1_clip is None:
            self.stage1_clip = Stage1Clipper(self.config, self.store, self.stage1_dp)

    @property
    def role(self) -> int:
        return self.config.role

    def pause_training(self, job_id: str) -> None:
        """Pause training for job `job_id`, durably first (it survives a restart of this party)."""
        self.store.set_training_pause(job_id)
        self.training_paused.set()

    def resume_training(self) -> None:
        """The job ended: rounds open again (the durable record goes first, then the flag)."""
        self.store.set_training_pause(None)
        self.training_paused.clear()

    def request_open(self, round_index: int) -> None:
        """Ask the coordinator to open round i (it opens only latest committed + 1)."""
        with self.rounds_changed:
            self.open_requests.add(round_index)

    def mark_open_on_both(self, round_index: int) -> None:
        with self.rounds_changed:
            self.open_on_both.add(round_index)
            self.open_requests.discard(round_index)
            self.rounds_changed.notify_all()

    def mark_ended(self, round_index: int) -> None:
        """Round i was abandoned: it must be confirmed open on both parties again."""
        with self.rounds_changed:
            self.open_on_both.discard(round_index)
            self.rounds_changed.notify_all()

    def notify_tasks(self) -> None:
        with self.tasks_changed:
            self.tasks_changed.notify_all()

    def post_task(self, task: TaskRecord) -> None:
        """Store a warm-up/correction task for a client and wake its WatchTasks stream."""
        self.store.put_task(task)
        self.notify_tasks()
