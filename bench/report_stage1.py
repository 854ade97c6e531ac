"""The Stage I section of docs/RESULTS.md: one FedAvg round over secret shares against a plain one.

Reads `stage1` (the current code) and, when present, `stage1_shake_baseline` (the same
benchmark run just before, in the same session, on the code that still expanded mask seeds
with SHAKE-256), so that the effect of the mask generator and the client-path changes is
shown under the same machine load.
"""

from __future__ import annotations

from typing import Any

from bench.report_format import load
from bench.report_section import Part, row, section, table
from mpc.input_check import CheckBounds

MB = 1e6
ROWS = (
    ("wall time per round (s)", "plain_round_s", "starfish_round_s", "time_overhead"),
    ("CPU seconds per round, all processes", "plain_round_cpu_s", "starfish_round_cpu_s", "cpu_overhead"),
    ("payload bytes per round (MB)", "plain_round_bytes", "starfish_round_bytes", "bytes_overhead"),
)
CHECK_ROWS = (
    ("wall time per round (s)", "unvalidated_round_s", "validation_overhead"),
    ("CPU seconds per round, all processes", "unvalidated_round_cpu_s", "validation_cpu_overhead"),
    ("payload bytes per round (MB)", "unvalidated_round_bytes", "validation_bytes_overhead"),
)


def _median(rows: list[dict[str, Any]], key: str) -> float:
    values = sorted(r[key] for r in rows[1:])  # round 1 is a warm-up
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _cell(f: dict[str, Any], key: str) -> str:
    v = f[key]
    return f"{v / MB:.1f}" if key.endswith("bytes") else f"{v:.2f}"


def _split(f: dict[str, Any]) -> str:
    rows = f["starfish_rounds"]
    return f"clients {_median(rows, 'cpu_s_clients'):.2f}, parties {_median(rows, 'cpu_s_parties'):.2f}"


def section_stage1(lines: list[str]) -> None:
    section(lines, "Stage I: a FedAvg round over secret shares against a plain FedAvg round", Part("stage1", _stage1))


def _stage1(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    f = res["figures"]
    base, _ = load("stage1_shake_baseline")
    lines.append(
        f"20 clients (SDK threads in one process), {res['meta']['params']['params']:,} parameters (the paper's MNIST "
        "CNN), party0 and party1 as processes with TLS and durable stores, against one plain FedAvg server with the "
        "same transport and durability (`bench/stage1_plain.py`); median of rounds 2 onwards. Seed-compressed masks: "
        "one share travels as a 33-byte seed expanded with AES-256-CTR (`mpc/masks.py`).\n"
    )
    before = ("before: Starfish (SHAKE-256)", "before: ratio") if base is not None else ()
    table(lines, ("per round", "plain FedAvg", "Starfish Stage I", "ratio", *before))
    for label, plain, star, ratio in ROWS:
        then = (_cell(base["figures"], star), f"{base['figures'][ratio]:.2f}×") if base is not None else ()
        lines.append(row((label, _cell(f, plain), _cell(f, star), f"{f[ratio]:.2f}×", *then)))
    then = (_split(base["figures"]), "") if base is not None else ()
    lines.append(row(("CPU split, Starfish", "", _split(f), "", *then)))
    if base is not None:
        m = base["meta"]
        lines.append(
            f"\nThe *before* columns: the same benchmark on the SHAKE-256 code, run just before "
            f"({m['date_utc']} UTC, load average {m['load_average_start'][0]}→{m['load_average_end'][0]}).\n"
        )
    verdict = "met" if f["meets_target"] else "**not met**"
    lines.append(f"Target: Starfish round ≤ {f['target_time_overhead']:.1f}× a plain round (wall): {verdict}.\n")
    if "validation_overhead" in f:
        _check_table(lines, f, res["meta"]["params"]["params"])
    meta = res["meta"]
    busiest = max(meta["load_average_start"][0], meta["load_average_end"][0])
    if busiest > meta["machine"]["cores"]:
        lines.append(
            f"**The machine was busy** (load average up to {busiest:g} on {meta['machine']['cores']} cores): the 22 "
            "processes and threads of a round wait for a CPU, so wall times, and their ratio, mostly measure that "
            "wait; the CPU seconds are the steadier comparison. Where the time goes and the next levers: "
            'docs/SERVICE.md, "Cost".\n'
        )


def _check_table(lines: list[str], f: dict[str, Any], params: int) -> None:
    """The upload check's cost: the same deployment with `[validation] enabled = false`,
    its rounds interleaved with the validated ones in the same run."""
    lines.append(
        'The upload check (docs/PRIVACY.md, "Validated uploads"): the same deployment without it, its rounds '
        "interleaved with the checked ones in the same run.\n"
    )
    table(lines, ("per round", "Starfish, no upload check", "Starfish (checked)", "ratio"))
    for (label, plain, ratio), (_, _, star, _) in zip(CHECK_ROWS, ROWS, strict=True):
        lines.append(row((label, _cell(f, plain), _cell(f, star), f"{f[ratio]:.2f}×")))
    clients = f["starfish_rounds"][0].get("members", 20)
    dim = CheckBounds.make(params, 16, 1.0).dim  # d: the checked vector (the sketch of a large model)
    check_mb = clients * 2 * 8 * (3 * dim + 11) / MB
    lines.append(
        f"| the check's party-to-party traffic as its message sizes predict (MB; 2·8·(3d + 11) bytes per upload, "
        f"d = {dim:,}) | 0 | {check_mb:.1f} | — |"
    )
    lines.append(
        "\nThe payload rows count client uploads and downloads and the party-to-party bytes party0 meters for "
        "the round (`RoundSummary.peer_bytes`: the aggregate exchange and, when checked, the check's step "
        "vectors).\n"
    )
    verdict = "met" if f["meets_validation_target"] else "**not met**"
    lines.append(
        f"\nTarget: a checked round ≤ {f['target_validation_overhead']:.2f}× an unchecked one (wall): {verdict}.\n"
    )
