"""Errors raised by the client SDK; each names what is wrong and on which party."""

from __future__ import annotations

from mpc.fixedpoint import EncodingError  # re-exported: non-finite / out-of-range values


class StarfishError(RuntimeError):
    """Base class of SDK errors."""


class AuthenticationError(StarfishError):
    """A party does not know this client id or rejects its credential."""


class NotRegisteredError(StarfishError):
    """The client has not registered (or was erased) on a party."""


class BadRoundError(StarfishError):
    """The round is not open for uploads (closed, not yet open, or unknown)."""


class RoundClosedError(BadRoundError):
    """The round closed without this client's upload; `status` (client_sdk.status.UploadStatus)
    holds both parties' view and the reason (e.g. only one party received it in time)."""

    def __init__(self, message: str, status=None):
        super().__init__(message)
        self.status = status


class TaskExpiredError(BadRoundError):
    """A party refused a task answer as past its deadline: the answer is dropped, not retried
    (the job's next task asks again)."""


class ModelMismatchError(StarfishError):
    """The two parties serve different models (or encodings): one of them equivocates."""


class PartyUnreachableError(StarfishError):
    """A party did not answer after all retries."""


class UploadRejectedError(StarfishError):
    """A party refused an upload (malformed, oversized, or conflicting with an earlier one)."""


class ConflictingUploadError(UploadRejectedError):
    """A different upload for the same round is already stored; uploads cannot be replaced."""


__all__ = [
    "AuthenticationError",
    "BadRoundError",
    "ConflictingUploadError",
    "EncodingError",
    "ModelMismatchError",
    "NotRegisteredError",
    "PartyUnreachableError",
    "RoundClosedError",
    "StarfishError",
    "TaskExpiredError",
    "UploadRejectedError",
]
