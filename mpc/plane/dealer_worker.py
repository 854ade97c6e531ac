"""Party 0's requests to the dealer, exchanged in submission order by one thread (`RequestWorker`).

The dealer answers a session's requests one at a time, in the order they arrive, drawing
each answer from its copies of the parties' streams at that position
(`mpc.plane.dealer_ops`): the order in which party 0 sends its requests must be the order
in which both parties draw their local shares. One thread owns the connection (OpenSSL
allows no second thread on it) and runs the submitted exchanges first in, first out, so
a request keeps the place it was submitted at: submitting is the protocol step, waiting
for the answer is not. A request submitted early (`mpc.plane.fixed_prefetch`) is computed
by the dealer while the parties go on with their own work.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from mpc.plane.dealer_ops import Request

if TYPE_CHECKING:
    import torch

Exchange = Callable[[Request, tuple[int, ...]], "torch.Tensor"]


class Pending:
    """One submitted request: its answer (party 0's share) once the worker has it."""

    def __init__(self, request: Request, shape: tuple[int, ...]) -> None:
        self.request = request
        self.shape = shape
        self._done = threading.Event()
        self._value: torch.Tensor | None = None
        self._error: BaseException | None = None

    def finish(self, value: torch.Tensor | None, error: BaseException | None) -> None:
        self._value, self._error = value, error
        self._done.set()

    def result(self) -> torch.Tensor:
        """The answer, once received (each exchange is bounded by the channel's timeout)."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


class RequestWorker:
    """One daemon thread running `exchange(request, shape)` for each submitted request, in order."""

    def __init__(self, exchange: Exchange, name: str) -> None:
        self._exchange = exchange
        self._jobs: queue.SimpleQueue[Pending | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, request: Request, shape: tuple[int, ...]) -> Pending:
        """Queue a request behind those submitted before it; returns at once."""
        job = Pending(request, shape)
        self._jobs.put(job)
        return job

    def stop(self, timeout_s: float) -> None:
        """Finish the queued exchanges (each bounded by the channel's timeout), then end the thread."""
        self._jobs.put(None)
        self._thread.join(timeout_s)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job.finish(self._exchange(job.request, job.shape), None)
            except BaseException as exc:  # handed to the waiting caller
                job.finish(None, exc)
