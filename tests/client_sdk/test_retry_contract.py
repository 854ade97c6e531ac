"""The retry contract: every gRPC status maps to exactly one SDK behaviour, the table in
docs/SERVICE.md says the same, and a task answer a party refuses as late is dropped at once
(real party processes) so that the client answers the next task in time."""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from client_sdk.retry import CONTRACT, LATE_TASK, Behaviour, behaviour
from server.store import Store

pytestmark = pytest.mark.timeout(300)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "SERVICE.md"
WORDS = {"retry": Behaviour.RETRY, "resubmit next round": Behaviour.NEXT_ROUND, "give up": Behaviour.GIVE_UP}
S = grpc.StatusCode


def test_every_status_has_exactly_one_behaviour():
    assert set(CONTRACT) == set(S)
    assert behaviour(S.RESOURCE_EXHAUSTED, busy=True) is Behaviour.RETRY
    assert behaviour(S.RESOURCE_EXHAUSTED) is Behaviour.GIVE_UP
    assert behaviour(S.DEADLINE_EXCEEDED, "Deadline Exceeded") is Behaviour.RETRY  # our own call timeout
    assert behaviour(S.DEADLINE_EXCEEDED, f"task t1 is {LATE_TASK}") is Behaviour.NEXT_ROUND  # an older party
    assert behaviour(S.CANCELLED) is Behaviour.RETRY  # a party stopped with the call in flight


def _docs_table() -> dict[str, Behaviour]:
    """status name → behaviour, from the retry-contract table of docs/SERVICE.md."""
    text = DOCS.read_text()
    start = text.index("| status from a party | behaviour |")
    rows: dict[str, Behaviour] = {}
    for line in text[start:].splitlines()[2:]:
        if not line.strip().startswith("|"):
            break
        status, doing = (cell.strip() for cell in line.strip().strip("|").split("|")[:2])
        codes = set(re.findall(r"\b[A-Z][A-Z_]{3,}\b", status.split("(")[0] + " " + status))
        for code in codes & set(S.__members__):
            rows.setdefault(code, WORDS[doing])
    return rows


def test_the_documented_table_is_the_contract():
    documented = _docs_table()
    for code in set(S) - {S.OK}:
        assert code.name in documented, f"{code.name} is missing from the table in docs/SERVICE.md"
        expected = Behaviour.RETRY if code == S.RESOURCE_EXHAUSTED else CONTRACT[code]  # the busy row comes first
        assert documented[code.name] is expected, code.name


def _post_task(dep, task_id: str, client: str, model_hash: str, deadline: float) -> None:
    """File a task for `client` on both parties, as a job's worker does."""
    for party in (0, 1):
        with sqlite3.connect(dep.data_dir(party) / "meta.sqlite", timeout=30) as db:
            db.execute(
                "INSERT INTO tasks VALUES (?,?,?,?,?,?,?,?,?)",
                (task_id, client, "jlate", 1, 1, 1, model_hash, deadline, time.time()),
            )


def test_a_task_answer_refused_as_late_is_dropped_at_once(sdk_parties):
    m0 = Store(sdk_parties.data_dir(0), 0, readonly=True).global_model_hash(0)
    late_deadline = time.time() + 4.0
    _post_task(sdk_parties, "tlate", "a3", m0, late_deadline)
    _post_task(sdk_parties, "tnext", "a3", m0, time.time() + 120.0)
    seen: list[str] = []

    def grad_fn(params, task):
        seen.append(task.task_id)
        if task.task_id == "tlate":  # the client is slower than the task's deadline
            time.sleep(max(0.0, late_deadline - time.time()) + 0.5)
        return np.ones(params.size), 4

    with sdk_parties.client("a3") as c:
        stop = threading.Event()
        timer = threading.Timer(60.0, stop.set)
        timer.start()
        started = time.time()
        try:
            answered = c.serve_tasks(grad_fn, stop=stop, max_tasks=1)
        finally:
            timer.cancel()
        took = time.time() - late_deadline
        assert c.outbox.load("task:tlate") is None  # dropped, never resent
    assert seen == ["tlate", "tnext"] and answered == 1, (seen, answered)
    assert took < 8.0, f"the late answer held the client {took:.1f} s past its deadline ({time.time() - started:.1f} s)"
    for party in (0, 1):
        store = Store(sdk_parties.data_dir(party), party, readonly=True)
        assert store.load_task_share("tlate") is None and store.load_task_share("tnext") is not None
