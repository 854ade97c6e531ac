"""The package layering of docs/ARCHITECTURE.md, checked on every import of the source tree.

An import that runs against the arrows fails here with the file and line; imports seen
only by type checkers (`if TYPE_CHECKING:`) are not counted.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.source_tree import PACKAGES, ROOT, Import, all_imports, source_files

IMPORTS = all_imports()
MODULES = {module for module, _ in source_files()}
APPLICATIONS = ("evaluation", "harness", "starfish_cli", "bench")

#: package -> packages (ours or third-party) it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "proto": (
        "mpc",
        "privacy",
        "unlearning",
        "server",
        "party0",
        "party1",
        "client_sdk",
        "torch",
        "crypten",
        *APPLICATIONS,
    ),
    "mpc": ("proto", "privacy", "unlearning", "server", "party0", "party1", "client_sdk", *APPLICATIONS),
    "privacy": ("proto", "mpc", "unlearning", "server", "party0", "party1", "client_sdk", "crypten", *APPLICATIONS),
    "unlearning": ("crypten", "proto", "server", "party0", "party1", "client_sdk", *APPLICATIONS),
    "server": ("client_sdk", "party0", "party1", *APPLICATIONS),
    "client_sdk": ("server", "privacy", "unlearning", "party0", "party1", "crypten", *APPLICATIONS),
    "party0": ("party1", "unlearning", "client_sdk", *APPLICATIONS),
    "party1": ("party0", "unlearning", "client_sdk", *APPLICATIONS),
    "starfish_flower": ("mpc", "privacy", "unlearning", "server", "party0", "party1", "crypten", *APPLICATIONS),
    "evaluation": ("server", "party0", "party1", *APPLICATIONS[1:]),
    "harness": ("starfish_cli", "bench"),
    "bench": ("starfish_cli",),
}

#: the emulated hosts of the tests and benchmarks: standard library only, nothing else of ours
NETLAB = "harness.netlab"

#: the optional torch adapter of the SDK: the package never imports it, a client that has torch does
SDK_TORCH_ADAPTER = "client_sdk.torch_helper"


def _top(name: str) -> str:
    return name.split(".")[0]


def _show(found: list[Import]) -> str:
    return "\n".join(f"{i.module} (line {i.line}) imports {i.target}" for i in found)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_against_the_layering(package: str) -> None:
    found = [i for i in IMPORTS if _top(i.module) == package and _top(i.target) in FORBIDDEN[package]]
    assert not found, _show(found)


def test_the_emulated_hosts_import_only_themselves() -> None:
    found = [
        i
        for i in IMPORTS
        if i.module.startswith(NETLAB)
        and _top(i.target) in PACKAGES
        and not (i.target == NETLAB or i.target.startswith(NETLAB + "."))
    ]
    assert not found, _show(found)


def test_the_client_sdk_loads_without_torch_or_crypten() -> None:
    found = [
        i
        for i in IMPORTS
        if _top(i.module) == "client_sdk"
        and i.module != SDK_TORCH_ADAPTER
        and i.top_level
        and _top(i.target) in ("torch", "crypten")
    ]
    assert not found, _show(found)
    assert not [i for i in IMPORTS if i.target.startswith(SDK_TORCH_ADAPTER) and i.module.startswith("client_sdk")]


def test_the_privacy_package_loads_without_torch_or_opacus() -> None:
    """torch and Opacus only inside the functions that touch a tensor or the accountant: the
    party reads `[privacy]` without them (tests/integration/test_party_start_without_torch.py)."""
    found = [
        i for i in IMPORTS if _top(i.module) == "privacy" and i.top_level and _top(i.target) in ("torch", "opacus")
    ]
    assert not found, _show(found)


def test_the_party_configuration_sits_below_the_job_runtime() -> None:
    """`server.config` (and the `[jobs]` settings it reads, `server.job_config`) import nothing of
    `server.jobs`: the job runtime reads the configuration, never the other way round."""
    below = ("server.config", "server.job_config")
    found = [i for i in IMPORTS if i.module in below and i.target.startswith("server.jobs")]
    assert not found, _show(found)


def server_layers(doc: Path = ROOT / "docs" / "ARCHITECTURE.md") -> dict[str, int]:
    """The table "Layers inside `server/`" of docs/ARCHITECTURE.md: module prefix → layer
    (`config.py` → server.config, `workers/` → server.workers and everything under it)."""
    text = doc.read_text(encoding="utf-8")
    section = text.split("### Layers inside `server/`", 1)[1].split("\n#", 1)[0]
    layers: dict[str, int] = {}
    for row in re.finditer(r"^\| (\d+) [^|]*\| ([^|]*) \|", section, re.MULTILINE):
        for path in re.findall(r"`([^`]+)`", row.group(2)):
            name = "server." + path.removesuffix("/").removesuffix(".py").replace("/", ".")
            assert name not in layers, f"{path} stands in two layers of docs/ARCHITECTURE.md"
            layers[name] = int(row.group(1))
    return layers


SERVER_LAYERS = server_layers()


def _layer(module: str) -> int | None:
    """The layer of a server module: its longest prefix in the table (None: not placed)."""
    for prefix in sorted(SERVER_LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return SERVER_LAYERS[prefix]
    return None


def _server_module(target: str) -> str | None:
    """The server module an import names (`server.store.Store` → server.store)."""
    for name in (target, target.rpartition(".")[0]):
        if name in MODULES and _top(name) == "server":
            return name
    return None


def test_every_server_module_has_a_layer_and_every_layer_entry_exists() -> None:
    server = sorted(m for m in MODULES if _top(m) == "server" and m != "server")
    assert [m for m in server if _layer(m) is None] == [], "place these modules in docs/ARCHITECTURE.md"
    assert [p for p in SERVER_LAYERS if p not in MODULES] == [], "docs/ARCHITECTURE.md names missing modules"
    assert len(set(SERVER_LAYERS.values())) >= 7


def test_no_server_module_imports_a_higher_layer() -> None:
    """Stage I never imports the jobs, the workers neither of them, the configuration nothing above it, ..."""
    found = []
    for i in IMPORTS:
        target = _server_module(i.target)
        if _top(i.module) == "server" and target is not None and i.module != "server":
            mine, theirs = _layer(i.module), _layer(target)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(i)
    assert not found, _show(found)


def test_only_the_mpc_package_touches_crypten() -> None:
    found = [i for i in IMPORTS if _top(i.target) == "crypten" and _top(i.module) != "mpc"]
    assert not found, _show(found)


def test_the_protocols_sit_between_the_primitives_and_the_backend() -> None:
    protocols = [i for i in IMPORTS if i.module.startswith("mpc.protocols")]
    allowed = ("mpc.primitives", "mpc.protocols")
    found = [i for i in protocols if _top(i.target) == "mpc" and not i.target.startswith(allowed)]
    assert not found, _show(found)


def test_no_import_loop_between_modules() -> None:
    """Module-level and function-level imports together form no cycle."""
    modules = {i.module for i in IMPORTS}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for i in IMPORTS:
        if _top(i.target) not in PACKAGES:
            continue
        target = i.target if i.target in modules else i.target.rpartition(".")[0]
        if target in modules and target != i.module and not i.module.startswith(target + "."):
            graph[i.module].add(target)
    cycles = _cycles(graph)
    assert not cycles, "\n".join("import loop among " + ", ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules of each strongly connected component larger than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found
