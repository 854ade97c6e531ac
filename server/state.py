"""Process-wide state of one party shared by its services and its coordinator."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from server.aggregation import RunningSums
from server.config import PartyConfig
from server.store import Store, TaskRecord


@dataclass
class PartyState:
    config: PartyConfig
    store: Store
    tasks_changed: threading.Condition = field(default_factory=threading.Condition)
    stopping: threading.Event = field(default_factory=threading.Event)
    running_sums: RunningSums = field(default_factory=RunningSums)  #: Σ n_j·[g_j] of the open round so far
    #: set while an unlearning job runs: the coordinator opens no new round
    training_paused: threading.Event = field(default_factory=threading.Event)

    @property
    def role(self) -> int:
        return self.config.role

    def notify_tasks(self) -> None:
        with self.tasks_changed:
            self.tasks_changed.notify_all()

    def post_task(self, task: TaskRecord) -> None:
        """Store a warm-up/correction task for a client and wake its WatchTasks stream."""
        self.store.put_task(task)
        self.notify_tasks()
