"""Storage faults are transient: a full or read-only disk is answered as "retry", not as a refusal.

A write that fails because the party's disk is full (SQLite "database or disk is full",
OSError ENOSPC/EDQUOT) or cannot be written (read-only file system or database, EROFS,
EACCES, an I/O error) leaves the store as it was before the call: the SQLite transaction is
rolled back (server.store) and a temp or half-published file is removed (mpc.durable). The
gRPC answer names the reason with a retryable status:

* RESOURCE_EXHAUSTED with trailing metadata `x-starfish-busy: storage` when the disk is full
  (the SDK retries it like admission control's "busy"; docs/SERVICE.md, "Retry contract");
* UNAVAILABLE when the store cannot be written now (read-only, I/O error).

party0's peer client retries both (server.peer_client) and tells them apart from a refusal,
so a round resumes on its own once the store is writable again. The party whose store failed
logs each such answer (WARNING, with the call and the reason), so its own log says why its
callers wait. Before a round opens the
coordinator checks the free space of the data directory against `[limits] min_free_bytes`
(`headroom_ok`); the free space is exported as `starfish_store_free_bytes`.
"""

from __future__ import annotations

import errno
import logging
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import grpc

from server import metrics

log = logging.getLogger(__name__)
BUSY_KEY = "x-starfish-busy"
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
UNWRITABLE_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)
FULL_TEXT = ("database or disk is full",)
UNWRITABLE_TEXT = ("readonly database", "disk i/o error", "unable to open database")


class StorageFault(RuntimeError):
    """A write to this party's store failed for a transient reason (disk full, read-only)."""

    def __init__(self, reason: str, full: bool):
        super().__init__(reason)
        self.full = full


def classify(exc: BaseException) -> StorageFault | None:
    """The storage fault `exc` is, or None when it is something else (a bug, a refusal)."""
    if isinstance(exc, StorageFault):
        return exc
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        if any(t in text for t in FULL_TEXT):
            return StorageFault(f"store is full: {exc}", full=True)
        if any(t in text for t in UNWRITABLE_TEXT):
            return StorageFault(f"store cannot be written: {exc}", full=False)
        return None
    if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
        return StorageFault(f"store is full: {exc.strerror} ({exc.filename or 'data dir'})", full=True)
    if isinstance(exc, OSError) and exc.errno in UNWRITABLE_ERRNOS:
        return StorageFault(f"store cannot be written: {exc.strerror} ({exc.filename or 'data dir'})", full=False)
    return None


def free_bytes(data_dir: Path) -> int:
    """Free bytes of the file system that holds `data_dir` (for an unprivileged writer)."""
    return int(shutil.disk_usage(data_dir).free)


def headroom_ok(data_dir: Path, min_free_bytes: int) -> bool:
    """Whether the data directory has at least `min_free_bytes` free (0 disables the check)."""
    return min_free_bytes <= 0 or free_bytes(data_dir) >= min_free_bytes


def abort(context, fault: StorageFault, role: int, method: str = "") -> None:
    """Answer a call whose write failed: RESOURCE_EXHAUSTED (full, with the busy key) or UNAVAILABLE."""
    metrics.storage_fault("full" if fault.full else "unwritable")
    detail = f"party{role} cannot write its store now ({fault}); retry"
    status = "RESOURCE_EXHAUSTED" if fault.full else "UNAVAILABLE"
    log.warning("%s answered %s: %s", method.rsplit("/", 1)[-1] or "a call", status, detail)
    if fault.full:
        context.set_trailing_metadata(((BUSY_KEY, "storage"),))
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, detail)
    context.abort(grpc.StatusCode.UNAVAILABLE, detail)


def _unary(behavior: Callable, role: int, method: str) -> Callable:
    def run(request, context):
        try:
            return behavior(request, context)
        except Exception as exc:
            fault = classify(exc)
            if fault is None:
                raise
            abort(context, fault, role, method)

    return run


def _streaming(behavior: Callable, role: int, method: str) -> Callable:
    def run(request, context):
        try:
            yield from behavior(request, context)
        except Exception as exc:
            fault = classify(exc)
            if fault is None:
                raise
            abort(context, fault, role, method)

    return run


class StorageFaultInterceptor(grpc.ServerInterceptor):
    """Answers a handler's storage fault with a retryable status naming the reason (not UNKNOWN)."""

    def __init__(self, role: int):
        self.role = role

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        role, method = self.role, handler_call_details.method
        if handler.unary_unary:
            return handler._replace(unary_unary=_unary(handler.unary_unary, role, method))
        if handler.stream_unary:
            return handler._replace(stream_unary=_unary(handler.stream_unary, role, method))
        if handler.unary_stream:
            return handler._replace(unary_stream=_streaming(handler.unary_stream, role, method))
        return handler._replace(stream_stream=_streaming(handler.stream_stream, role, method))
