"""The statement of an erasure certificate, as one party sees it from its own records.

Both parties build their view the same way (`party_view`) from their own job record,
their own store and their own worker's report — nothing the other party sent:

* ``job``: id, strategy, the parameters the run used, the targets;
* ``models``: the global model the job replaced (M_T, round T) and the unlearned model
  that replaced it (M̂ = M_{T+1}), by content hash (`proto.wire.model_hash`:
  sha256 over "starfish-model-v1", the architecture, the length and the float32 bytes);
* ``history``: the stored rounds T, the selected rounds, the number of threshold checks
  and ARP — public values of the run;
* ``erasure``: per target, the rounds in which it was an agreed member and this party's
  erasure receipt (rounds, files, bytes, rows deleted, when, hashes of the deleted shares);
* ``revealed``: every value the run opened, by kind (the job report's list).

party0's statement adds party1's receipts to its view (`with_peer_receipts`); each party
checks the statement against its own view before signing (`server.evidence.attestation`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from proto.certificate import utc_iso
from server.jobs.jobstore import JobRecord
from server.store import Store

MODEL_HASH_SCHEME = "sha256('starfish-model-v1' 0 ‖ architecture 0 ‖ length u64 LE ‖ float32 LE parameters)"


class ViewError(RuntimeError):
    """This party's own records cannot support a certificate (job not finished, target not erased, ...)."""


def receipt_entry(receipt: Mapping[str, Any]) -> dict[str, Any]:
    """An erasure receipt as it appears in a statement (times as ISO 8601 UTC)."""
    return {
        "party": int(receipt["party"]),
        "client": str(receipt["client"]),
        "rounds": [int(r) for r in receipt["rounds"]],
        "files_deleted": int(receipt["files_deleted"]),
        "bytes_deleted": int(receipt["bytes_deleted"]),
        "rows_deleted": int(receipt["rows_deleted"]),
        "erased_at": utc_iso(float(receipt["erased_at"])),
        "content_sha256": [str(h) for h in receipt["content_sha256"]],
    }


def member_rounds(store: Store, client: str, base_round: int) -> list[int]:
    """Rounds 1..T in which `client` was an agreed member (public, equal on both parties)."""
    return [i for i in range(1, base_round + 1) if client in store.round_members(i)]


def _models(job: JobRecord, store: Store) -> dict[str, Any]:
    base = job.base_round
    replaced, unlearned = store.global_model_hash(base), store.global_model_hash(base + 1)
    if replaced is None or replaced != job.base_model_hash:
        raise ViewError(
            f"global model {base} here is {replaced or 'missing'}, the job started from {job.base_model_hash}"
        )
    if unlearned is None or unlearned != job.model_hash:
        raise ViewError(
            f"global model {base + 1} here is {unlearned or 'missing'}, the job produced {job.model_hash or 'nothing'}"
        )
    return {
        "architecture": store.model_by_hash(unlearned).arch,
        "hash_scheme": MODEL_HASH_SCHEME,
        "replaced": {"global_round": base, "hash": replaced},
        "unlearned": {"global_round": base + 1, "hash": unlearned},
    }


def _erasure(role: int, job: JobRecord, store: Store) -> dict[str, Any]:
    out = {}
    for target in job.targets:
        receipt = store.erasure_receipt(target)
        if not store.is_erased(target) or receipt is None:
            raise ViewError(f"{target} is not erased on party{role}")
        held = store.shares_held(target)
        if held:
            raise ViewError(f"party{role} still holds {held} stored share(s) of {target}")
        out[target] = {
            "member_rounds": member_rounds(store, target, job.base_round),
            "receipts": {f"party{role}": receipt_entry(asdict(receipt))},
        }
    return out


def party_view(role: int, job: JobRecord, store: Store, job_dir: Path) -> dict[str, Any]:
    """The statement as party `role` can confirm it (its own receipts only); raises ViewError."""
    if job.state not in ("running", "succeeded") or not job.model_hash:
        raise ViewError(f"job {job.job_id} has no result on party{role} (it is {job.state})")
    try:
        run = json.loads((Path(job_dir) / "worker-report.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        raise ViewError(f"party{role} has no report of its worker for job {job.job_id}: {exc}") from None
    return {
        "job": {
            "id": job.job_id,
            "strategy": job.strategy,
            "parameters": run["params"],
            "targets": list(job.targets),
        },
        "models": _models(job, store),
        "history": {
            "stored_rounds": run["stored_rounds"],
            "selection_method": run["selection"]["method"],
            "selected_rounds": run["selection"]["selected_rounds"],
            "threshold_checks": len(run["flags"]),
            "arp_percent": run["arp_percent"],
        },
        "erasure": _erasure(role, job, store),
        "revealed": run["revealed"],
    }


def with_peer_receipts(view: dict[str, Any], receipts: Mapping[str, list[Mapping[str, Any]]], peer: int) -> dict:
    """party0's statement: its view plus the other party's receipt of every target."""
    statement = json.loads(json.dumps(view))
    for target, entry in statement["erasure"].items():
        theirs = [r for r in receipts.get(target, []) if int(r["party"]) == peer]
        if len(theirs) != 1:
            raise ViewError(f"no erasure receipt of party{peer} for {target}")
        entry["receipts"][f"party{peer}"] = receipt_entry(theirs[0])
    return statement
