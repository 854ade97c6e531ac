"""`python -m bench`: the explicit table of benchmarks, its listing, and unknown names refused."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from bench.table import TABLE, UnknownBenchmark, select

ROOT = Path(__file__).resolve().parents[2]


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def _runs_with_quick(path: Path) -> bool:
    """The module defines `run` at top level with a `quick` parameter (read, not imported)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        isinstance(node, ast.FunctionDef) and node.name == "run" and "quick" in [a.arg for a in node.args.args]
        for node in tree.body
    )


def test_the_table_is_every_module_that_runs_as_a_benchmark() -> None:
    names = [b.name for b in TABLE]
    assert len(names) == len(set(names))
    runnable = {p.stem for p in (ROOT / "bench").glob("*.py") if _runs_with_quick(p)}
    assert set(names) == runnable


def test_help_lists_the_table() -> None:
    done = _python("-m", "bench", "--help")
    assert done.returncode == 0, done.stderr
    listing = done.stdout.split("benchmarks, cheapest first:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listing] == [b.name for b in TABLE]
    assert all(line.endswith(b.what) for line, b in zip(listing, TABLE, strict=True))


def test_an_unknown_name_exits_2_before_anything_runs() -> None:
    done = _python("-m", "bench", "stage1", "no_such_bench")
    assert done.returncode == 2
    assert "unknown benchmark(s): no_such_bench" in done.stderr
    assert "known: mpc_primitives" in done.stderr
    assert "== bench" not in done.stdout


def test_the_cli_delegates_to_the_same_table() -> None:
    done = _python("-m", "starfish_cli", "bench", "--only", "no_such_bench")
    assert done.returncode == 2
    assert "starfish bench: unknown benchmark(s): no_such_bench" in done.stderr


def test_select_keeps_the_order_given_and_defaults_to_all() -> None:
    assert [b.name for b in select(["report", "stage1"])] == ["report", "stage1"]
    assert select([]) == list(TABLE)
    with pytest.raises(UnknownBenchmark, match=r"unknown benchmark\(s\): x;"):
        select(["stage1", "x"])
