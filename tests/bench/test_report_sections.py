"""The one section skeleton of docs/RESULTS.md: heading, provenance line, body, or the command
that measures a benchmark not yet run."""

from __future__ import annotations

from typing import Any

import pytest

from bench import report, report_format
from bench.report_section import Part, row, section, table


def _result(name: str) -> dict[str, Any]:
    meta = {
        "date_utc": "2026-01-01 00:00:00",
        "machine": {"cpu": "cpu", "cores": 2},
        "load_average_start": [0.1, 0.1, 0.1],
        "load_average_end": [0.2, 0.1, 0.1],
        "params": {},
        "commit": "0123456789abcdef",
    }
    return {"benchmark": name, "meta": meta, "figures": {"value": 7}}


def _body(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    lines.append(f"value {res['figures']['value']}, quick {quick}")


def test_every_section_without_results_names_its_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_format, "read_result", lambda name: None)
    text = report.build()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert len(headings) == len(report.SECTIONS)
    assert text.count("Not measured yet (`python -m bench ") == len(report.SECTIONS)
    assert "`python -m bench whole_job_service whole_job`" in text
    assert "`python -m bench multihost`, needs root)" in text
    assert "*Measured" not in text


def test_a_part_shows_its_heading_provenance_and_body(monkeypatch: pytest.MonkeyPatch) -> None:
    results = {"b_quick": _result("b_quick")}
    monkeypatch.setattr(report_format, "read_result", results.get)
    lines: list[str] = []
    section(lines, "Title", Part("a", _body, "first"), Part("b", _body, "second"))
    assert lines[0] == "## Title\n"
    assert lines[1] == "### second\n"
    assert lines[2].startswith("*Measured 2026-01-01 00:00:00 UTC on cpu (2 cores)")
    assert "`starfish bench --only b --quick`, commit 0123456789ab.*" in lines[2]
    assert lines[3:] == ["value 7, quick True"]


def test_an_unusable_result_counts_as_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_format, "read_result", {"a": _result("a")}.get)
    lines: list[str] = []
    section(lines, "Title", Part("a", _body, usable=lambda res: "cost" in res["figures"]), requirement=", slow")
    assert lines == ["## Title\n", "Not measured yet (`python -m bench a`, slow).\n"]


def test_tables_have_a_rule_under_the_header_and_single_space_empty_cells() -> None:
    lines: list[str] = []
    table(lines, ("", "x", "y"), [("a", 1, "")])
    assert lines == ["| | x | y |", "| --- | --- | --- |", "| a | 1 | |"]
    assert row(("**sum**", "", 2.5)) == "| **sum** | | 2.5 |"
