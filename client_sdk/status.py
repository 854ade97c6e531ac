"""What became of a client's upload for a round, from the two parties' GetUploadStatus replies.

| outcome | meaning | final |
| --- | --- | --- |
| `counted` | a member of the committed round: its gradient is in M_i | yes |
| `excluded` | left out of the membership (reason: one-sided, different sharings, ...) | yes |
| `missed` | the round closed and neither party holds an upload of the client | yes |
| `failed` | the round stopped on an error and committed no model | yes |
| `abandoned` | the round ended without a model, may open again; the upload is kept there | no |
| `pending` | both parties hold it (or the round is closing); not decided yet | no |
| `incomplete` | the round is open and one party lacks it: resend the same sharing | no |
| `not_uploaded` | the round is open (or not yet) and neither party holds it | no |
"""

from __future__ import annotations

from dataclasses import dataclass

from proto.starfish.v1 import client_pb2

FINAL = frozenset({"counted", "excluded", "missed", "failed"})


@dataclass(frozen=True)
class UploadStatus:
    round: int
    outcome: str
    reason: str
    parties: tuple[client_pb2.UploadStatus, client_pb2.UploadStatus]

    @property
    def final(self) -> bool:
        """Whether the outcome can no longer change."""
        return self.outcome in FINAL


def _first(replies, state: int) -> client_pb2.UploadStatus | None:
    return next((r for r in replies if r.state == state), None)


def combine(round_index: int, s0: client_pb2.UploadStatus, s1: client_pb2.UploadStatus) -> UploadStatus:
    """The client's view of round i from both parties' replies (rules in the module docstring)."""
    replies = (s0, s1)
    failed = _first(replies, client_pb2.UPLOAD_STATE_ROUND_FAILED)
    if failed is not None and failed.round_state == "abandoned":
        return UploadStatus(round_index, "abandoned", failed.reason, replies)
    for state, outcome in (
        (client_pb2.UPLOAD_STATE_ROUND_FAILED, "failed"),
        (client_pb2.UPLOAD_STATE_COUNTED, "counted"),
        (client_pb2.UPLOAD_STATE_EXCLUDED, "excluded"),
    ):
        hit = _first(replies, state)
        if hit is not None:
            return UploadStatus(round_index, outcome, hit.reason, replies)
    states = {s0.state, s1.state}
    if states == {client_pb2.UPLOAD_STATE_MISSED}:
        return UploadStatus(round_index, "missed", s0.reason, replies)
    if states == {client_pb2.UPLOAD_STATE_NOT_RECEIVED}:
        return UploadStatus(round_index, "not_uploaded", s0.reason, replies)
    if client_pb2.UPLOAD_STATE_NOT_RECEIVED in states and client_pb2.UPLOAD_STATE_PENDING in states:
        missing = _first(replies, client_pb2.UPLOAD_STATE_NOT_RECEIVED)
        return UploadStatus(round_index, "incomplete", f"party{missing.party} holds no upload yet", replies)
    pending = _first(replies, client_pb2.UPLOAD_STATE_PENDING) or s0
    return UploadStatus(round_index, "pending", pending.reason, replies)
