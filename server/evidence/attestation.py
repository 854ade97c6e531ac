"""What a party checks before it signs an erasure certificate: it signs only what it can confirm.

Given the statement to sign and the party's own view (`server.evidence.statement.party_view`):

1. every field except the other party's receipts must equal the party's own view
   (compared in canonical JSON): the job, both model hashes, the history, the revealed
   values, the member rounds and this party's own receipt of every target;
2. the other party's receipt cannot be checked against this party's files, but it must
   be the other party's, name the target, and cover every round in which the target
   was an agreed member (an agreed member's shares were stored on both parties).

The first difference found is reported with its path, e.g. ``models.unlearned.hash``.
"""

from __future__ import annotations

import json
from typing import Any

from proto.certificate import canonical_json


class AttestationRefused(RuntimeError):
    """The statement says something this party's own records do not confirm."""


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def first_difference(claimed: Any, held: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first path at which two JSON values differ (canonical comparison), or None."""
    if isinstance(claimed, dict) and isinstance(held, dict):
        for key in sorted(set(claimed) | set(held)):
            diff = first_difference(claimed.get(key), held.get(key), f"{path}.{key}" if path else key)
            if diff:
                return diff
        return None
    if isinstance(claimed, list) and isinstance(held, list) and len(claimed) == len(held):
        for i, (a, b) in enumerate(zip(claimed, held, strict=True)):
            diff = first_difference(a, b, f"{path}[{i}]")
            if diff:
                return diff
        return None
    return None if canonical_json(claimed) == canonical_json(held) else (path or "statement", claimed, held)


def check_statement(statement: dict[str, Any], view: dict[str, Any], role: int) -> None:
    """Raise AttestationRefused unless party `role` can sign `statement` (see module doc)."""
    me, other = f"party{role}", f"party{1 - role}"
    claimed = json.loads(json.dumps(statement))
    theirs: dict[str, Any] = {}
    for target, entry in (claimed.get("erasure") or {}).items():
        if isinstance(entry, dict) and isinstance(entry.get("receipts"), dict):
            theirs[target] = entry["receipts"].pop(other, None)
    diff = first_difference(claimed, view)
    if diff:
        path, said, held = diff
        raise AttestationRefused(f"{path}: the statement says {_short(said)}, {me}'s records say {_short(held)}")
    for target, receipt in sorted(theirs.items()):
        if not isinstance(receipt, dict):
            raise AttestationRefused(f"erasure.{target}: the statement has no receipt of {other}")
        if receipt.get("party") != 1 - role or receipt.get("client") != target:
            raise AttestationRefused(f"erasure.{target}.receipts.{other} is not {other}'s receipt for {target}")
        rounds = receipt.get("rounds")
        if not isinstance(rounds, list):
            raise AttestationRefused(f"erasure.{target}.receipts.{other} lists no rounds")
        missing = sorted(set(view["erasure"][target]["member_rounds"]) - set(rounds))
        if missing:
            raise AttestationRefused(
                f"erasure.{target}.receipts.{other} omits rounds {missing} in which {target} was a member"
            )
