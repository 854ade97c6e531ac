"""Starfish client SDK: connect to both parties, fetch the public model, upload secret
shares of (g, ‖g‖, δ) from an on-disk outbox (every retry resends the same sharing), ask
what became of an upload, answer warm-up/correction tasks. Needs numpy and grpc only;
`client_sdk.torch_helper` (optional) turns an nn.Module + DataLoader into a gradient function."""

from client_sdk.client import Client, GlobalModel, RoundView, SubmitReceipt, TaskInfo
from client_sdk.errors import (
    AuthenticationError,
    BadRoundError,
    ConflictingUploadError,
    EncodingError,
    ModelMismatchError,
    NotRegisteredError,
    PartyUnreachableError,
    RoundClosedError,
    StarfishError,
    UploadRejectedError,
)
from client_sdk.stats import l2_norm, tolerance_threshold
from client_sdk.status import UploadStatus

__all__ = [
    "AuthenticationError",
    "BadRoundError",
    "Client",
    "ConflictingUploadError",
    "EncodingError",
    "GlobalModel",
    "ModelMismatchError",
    "NotRegisteredError",
    "PartyUnreachableError",
    "RoundClosedError",
    "RoundView",
    "StarfishError",
    "SubmitReceipt",
    "TaskInfo",
    "UploadRejectedError",
    "UploadStatus",
    "l2_norm",
    "tolerance_threshold",
]
