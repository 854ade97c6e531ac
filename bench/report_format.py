"""Formatting shared by the sections of docs/RESULTS.md: which result to use, numbers, the
line naming the measurement, and figures with their footer (machine, date, command,
parameters)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from bench.env import read_result

FIGURES = Path(__file__).resolve().parent.parent / "docs" / "figures"
GB = 1e9


def load(name: str) -> tuple[dict[str, Any] | None, bool]:
    """(result, is_quick): the full result if present, else the quick one."""
    full = read_result(name)
    if full is not None:
        return full, False
    return read_result(name + "_quick"), True


def fmt(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "—"
    if x != 0 and (abs(x) < 10**-digits or abs(x) >= 1e6):
        return f"{x:.2e}"
    return f"{x:,.{digits}f}"


def ratio(ours: float, paper: float) -> str:
    """ours ÷ paper as `1.23×`, or `1/n` below one hundredth; `—` without a paper figure."""
    if not paper:
        return "—"
    r = ours / paper
    return f"{r:.3g}×" if r >= 0.01 else f"1/{1 / r:,.0f}"


def verdict(fraction_of_target: float) -> str:
    """Whether a measurement met its target, given measured ÷ target."""
    return "yes" if fraction_of_target <= 1.0 else f"no, {fraction_of_target:.2f}× the target"


def footer(res: dict[str, Any], quick: bool) -> str:
    meta = res["meta"]
    mach = meta["machine"]
    params = json.dumps(meta["params"], separators=(",", ":"))
    if len(params) > 330:
        params = params[:327] + "..."
    params = "\n".join(textwrap.wrap(params, 165))
    return (
        f"{mach['cpu']}, {mach['cores']} cores, torch {mach['torch']}, crypten {mach['crypten']} | "
        f"{meta['date_utc']} UTC, load {meta['load_average_start'][0]}→{meta['load_average_end'][0]} | "
        f"starfish bench --only {res['benchmark'].removesuffix('_quick')}{' --quick' if quick else ''}\n{params}"
    )


def save_figure(fig: Any, name: str, res: dict[str, Any], quick: bool, bottom: float | None = 0.24) -> str:
    """Add the footer (machine, date, command, parameters) and write docs/figures/<name>.png."""
    fig.text(0.01, 0.005, footer(res, quick), fontsize=6, va="bottom", ha="left", family="monospace")
    if bottom is not None:
        fig.subplots_adjust(bottom=bottom)
    FIGURES.mkdir(parents=True, exist_ok=True)
    path = FIGURES / f"{name}.png"
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return f"figures/{name}.png"


LOADED_NOTE = " **Measured on a busy machine (forced): its times are not evidence.**"


def meta_line(res: dict[str, Any], quick: bool) -> str:
    meta = res["meta"]
    return (
        f"*Measured {meta['date_utc']} UTC on {meta['machine']['cpu']} ({meta['machine']['cores']} cores), "
        f"load average {meta['load_average_start']} at the start and {meta['load_average_end']} at the end"
        f"{'; quick mode (smaller sizes)' if quick else ''}. Command: `starfish bench --only "
        f"{res['benchmark'].removesuffix('_quick')}{' --quick' if quick else ''}`"
        f"{', commit ' + meta['commit'][:12] if meta.get('commit') else ''}.*"
        f"{LOADED_NOTE if meta.get('loaded', True) and 'loaded' in meta else ''}"
    )
