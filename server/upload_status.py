"""What became of a client's upload for a round on this party (the GetUploadStatus reply).

Decided from the round's state, the agreed membership and the recorded exclusions:

| round on this party | upload held here | state |
| --- | --- | --- |
| never opened | — | NOT_RECEIVED |
| failed | any | ROUND_FAILED (the round's error) |
| abandoned (round_state "abandoned": it may open again, the upload is kept) | any | ROUND_FAILED (why) |
| abandoned, M_i installed meanwhile (round_state "replaced") | any | ROUND_FAILED (final) |
| any, client excluded | any | EXCLUDED (the recorded reason) |
| committed | member | COUNTED |
| agreed / aggregated | member | PENDING (aggregating) |
| open | yes / no | PENDING / NOT_RECEIVED |
| closed | yes / no | PENDING (closing) / MISSED |
| membership fixed, not a member | — | MISSED |
"""

from __future__ import annotations

from proto.starfish.v1 import client_pb2
from server.store import Store

FIXED = ("agreed", "aggregated", "committed")  #: round states with a fixed membership


REPLACED = "replaced"  #: round_state of an abandoned round whose index now holds an unlearned model


def _label(store: Store, rec) -> str:
    """The round_state the client sees: the record's state, or REPLACED for an abandoned round
    that can no longer open again (an unlearning job installed M_i)."""
    if rec.state == "abandoned" and store.global_model_hash(rec.round) is not None:
        return REPLACED
    return rec.state


def _state(store: Store, round_index: int, client: str, held: bool) -> tuple[int, str]:
    """(UploadState, reason) of `client`'s upload for round i on this party."""
    rec = store.round_record(round_index)
    if rec is None:
        return client_pb2.UPLOAD_STATE_NOT_RECEIVED, f"round {round_index} has not opened on this party"
    if _label(store, rec) == REPLACED:
        return client_pb2.UPLOAD_STATE_ROUND_FAILED, (
            f"{rec.error}; round {round_index} will not open again (global model {round_index} is an "
            "unlearned model): submit to the next round"
        )
    if rec.state in ("failed", "abandoned"):
        return client_pb2.UPLOAD_STATE_ROUND_FAILED, rec.error
    reason = store.exclusions(round_index).get(client)
    if reason is not None:
        return client_pb2.UPLOAD_STATE_EXCLUDED, reason
    if rec.state in FIXED:
        if client not in store.round_members(round_index):
            return client_pb2.UPLOAD_STATE_MISSED, f"round {round_index} closed without an upload of {client!r}"
        if rec.state == "committed":
            return client_pb2.UPLOAD_STATE_COUNTED, ""
        return client_pb2.UPLOAD_STATE_PENDING, "a member of the agreed membership; the round is aggregating"
    if rec.state == "open":
        if held:
            return client_pb2.UPLOAD_STATE_PENDING, "held; the round is open"
        return client_pb2.UPLOAD_STATE_NOT_RECEIVED, f"round {round_index} is open and holds no upload of {client!r}"
    if held:
        return client_pb2.UPLOAD_STATE_PENDING, "held; the round is closing"
    return client_pb2.UPLOAD_STATE_MISSED, f"round {round_index} closed without an upload of {client!r}"


def upload_status(store: Store, party: int, round_index: int, client: str) -> client_pb2.UploadStatus:
    """The GetUploadStatus reply of this party for (client, round i)."""
    upload = store.upload(round_index, client)
    state, reason = _state(store, round_index, client, upload is not None)
    rec = store.round_record(round_index)
    return client_pb2.UploadStatus(
        party=party,
        round=round_index,
        state=state,
        reason=reason,
        binding_sha256=upload.binding_sha256 if upload else "",
        content_sha256=upload.grad_sha256 if upload else "",
        n_samples=upload.n_samples if upload else 0,
        round_state=_label(store, rec) if rec else "",
    )
