"""What `starfish admin` prints: a few readable lines per reply (dates in UTC, states in
words, progress in percent, bytes in MB), or with `--json` the reply as data for scripts.

The JSON form keeps the field names of the contract (proto/starfish/v1/admin.proto), with
every field present, integers as numbers (not strings), enum values as short lower-case
words (`running`, `open`) and times as Unix seconds (fields ending in `_unix`).
"""

from __future__ import annotations

import re
import time
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from proto.starfish.v1 import admin_pb2, common_pb2


def _enum_word(field: FieldDescriptor, number: int) -> str:
    """`JOB_STATE_RUNNING` of enum `JobState` → `running` (the enum's name prefix dropped)."""
    name = field.enum_type.values_by_number[number].name if number in field.enum_type.values_by_number else str(number)
    prefix = re.sub(r"(?<!^)(?=[A-Z])", "_", field.enum_type.name).upper() + "_"
    return name.removeprefix(prefix).lower()


def _field_value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return as_data(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return _enum_word(field, value)
    return value


def as_data(msg: Message) -> dict[str, Any]:
    """The reply as plain JSON-ready data (see the module docstring)."""
    out: dict[str, Any] = {}
    for field in msg.DESCRIPTOR.fields:
        value = getattr(msg, field.name)
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            out[field.name] = {k: _field_value(entry.fields_by_name["value"], v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_field_value(field, v) for v in value]
        elif field.type == FieldDescriptor.TYPE_MESSAGE and not msg.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _field_value(field, value)
    return out


def when(unix: float) -> str:
    """A Unix time as `YYYY-MM-DD HH:MM:SS UTC` ('-' when unset)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix)) if unix > 0 else "-"


def duration(seconds: float) -> str:
    """Seconds as `1h02m`, `3m05s` or `12.3s`."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    if seconds >= 60:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{seconds:.1f}s"


def megabytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB"


def _state(status: admin_pb2.JobStatus) -> str:
    return _enum_word(admin_pb2.JobStatus.DESCRIPTOR.fields_by_name["state"], status.state)


def job_text(status: admin_pb2.JobStatus) -> str:
    """A job's status: state, step, progress, time and bytes, attempts and errors."""
    lines = [
        f"job {status.job_id}: {_state(status)}" + (f" — {status.step}" if status.step else ""),
        f"progress {100 * status.progress:.0f} % (unlearning round {status.unlearning_round}), "
        f"{duration(status.seconds)} elapsed, {megabytes(status.bytes)} exchanged",
    ]
    if status.attempt:
        lines.append(
            f"session attempt {status.attempt} ({status.failures_since_progress} failed since the last progress)"
        )
    if status.last_error:
        lines.append(
            f"last failed attempt: {status.last_error}"
            + (f" ({status.failed_process})" if status.failed_process else "")
        )
    if status.adopted_from:
        lines.append(f"resumed from the checkpoints of job {status.adopted_from}")
    if status.dealer:
        lines.append(f"dealer: {status.dealer}")
    if status.privacy.dp:
        lines.append(f"differential privacy: ε = {status.privacy.epsilon:g} at δ = {status.privacy.delta:g}")
    evaluation = status.federated_evaluation
    if evaluation.state:
        lines.append(f"federated evaluation ({evaluation.state}): {evaluation.summary}")
    if status.error:
        lines.append(f"error: {status.error}")
    return "\n".join(lines)


def jobs_text(reply: admin_pb2.ListJobsReply) -> str:
    """One line per job, oldest first."""
    if not reply.jobs:
        return "no unlearning jobs"
    rows = [f"{'JOB':<14} {'STATE':<10} {'PROGRESS':>8} {'ROUND':>5} {'ELAPSED':>8}  STEP / ERROR"]
    for s in reply.jobs:
        note = s.error or s.step
        rows.append(
            f"{s.job_id:<14} {_state(s):<10} {100 * s.progress:>7.0f}% {s.unlearning_round:>5} "
            f"{duration(s.seconds):>8}  {note}"
        )
    return "\n".join(rows)


def training_text(status: admin_pb2.TrainingStatus) -> str:
    """Training phase, rounds and the round history."""
    phase = _enum_word(admin_pb2.TrainingStatus.DESCRIPTOR.fields_by_name["phase"], status.phase)
    limit = f"of at most {status.max_rounds}" if status.max_rounds else "(no round limit)"
    lines = [
        f"training: {phase}" + (f", round {status.open_round} open" if status.open_round else ""),
        f"latest committed round {status.latest_committed} {limit}, model {status.latest_model_hash[:16] or '-'}",
        f"registered clients: {len(status.registered)}"
        + (f" ({', '.join(status.registered)})" if status.registered else ""),
    ]
    if status.error:
        lines.append(f"error: {status.error}")
    if status.rounds:
        lines.append(f"{'ROUND':>5} {'STATE':<10} {'MEMBERS':>7} {'OPENED':<23} {'COMMITTED':<23} {'PEER':>9}  NOTE")
    for r in status.rounds:
        note = r.error or ", ".join(f"{e.client_id} left out: {e.reason}" for e in r.excluded)
        lines.append(
            f"{r.round:>5} {r.state:<10} {len(r.members):>7} {when(r.opened_unix):<23} "
            f"{when(r.committed_unix):<23} {megabytes(r.peer_bytes):>9}  {note}"
        )
    return "\n".join(line.rstrip() for line in lines)


def receipt_text(receipt: common_pb2.EraseReceipt) -> str:
    return (
        f"party{receipt.party}: erased {receipt.client_id} at {when(receipt.erased_at)}: "
        f"rounds {list(receipt.rounds)}, {receipt.files_deleted} files ({megabytes(receipt.bytes_deleted)}), "
        f"{receipt.rows_deleted} rows"
    )


def text(reply: Message) -> str:
    """The readable form of any reply `starfish admin` prints."""
    if isinstance(reply, admin_pb2.JobStatus):
        return job_text(reply)
    if isinstance(reply, admin_pb2.ListJobsReply):
        return jobs_text(reply)
    if isinstance(reply, admin_pb2.TrainingStatus):
        return training_text(reply)
    if isinstance(reply, admin_pb2.EraseReply):
        return "\n".join(receipt_text(r) for r in reply.receipts)
    raise TypeError(f"no readable form for {type(reply).__name__}")
