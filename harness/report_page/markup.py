"""HTML building blocks of the job report page: every value is escaped unless it is `Html`.

`Html` marks text that is already markup (built here from escaped parts, e.g. a glossary
link); anything else given to `cell`, `table`, `note` or `section` is escaped, so a hostile
value in a report shows as text and never becomes markup.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from html import escape
from typing import Any


class Html(str):
    """A string that is already safe HTML (built from escaped parts)."""


def cell(value: Any) -> str:
    """`value` as HTML: markup kept, anything else escaped as text."""
    return value if isinstance(value, Html) else escape(str(value))


def join(*parts: Any) -> Html:
    """Parts (markup or text) concatenated into one piece of markup."""
    return Html("".join(cell(p) for p in parts))


def mb(n: float) -> str:
    """A byte count in the unit that suits it (B, kB, MB, GB; decimal)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n)} B"


def when(ts: float | None) -> str:
    """A UNIX time as UTC date and time to the second; "—" when absent."""
    if not ts:
        return "—"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float) -> str:
    """A span of time in words: "4.2 s", "5 min 3 s", "2 h 10 min"."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    return f"{minutes // 60} h {minutes % 60} min"


def table(head: Sequence[Any], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    th = "".join(f"<th>{cell(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{escape(cls)}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def section(ident: str, title: Any, *parts: str) -> str:
    return f'<section id="{escape(ident)}"><h2>{cell(title)}</h2>{"".join(parts)}</section>'


def note(text: Any) -> str:
    return f'<p class="note">{cell(text)}</p>'


def figure(svg: str, caption: Any) -> str:
    return f"<figure>{svg}<figcaption>{cell(caption)}</figcaption></figure>"


def definitions(rows: Sequence[tuple[Any, Any]]) -> str:
    """A definition list: one (term, description) per row."""
    return "<dl>" + "".join(f"<dt>{cell(k)}</dt><dd>{cell(v)}</dd>" for k, v in rows) + "</dl>"
