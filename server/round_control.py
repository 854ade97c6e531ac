"""Round control of party0's admin API for an external FL server that samples clients.

A Flower strategy (or any server that picks the clients of each round) drives Stage I
through four admin calls instead of letting party0 wait for every registered client:

* `OpenRound(i)`: with `[rounds] opening = "on_request"`, party0 opens round i only when
  asked; the reply comes once party1 holds the round open too. Idempotent: asking for the
  open (or an already finished) round i returns where it stands; a round i abandoned below
  its minimum cohort (server.cohort) while M_{i−1} is still the newest model opens again,
  with the uploads it holds.
* `CloseRound(i, clients)`: round i closes as soon as every listed client has an upload on
  both parties (an empty list: with the uploads there are). The request is stored durably,
  so it survives a restart of party0; the deadline rule of the round protocol still applies.
  A round whose agreed membership would be smaller than the minimum cohort k is abandoned
  instead of committed. With `wait_s` the reply waits until round i is committed, failed
  or abandoned.
* `GetGlobalModel(i)`: the committed model M_i (public by design).
* `ListTasks(job)`: the open warm-up/correction tasks of a job — who is asked, not what.
"""

from __future__ import annotations

import time

import grpc

from proto.starfish.v1 import admin_pb2, common_pb2
from proto.wire import model_messages
from server.party_state import PartyState
from server.store import StoreError

FINISHED = ("committed", "failed", "abandoned")


def round_ticket(state: PartyState, round_index: int) -> admin_pb2.RoundTicket:
    rec = state.store.round_record(round_index)
    if rec is None:
        return admin_pb2.RoundTicket(round=round_index, state="not_open")
    ticket = admin_pb2.RoundTicket(
        round=rec.round,
        state=rec.state,
        model_in_hash=rec.model_in_hash,
        model_out_hash=rec.model_out_hash or "",
        deadline_unix=rec.deadline,
        lr=rec.lr,
        error=rec.error,
    )
    if rec.membership_sha256 is not None:
        members = state.store.round_members(rec.round)
        ticket.members.extend(common_pb2.Member(client_id=c, n_samples=n) for c, n in members.items())
    return ticket


def open_round(state: PartyState, request: admin_pb2.RoundOpenRequest, context) -> admin_pb2.RoundTicket:
    """Open round i = latest committed + 1 on both parties, or report where round i stands."""
    store, i = state.store, request.round
    latest = store.latest_committed()
    if latest < 0:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "training has not started: no initial model")
    rec = store.round_record(i)
    reopen = rec is not None and rec.state == "abandoned" and i == latest + 1  # M_{i−1} is still current
    if rec is not None and not reopen and (rec.state != "open" or i in state.open_on_both):
        return round_ticket(state, i)
    if rec is None and i != latest + 1:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"round {i} cannot open: the next round is {latest + 1}")
    current = store.current_round()
    if current is not None and current.state == "failed":
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"training halted: {current.error}")
    if (rec is None or reopen) and state.training_paused.is_set():
        context.abort(
            grpc.StatusCode.FAILED_PRECONDITION,
            "an unlearning job is queued or running: no round opens until it ends",
        )
    state.request_open(i)
    end = time.time() + state.config.rounds.peer_timeout_s
    with state.rounds_changed:
        while i not in state.open_on_both:
            left = end - time.time()
            if left <= 0 or state.stopping.is_set():
                context.abort(grpc.StatusCode.UNAVAILABLE, f"round {i} is not open on both parties yet; retry")
            state.rounds_changed.wait(min(left, 0.5))
    return round_ticket(state, i)


def close_round(state: PartyState, request: admin_pb2.RoundCloseRequest, context) -> admin_pb2.RoundTicket:
    """Record when round i may close; optionally wait until it is committed or failed."""
    store, i = state.store, request.round
    rec = store.round_record(i)
    if rec is None:
        context.abort(grpc.StatusCode.NOT_FOUND, f"round {i} was never opened")
    unknown = sorted(c for c in request.clients if c not in state.config.clients)
    if unknown:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown client(s) {unknown[:5]}")
    if rec.state == "open":
        if not request.clients and not store.uploads(i):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"round {i} has no upload to close with")
        store.request_close(i, list(request.clients))
    end = time.time() + max(0.0, request.wait_s)
    while time.time() < end and not state.stopping.is_set():
        rec = store.round_record(i)
        if rec is not None and rec.state in FINISHED:
            break
        state.stopping.wait(state.config.rounds.poll_s)
    return round_ticket(state, i)


def global_model_messages(state: PartyState, request: admin_pb2.GlobalModelRequest, context):
    """The chunks of a committed M_i (header first)."""
    store = state.store
    i = store.latest_committed() if request.latest else request.round
    try:
        model = store.global_model(i)
    except StoreError as exc:
        context.abort(grpc.StatusCode.NOT_FOUND, f"no committed global model {i}: {exc}")
    header = common_pb2.ModelHeader(
        round=i, arch=model.arch, num_params=model.params.size, model_hash=model.hash, lr=model.lr
    )
    return model_messages(header, model.params, state.config.limits.chunk_bytes)


def open_tasks(state: PartyState, request: admin_pb2.JobRef) -> admin_pb2.ListTasksReply:
    tasks = state.store.open_job_tasks(request.job_id, time.time())
    return admin_pb2.ListTasksReply(
        tasks=[
            admin_pb2.TaskEntry(
                task_id=t.task_id,
                client_id=t.client,
                kind=t.kind,
                unlearning_round=t.unlearning_round,
                original_round=t.original_round,
                deadline_unix=t.deadline,
            )
            for t in tasks
        ]
    )
