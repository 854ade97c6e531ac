"""The one skeleton of every section of docs/RESULTS.md, and its tables.

A section is a `## heading`, then for each benchmark result it shows (its parts) an optional
`### sub-heading`, the provenance line (`report_format.meta_line`: date, machine, load, command,
commit) and the part's body (setting, tables, notes, figure); a section none of whose results
exists says `Not measured yet` with the command that measures it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bench import report_format

#: writes a part's body into the lines, given the result and whether it is the quick one
Body = Callable[[list[str], dict[str, Any], bool], None]


def _always(res: dict[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Part:
    """One benchmark's result within a section: `benchmark` names its JSON, `body` renders it,
    `heading` is its `###` line when a section has several parts, `usable` rejects a result
    that lacks what the body needs (shown as not measured)."""

    benchmark: str
    body: Body
    heading: str = ""
    usable: Callable[[dict[str, Any]], bool] = _always

    def render(self, lines: list[str]) -> bool:
        """Append this part (heading, provenance line, body); False when there is no usable result."""
        res, quick = report_format.load(self.benchmark)
        if res is None or not self.usable(res):
            return False
        if self.heading:
            lines.append(f"### {self.heading}\n")
        lines.append(report_format.meta_line(res, quick) + "\n")
        self.body(lines, res, quick)
        return True


def section(lines: list[str], heading: str, *parts: Part, requirement: str = "") -> None:
    """Append `## heading` and every part that has a result; if none has, the command to measure
    them (`requirement` is added to it, e.g. what the benchmark needs to run)."""
    lines.append(f"## {heading}\n")
    shown = [part.render(lines) for part in parts]
    if not any(shown):
        names = " ".join(part.benchmark for part in parts)
        lines.append(f"Not measured yet (`python -m bench {names}`{requirement}).\n")


def row(cells: Iterable[Any]) -> str:
    """One Markdown table row (an empty cell is a single space)."""
    return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"


def table(lines: list[str], header: Sequence[str], rows: Iterable[Iterable[Any]] = ()) -> None:
    """A Markdown table: the header, its rule, then the rows (more may be appended after)."""
    lines.append(row(header))
    lines.append("|" + " --- |" * len(header))
    lines.extend(row(r) for r in rows)
