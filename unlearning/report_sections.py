"""The one shape of a report's `revealed` section, shared by a run's report and a job's
report (docs/PRIVACY.md, "What is published").

`revealed` maps each kind of value a run opened to one entry, made by `revealed_kind`:
`count` (how many values of the kind were opened), `why` (what a value is and why the
protocol opens it) and the kind's own facts (`values`, `published`, `rejected`, ...). The
strategy's run report (`unlearning/starfish/run_report.py`) makes its kinds; the job report
(`server/jobs/job_report.py`) adds the public models' kinds with the same function and
completes every kind with `cohort` (the fewest clients any of its values aggregates) and
`epsilon` (the DP budget spent; None without DP).
"""

from __future__ import annotations

from typing import Any


def revealed_kind(count: int, why: str, **facts: Any) -> dict[str, Any]:
    """One entry of the `revealed` section: `count` values opened, `why`, and the kind's facts."""
    return {"count": count, "why": why, **facts}
