"""StarfishMod refuses what would leak an update and passes through what is not training."""

from __future__ import annotations

import time

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    Metadata,
    MetricRecord,
    RecordDict,
)

from starfish_flower import Parties, StarfishMod


def _context() -> Context:
    return Context(run_id=1, node_id=7, node_config={"partition-id": 0}, state=RecordDict(), run_config={})


def _message(message_type: str, config: dict) -> Message:
    content = RecordDict({"arrays": ArrayRecord({"w": Array(np.zeros(3, np.float32))}), "config": ConfigRecord(config)})
    metadata = Metadata(1, "m1", 0, 7, "", "", time.time(), 3600.0, message_type)  # as the node receives it
    return Message(content=content, metadata=metadata)


def _mod() -> StarfishMod:
    # unreachable parties: none of these cases may contact them
    return StarfishMod(Parties("127.0.0.1:9", "127.0.0.1:9", b"-"), identity=lambda ctx: ("client0", "token"))


def test_a_train_message_without_a_starfish_round_is_refused_before_training():
    called = []
    reply = _mod()(_message(MessageType.TRAIN, {"lr": 0.1}), _context(), lambda m, c: called.append(m))
    assert not called
    assert reply.has_error() and "in the clear" in reply.error.reason


def test_evaluate_messages_pass_through_unchanged():
    answer = Message(RecordDict({"metrics": MetricRecord({"accuracy": 0.5})}), reply_to=_message("evaluate", {}))
    reply = _mod()(_message(MessageType.EVALUATE, {}), _context(), lambda m, c: answer)
    assert reply is answer
