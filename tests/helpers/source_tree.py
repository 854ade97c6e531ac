"""The project's own Python modules and what each imports, read with `ast` (nothing is run)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "proto",
    "mpc",
    "unlearning",
    "server",
    "party0",
    "party1",
    "client_sdk",
    "starfish_flower",
    "evaluation",
    "starfish_cli",
    "harness",
    "bench",
    "privacy",
)


@dataclass(frozen=True)
class Import:
    """`module` imports `target` (a dotted name) at `line`; `top_level` is False inside a function."""

    module: str
    target: str
    line: int
    top_level: bool


def source_files() -> Iterator[tuple[str, Path]]:
    """(dotted module name, path) of every hand-written module of the packages (generated code excluded)."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def imports(module: str, tree: ast.AST) -> Iterator[Import]:
    """Every import of `module`, except those only type checkers see (`if TYPE_CHECKING:`)."""

    def visit(node: ast.AST, in_function: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if _type_checking_block(child):
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(module, alias.name, child.lineno, not in_function)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                for alias in child.names:
                    yield Import(module, f"{child.module}.{alias.name}", child.lineno, not in_function)
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from visit(child, nested)

    yield from visit(tree, False)


def all_imports() -> list[Import]:
    out: list[Import] = []
    for module, path in source_files():
        out.extend(imports(module, ast.parse(path.read_text(encoding="utf-8"), str(path))))
    return out


def functions() -> Iterator[tuple[str, int, str, int]]:
    """(path, line, name, number of source lines) of every function and method."""
    for _, path in source_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1 if node.end_lineno else 1
                yield str(path.relative_to(ROOT)), node.lineno, node.name, lines
