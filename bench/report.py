"""docs/RESULTS.md and docs/figures/*.png from the JSON under bench/results/.

Every table puts the paper's figure beside ours and their ratio; every figure carries a
footer with the machine, the measurement date, the command and the parameters. A
benchmark that has not been run is listed as missing. The full results are used when
present, otherwise those of `--quick` (marked as such).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report_format import fmt as _fmt
from bench.report_format import load
from bench.report_format import meta_line as _meta_line
from bench.report_format import save_figure as _save

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "RESULTS.md"
GB = 1e9


def _ratio(ours: float, paper: float) -> str:
    if not paper:
        return "—"
    r = ours / paper
    return f"{r:.3g}×" if r >= 0.01 else f"1/{1 / r:,.0f}"


def _verdict(fraction_of_target: float) -> str:
    return "yes" if fraction_of_target <= 1.0 else f"no, {fraction_of_target:.2f}× the target"


# ------------------------------------------------------------------------------------ sections
def section_primitives(lines: list[str]) -> None:
    """Per-protocol time, bytes and rounds from bench/results/mpc_primitives.json (party 0's view)."""
    res, quick = load("mpc_primitives")
    lines.append("## 2PC protocols (primitives)\n")
    if res is None:
        lines.append("Not measured yet (`python -m bench mpc_primitives`).\n")
        return
    lines.append(_meta_line(res, quick) + "\n")
    lines.append(
        "One call per row; online = party 0 ↔ party 1 (party 0's sent + received bytes), offline = dealer → party 0.\n"
    )
    lines.append("| protocol | size | wall s | online MB | online rounds | offline MB | offline s |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for row in res["figures"]["rows"]:
        lines.append(
            f"| {row['op']} | {row['size']} | {_fmt(row['seconds'])} | {_fmt(row['online_bytes'] / 1e6, 1)} | "
            f"{row['online_rounds']} | {_fmt(row['offline_bytes'] / 1e6, 1)} | {_fmt(row['offline_seconds'])} |"
        )
    lines.append("")
    for name, target in res["figures"]["targets"].items():
        paper = f"; paper (ABY) {_fmt(target['paper_aby_s'], 0)} s" if target.get("paper_aby_s") else ""
        lines.append(
            f"Target: {name} ≤ {_fmt(target['target_s'], 0)} s — measured {_fmt(target['measured_s'])} s: "
            f"{'yes' if target['met'] else 'no'}{paper}.\n"
        )


def section_plane(lines: list[str]) -> None:
    """The per-step benchmark on the three transports, from bench/results/mpc_plane.json."""
    res, quick = load("mpc_plane")
    lines.append("## What the encrypted MPC plane costs\n")
    if res is None:
        lines.append("Not measured yet (`python -m bench mpc_plane`).\n")
        return
    lines.append(_meta_line(res, quick) + "\n")
    totals = res["figures"]["totals"]
    lines.append(
        "The same protocols on three transports (docs/DEPLOY.md §5): `gloo` = CrypTen's torch.distributed "
        "communicator (the plaintext plane used before), `tcp` = the MPC plane without TLS, `tls` = the deployed "
        f"plane. Median of {res['meta']['params']['repeats']} runs per transport; CPU = party 0 + party 1 + dealer, "
        "user + sys. Bytes and rounds are identical on the three.\n"
    )
    lines.append("| protocol | size | rounds | gloo s | tcp s | tls s | tls ÷ gloo | CPU s gloo / tcp / tls |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in res["figures"]["rows"]:
        t = row["transports"]
        cpu = " / ".join(_fmt(sum(t[k]["median_cpu_seconds_party0_party1_dealer"])) for k in ("gloo", "tcp", "tls"))
        lines.append(
            f"| {row['op']} | {row['size']} | {t['tls']['online_rounds']} | {_fmt(t['gloo']['median_seconds'], 3)} | "
            f"{_fmt(t['tcp']['median_seconds'], 3)} | {_fmt(t['tls']['median_seconds'], 3)} | "
            f"{_ratio(t['tls']['median_seconds'], t['gloo']['median_seconds'])} | {cpu} |"
        )
    wall, cpu = totals["sum_median_seconds"], totals["sum_median_cpu_seconds"]
    probes = totals["probes"]
    lines.append(
        f"| **sum** | | | {_fmt(wall['gloo'])} | {_fmt(wall['tcp'])} | {_fmt(wall['tls'])} | "
        f"{_ratio(wall['tls'], wall['gloo'])} | {_fmt(cpu['gloo'])} / {_fmt(cpu['tcp'])} / {_fmt(cpu['tls'])} |\n"
    )
    lines.append(
        "Transport probes (party 0): round trip "
        + ", ".join(f"{k} {probes[k]['round_trip_s'] * 1e6:,.0f} µs" for k in ("gloo", "tcp", "tls"))
        + "; all-reduce throughput each way "
        + ", ".join(f"{k} {probes[k]['bytes_per_s_each_way'] / 1e6:,.0f} MB/s" for k in ("gloo", "tcp", "tls"))
        + ".\n"
    )
    lines.append(
        f"Goal: Σ wall(tls) ≤ {totals['goal_ratio']} × Σ wall(gloo) — measured {totals['ratio_tls_over_gloo']:.2f}×: "
        f"{'yes' if totals['goal_met'] else 'no'}.\n"
    )


STEP_ORDER = ["TD", "RS1", "RS2", "UE", "TC", "TC-sample"]


def section_steps(lines: list[str]) -> None:
    res, quick = load("unlearning_cost")
    lines.append("## Per-step 2PC cost of one unlearning round (Tables I and VII)\n")
    if res is None:
        lines.append("Not measured yet (`python -m bench unlearning_cost`).\n")
        return
    lines.append(_meta_line(res, quick) + "\n")
    lines.append(
        "20 clients (19 remaining), T = 40 stored rounds, σ 0.6, B 2; a dealer and two party processes on "
        "loopback; synthetic Gaussian uploads of the model's size (the cost does not depend on the values). "
        "Offline = time and bytes of fetching correlated randomness from the dealer (dealer → party 0; party 1 "
        "expands a seed); online = the rest (party 0 ↔ party 1). TC is Algorithm 3 on all 19 × m coordinates; "
        "TC-sample checks 4,096 public random coordinates per client first (same flags, one extra revealed bit "
        "per client). Paper: ABY, LAN.\n"
    )
    lines.append(
        "| dataset (m) | step | ours offline s | ours online s | ours offline GB | ours online GB | paper offline s | "
        "paper online s | paper offline GB | paper online GB | total time ratio | total bytes ratio |"
    )
    lines.append("|" + " --- |" * 12)
    import matplotlib.pyplot as plt

    datasets = list(res["figures"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    width = 0.8 / (2 * len(datasets))
    for d_idx, ds in enumerate(datasets):
        r = res["figures"][ds]
        lines.extend(_step_rows(ds, r))
        off = (2 * d_idx) * width - 0.4
        _step_bars(axes[0], "time", r, off, width, ds)
        _step_bars(axes[1], "bytes", r, off, width, ds)
    target = _tc_target_line(res["figures"].get("mnist"))
    if target:
        lines.append(target)
    axes[0].legend(fontsize=6, ncol=2)
    fig.suptitle("One unlearning round, per step: ours (CrypTen, 2 cores) vs paper (ABY, LAN)")
    path = _save(fig, "unlearning_cost", res, quick)
    lines.append(f"\n![per-step cost]({path})\n")


def _paper_step(r: dict[str, Any], step: str) -> dict[str, float] | None:
    """The paper's figure for a step (the sample-first pass is compared with the paper's full TC)."""
    return r["paper"].get(step) or (r["paper"]["TC"] if step == "TC-sample" else None)


def _step_rows(ds: str, r: dict[str, Any]) -> list[str]:
    rows = []
    for step in STEP_ORDER:
        c = r["steps"].get(step)
        if c is None:
            continue
        p = _paper_step(r, step)
        ours_t, ours_b = c["wall_s"], c["offline_bytes"] + c["online_bytes"]
        row = [
            f"{ds} ({r['m']:,})",
            step,
            _fmt(c["offline_s"]),
            _fmt(c["online_s"]),
            _fmt(c["offline_bytes"] / GB, 3),
            _fmt(c["online_bytes"] / GB, 3),
        ]
        if p is not None:
            row += [
                _fmt(p["offline_s"]),
                _fmt(p["online_s"]),
                _fmt(p["offline_gb"]),
                _fmt(p["online_gb"]),
                _ratio(ours_t, p["offline_s"] + p["online_s"]),
                _ratio(ours_b, (p["offline_gb"] + p["online_gb"]) * GB),
            ]
        else:
            row += ["—"] * 6
        rows.append("| " + " | ".join(row) + " |")
    return rows


def _step_bars(ax: Any, key: str, r: dict[str, Any], off: float, width: float, ds: str) -> None:
    """Ours beside the paper per step, time or bytes (offline + online), on a log scale."""

    def ours_value(step: str) -> float:
        c = r["steps"].get(step)
        if c is None:
            return 0
        return c["wall_s"] if key == "time" else (c["offline_bytes"] + c["online_bytes"]) / GB

    def paper_value(step: str) -> float:
        p = _paper_step(r, step)
        if p is None:
            return 0
        return p["offline_s"] + p["online_s"] if key == "time" else p["offline_gb"] + p["online_gb"]

    xs = range(len(STEP_ORDER))
    ax.bar([x + off for x in xs], [ours_value(s) for s in STEP_ORDER], width, label=f"ours {ds}")
    ax.bar([x + off + width for x in xs], [paper_value(s) for s in STEP_ORDER], width, label=f"paper {ds}", alpha=0.5)
    ax.set_xticks(list(xs), STEP_ORDER)
    ax.set_yscale("log")
    ax.set_ylabel("seconds (offline + online)" if key == "time" else "GB (offline + online)")


def _tc_target_line(mnist: dict[str, Any] | None) -> str:
    if mnist is None or "TC" not in mnist["steps"]:
        return ""
    tc = mnist["steps"]["TC"]["wall_s"]
    sample = mnist["steps"].get("TC-sample")
    extra = f" (sample-first pass: {sample['wall_s']:.1f} s)" if sample is not None else ""
    verdict = _verdict(tc / 60.0)
    return f"\nTarget: SecTC on 19 × {mnist['m']:,} coordinates ≤ 60 s — measured {tc:.1f} s: {verdict}{extra}.\n"


def section_whole_job(lines: list[str]) -> None:
    """Table II analogue: through the real service (preferred) and on the two-party cluster."""
    lines.append("## A whole unlearning job at the paper's MNIST setting (Table II)\n")
    found = False
    for name, title in (
        ("whole_job_service", "Through the real service"),
        ("whole_job", "On the two-party runner (mpc.cluster)"),
    ):
        res, quick = load(name)
        if res is None:
            continue
        found = True
        lines.append(f"### {title}\n")
        _whole_job(lines, res, quick, name)
    if not found:
        lines.append("Not measured yet (`python -m bench whole_job_service whole_job`).\n")


def _whole_job(lines: list[str], res: dict[str, Any], quick: bool, name: str) -> None:
    f = res["figures"]
    _whole_job_setting(lines, res, quick, name)
    _whole_job_costs(lines, f)
    _whole_job_targets(lines, f)
    _whole_job_fidelity(lines, f)
    _whole_job_steps(lines, f["secure"])
    lines.append(f"\n![whole job]({_whole_job_figure(f, res, quick, name)})\n")


def _whole_job_setting(lines: list[str], res: dict[str, Any], quick: bool, name: str) -> None:
    f = res["figures"]
    lines.append(_meta_line(res, quick) + "\n")
    if "load_during_job" in f:
        lines.append(
            f"Load average when the job was filed: {f['load_during_job']['before']}; when it ended: "
            f"{f['load_during_job']['after']}.\n"
        )
    lines.append(
        f"History: {f['clients']} clients (one backdoored target), T = {f['stored_rounds']} rounds, model of "
        f"{f['m']:,} parameters; unlearned with σ 0.6, α 0.4, β 0.1, B 2 and the SecTC sample-first pass. "
        f"Path: {res['meta']['params'].get('path')}.\n"
    )
    before = f.get("before") or {}
    if "ter" in before:
        lines.append(
            f"Before unlearning (M_T): test error {100 * before['ter']:.1f} %, backdoor success "
            f"{100 * before.get('ba_asr', float('nan')):.1f} %.\n"
        )
    if name == "whole_job_service":
        lines.append(
            f"Stage I through the service took {f['stage1_seconds']:.0f} s ({f['stage1_client_bytes'] / GB:.2f} GB of "
            f"client shares, {f['stage1_peer_bytes'] / 1e6:.1f} MB party↔party). The job's wall time is the admin's "
            "view from filing to success: session start, 2PC, the remaining clients' warm-up and correction "
            "tasks (SDK threads on the same 2 cores), install of M̂ and erasure.\n"
        )
    else:
        lines.append(
            "Client work (the remaining clients' exact gradients for warm-up and corrections, computed by "
            "party 0 on one core) is listed apart. Party 0 ran under cProfile.\n"
        )


def _whole_job_costs(lines: list[str], f: dict[str, Any]) -> None:
    """Ours (2PC and plaintext) beside the paper's Table II, and the ratio."""
    s, p, paper = f["secure"], f["plain"], f["paper"]
    total_b = s["offline_bytes"] + s["online_bytes"]
    paper_s, paper_gb = paper["offline_s"] + paper["online_s"], paper["offline_gb"] + paper["online_gb"]
    wall_detail = f" (2PC {_fmt(s['mpc_s'])} + clients {_fmt(s['client_s'])})" if "mpc_s" in s else ""
    lines.append("| | offline s | online s | total wall s | offline GB | online GB | total GB |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    lines.append(
        f"| ours, 2PC | {_fmt(s['offline_s'])} | {_fmt(s['online_s'])} | {_fmt(s['wall_s'])}{wall_detail} | "
        f"{_fmt(s['offline_bytes'] / GB, 3)} | {_fmt(s['online_bytes'] / GB, 3)} | {_fmt(total_b / GB, 3)} |"
    )
    lines.append(
        f"| ours, plaintext (same job) | — | — | {_fmt(p['wall_s'])} (algorithm {_fmt(p['algorithm_s'])} + clients "
        f"{_fmt(p['client_s'])}) | — | — | — |"
    )
    lines.append(
        f"| paper, ABY LAN | {_fmt(paper['offline_s'])} | {_fmt(paper['online_s'])} | {_fmt(paper_s)} | "
        f"{_fmt(paper['offline_gb'])} | {_fmt(paper['online_gb'])} | {_fmt(paper_gb)} |"
    )
    lines.append(
        f"| ours / paper | {_ratio(s['offline_s'], paper['offline_s'])} | {_ratio(s['online_s'], paper['online_s'])} | "
        f"{_ratio(s['wall_s'], paper_s)} | {_ratio(s['offline_bytes'], paper['offline_gb'] * GB)} | "
        f"{_ratio(s['online_bytes'], paper['online_gb'] * GB)} | {_ratio(total_b, paper_gb * GB)} |\n"
    )


def _whole_job_targets(lines: list[str], f: dict[str, Any]) -> None:
    s, tg, ratio = f["secure"], f["targets"], f["ratio"]["wall"]
    total_gb = (s["offline_bytes"] + s["online_bytes"]) / GB
    lines.append("Targets (2 cores, no GPU):\n")
    lines.append("| target | measured | met? |")
    lines.append("| --- | --- | --- |")
    wall_verdict = _verdict(s["wall_s"] / tg["wall_s_max"])
    lines.append(f"| whole job ≤ {tg['wall_s_max']:g} s wall | {s['wall_s']:.1f} s | {wall_verdict} |")
    traffic_verdict = _verdict(total_gb / tg["traffic_gb_max"])
    lines.append(f"| traffic ≤ {tg['traffic_gb_max']:g} GB | {total_gb:.2f} GB | {traffic_verdict} |")
    extra = f" (without client work {f['ratio']['without_clients']:.2f}×)" if "without_clients" in f["ratio"] else ""
    ratio_verdict = _verdict(ratio / tg["ratio_max"])
    lines.append(f"| 2PC ≤ {tg['ratio_max']:g}× plaintext | {ratio:.2f}×{extra} | {ratio_verdict} |")
    peaks = f.get("peak_rss_bytes") or {}
    if peaks and "peak_rss_gb_max" in tg:
        top = max(peaks.values()) / GB
        each = ", ".join(f"{name} {b / GB:.2f}" for name, b in sorted(peaks.items()))
        verdict = _verdict(top / tg["peak_rss_gb_max"])
        lines.append(f"| process memory ≤ {tg['peak_rss_gb_max']:g} GB peak | {each} GB | {verdict} |")
    lines.append("")


def _whole_job_fidelity(lines: list[str], f: dict[str, Any]) -> None:
    """What dominates the ledger, and how close the 2PC run is to the plaintext one."""
    s, p = f["secure"], f["plain"]
    total_s = sum(c["seconds"] for c in s["steps"].values()) or 1.0
    share = sorted(((c["seconds"] / total_s, step) for step, c in s["steps"].items()), reverse=True)[:3]
    total_traffic = sum(c["offline_bytes"] + c["online_bytes"] for c in s["steps"].values()) or 1.0
    share_b = sorted(
        (((c["offline_bytes"] + c["online_bytes"]) / total_traffic, step) for step, c in s["steps"].items()),
        reverse=True,
    )[:2]
    lines.append(
        "What dominates: "
        + ", ".join(f"{step} {100 * x:.0f} %" for x, step in share)
        + " of the ledger's time; "
        + ", ".join(f"{step} {100 * x:.0f} %" for x, step in share_b)
        + " of the traffic.\n"
    )
    a = f["agreement"]
    flags = f"; same correction flags: {a['same_flags']}" if "same_flags" in a else ""
    history = (
        f" (the two histories themselves differ by {a['history_gap']['relative']:.1e})" if "history_gap" in a else ""
    )
    lines.append(
        f"Fidelity: same selected rounds as plaintext: {a['same_selection']}{flags}; "
        f"‖M̂_2PC − M̂_plain‖/‖M̂_plain‖ = {a['model_gap']['relative']:.2e}{history}"
        f". TER {100 * s['metrics']['ter']:.1f} % (plaintext {100 * p['metrics']['ter']:.1f} %, before "
        f"{100 * f['before']['ter']:.1f} %), BA-ASR {100 * s['metrics']['ba_asr']:.1f} % (plaintext "
        f"{100 * p['metrics']['ba_asr']:.1f} %, before {100 * f['before']['ba_asr']:.1f} %), "
        f"ARP {s['arp_percent']:.1f} %.\n"
    )


def _whole_job_steps(lines: list[str], s: dict[str, Any]) -> None:
    lines.append("Where the 2PC time goes (party 0's ledger):\n")
    lines.append("| step | calls | wall s | offline s | offline GB | online GB | rounds |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for step, c in sorted(s["steps"].items(), key=lambda kv: -kv[1]["seconds"]):
        lines.append(
            f"| {step} | {c['calls']} | {_fmt(c['seconds'])} | {_fmt(c['offline_seconds'])} | "
            f"{_fmt(c['offline_bytes'] / GB, 3)} | {_fmt(c['online_bytes'] / GB, 3)} | {c['online_rounds']} |"
        )
    prof = s.get("profile_party0") or []
    if prof:
        lines.append("\nParty 0's profile (cProfile, top functions by own time):\n")
        lines.append("| function | own s | cumulative s | calls |")
        lines.append("| --- | --- | --- | --- |")
        for row in prof[:12]:
            lines.append(
                f"| `{row['function']}` | {_fmt(row['own_s'])} | {_fmt(row['cumulative_s'])} | {row['calls']} |"
            )


def _whole_job_figure(f: dict[str, Any], res: dict[str, Any], quick: bool, name: str) -> str:
    import matplotlib.pyplot as plt

    s, p, paper, tg = f["secure"], f["plain"], f["paper"], f["targets"]
    total_b = s["offline_bytes"] + s["online_bytes"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    axes[0].bar(
        ["ours 2PC", "ours plaintext", "paper (ABY)"],
        [s["wall_s"], p["wall_s"], paper["offline_s"] + paper["online_s"]],
        color=["C0", "C2", "C1"],
    )
    axes[0].set_yscale("log")
    axes[0].set_ylabel("seconds")
    axes[0].axhline(tg["wall_s_max"], color="k", ls="--", lw=0.8)
    axes[1].bar(
        ["ours 2PC", "paper (ABY)"], [total_b / GB, paper["offline_gb"] + paper["online_gb"]], color=["C0", "C1"]
    )
    axes[1].set_yscale("log")
    axes[1].set_ylabel("GB")
    axes[1].axhline(tg["traffic_gb_max"], color="k", ls="--", lw=0.8)
    fig.suptitle("Whole Starfish unlearning job, paper MNIST setting (dashed: targets)")
    return _save(fig, name, res, quick)


def section_switching(lines: list[str]) -> None:
    res, quick = load("switching")
    lines.append("## Switching threshold T_δ of round selection\n")
    if res is None:
        lines.append("Not measured yet (`python -m bench switching`).\n")
        return
    f = res["figures"]
    lines.append(_meta_line(res, quick) + "\n")
    lines.append("Per-operation cost, fitted as latency + n × per element (wall seconds):\n")
    lines.append("| op | latency s | per element µs | rounds | bytes per element |")
    lines.append("| --- | --- | --- | --- | --- |")
    for op, fit in f["fits"].items():
        lines.append(
            f"| {op} | {fit['seconds']['latency']:.3f} | {1e6 * fit['seconds']['per_element']:.2f} | "
            f"{fit['rounds']['latency']:.0f} | {fit['bytes']['per_element']:.0f} |"
        )
    lines.append("\nRound selection (SecRS) measured with both methods:\n")
    lines.append("| T | comparators | Method 1 s | Method 2 s | Method 1 MB | Method 2 MB | model M1 s | model M2 s |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in f["selection"]:
        lines.append(
            f"| {r['T']} | {r['comparators']} | {r['method1']['seconds']:.2f} | {r['method2']['seconds']:.2f} | "
            f"{r['method1']['bytes'] / 1e6:.2f} | {r['method2']['bytes'] / 1e6:.2f} | "
            f"{r['model_seconds']['method1']:.2f} | {r['model_seconds']['method2']:.2f} |"
        )
    th = f["threshold"]
    from unlearning.starfish.params import DEFAULT_SWITCH_THRESHOLD

    def first(value: Any) -> str:
        return "never in the measured range" if value is None else f"T = {value}"

    lines.append(
        f"\nThresholds: the paper's rule (Method 1 iff T·C_SecDiv ≥ 2·n_comp(T)·C_SecMul) with our per-element "
        f"costs gives T_δ = {th['paper_rule_time']} by time and {th['paper_rule_bytes']} by bytes; the batched "
        f"latency model gives Method 2 faster from {first(th['batched_model_time_first_T_method2_faster'])}; "
        f"measured: Method 2 first faster at {first(th['measured_time_first_T_method2_faster'])}, first smaller "
        f"at {first(th['measured_bytes_first_T_method2_smaller'])}. The default "
        f"`StarfishParams.switch_threshold` is {DEFAULT_SWITCH_THRESHOLD}.\n"
    )
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    Ts = [r["T"] for r in f["selection"]]
    for method, color in (("method1", "C0"), ("method2", "C1")):
        ax.plot(Ts, [r[method]["seconds"] for r in f["selection"]], "o-", color=color, label=f"{method} measured")
        ax.plot(
            Ts, [r["model_seconds"][method] for r in f["selection"]], "--", color=color, label=f"{method} batched model"
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("stored rounds T")
    ax.set_ylabel("SecRS seconds")
    ax.legend(fontsize=7)
    fig.suptitle("Round selection: Method 1 (SecGE2) vs Method 2 (SecDiv + SecGE)")
    lines.append(f"![switching]({_save(fig, 'switching', res, quick)})\n")


def section_precision(lines: list[str]) -> None:
    res, quick = load("precision")
    lines.append("## Precision study: fractional bits f\n")
    if res is None:
        lines.append("Not measured yet (`python -m bench precision`).\n")
        return
    f = res["figures"]
    lines.append(_meta_line(res, quick) + "\n")
    mags = res["meta"]["params"]["magnitudes"]
    lines.append(
        "Whole Starfish jobs under 2PC against the plaintext run on the same history (8×8 digits, 20 clients), "
        "and SecMul fault counts for operands |x|, |y| ≤ 2^k:\n"
    )
    lines.extend(_precision_rows(f, mags))
    lines.append(
        "\nFaults: outputs off by more than 2^(62−2f) (a truncation fault adds ±2^(64−2f)); † the "
        "untruncated product can leave the ring (2k + 2f ≥ 63), so such outputs are wrong without any fault. "
        "‖g‖² is computed for 582,026 coordinates of size ≈ 10⁻³ either as one dot product truncated once "
        "(what `unlearning.lbfgs.squared_norms` does) or coordinate by coordinate (each square truncated).\n"
    )
    lines.append(f"\n![precision]({_precision_figure(f, mags, res, quick)})\n")


def _precision_rows(f: dict[str, Any], mags: list[int]) -> list[str]:
    rows = [
        "| f | job | rel. model gap | same selection | flag agreement | ‖g‖² rel. error (dot) | "
        "‖g‖² rel. error (per coordinate) | " + " | ".join(f"faults k={k}" for k in mags) + " |",
        "|" + " --- |" * (7 + len(mags)),
    ]
    for b in sorted(f["bits"], key=int):
        row = f["bits"][b]
        job = row["job"]
        faults = row["faults"]["products"]
        n = faults[str(mags[0])]["n"]
        counts = [f"{faults[str(k)]['faults']}/{n:,}{'†' if faults[str(k)].get('overflow') else ''}" for k in mags]
        rows.append(
            f"| {b} | {job['outcome']} | {_fmt(job.get('model_gap', {}).get('relative'))} | "
            f"{job.get('same_selection', '—')} | {_fmt(job.get('flag_agreement'))} | "
            f"{_fmt(row['faults']['norm2']['dot_rel_error'])} | "
            f"{_fmt(row['faults']['norm2']['per_coordinate_rel_error'])} | " + " | ".join(counts) + " |"
        )
    return rows


def _precision_figure(f: dict[str, Any], mags: list[int], res: dict[str, Any], quick: bool) -> str:
    import matplotlib.pyplot as plt

    bits = sorted(f["bits"], key=int)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    gaps = [f["bits"][b]["job"].get("model_gap", {}).get("relative") for b in bits]
    axes[0].semilogy([int(b) for b, g in zip(bits, gaps, strict=True) if g], [g for g in gaps if g], "o-")
    axes[0].set_xlabel("fractional bits f")
    axes[0].set_ylabel("‖M̂_2PC − M̂_plain‖ / ‖M̂_plain‖")
    for k in mags:
        products = [(int(b), f["bits"][b]["faults"]["products"][str(k)]) for b in bits]
        pts = [(b, max(p["faults"], 0.5) / p["n"]) for b, p in products if not p.get("overflow")]
        axes[1].semilogy([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"|x|,|y| ≤ 2^{k}")
    axes[1].set_xlabel("fractional bits f")
    axes[1].set_ylabel("SecMul fault rate (0 plotted at 0.5/n)")
    axes[1].legend(fontsize=7)
    fig.suptitle("Fixed-point precision: fidelity and truncation faults")
    return _save(fig, "precision", res, quick)


def section_sweeps(lines: list[str]) -> None:
    res, quick = load("sweeps")
    lines.append("## Parameter sweeps (Figures 4–6, 8–12)\n")
    if res is None or "cost" not in res["figures"]:
        lines.append("Not measured yet (`python -m bench sweeps`).\n")
        return
    f = res["figures"]
    lines.append(_meta_line(res, quick) + "\n")
    lines.append(
        "Quality in plaintext on one MNIST history (MLP, 20 clients, 40 rounds); 2PC cost of the same schedule at "
        f"the CNN size (m = {f['model_size']:,}) from measured per-step costs: TD + RS + (estimated rounds) × UE(B) "
        "+ checks × TC.\n"
    )
    lines.append(
        "| parameter | value | TER % | BA-ASR % | ARP % | est./check/warm-up rounds | 2PC s (TC full) | "
        "2PC GB (TC full) | 2PC s (TC sample) | 2PC GB (TC sample) |"
    )
    lines.append("|" + " --- |" * 10)
    for name, rows in f["quality"].items():
        costs = {c["value"]: c for c in f["cost"].get(name, [])}
        for r in rows:
            c = costs.get(r["value"], {})
            full, samp = c.get("tc_full", {}), c.get("tc_sample", {})
            rr = r["rounds"]
            lines.append(
                f"| {name} | {r['value']} | {r['ter']:.1f} | {r['ba_asr']:.1f} | {r['arp']:.1f} | "
                f"{rr['estimate']}/{rr['check']}/{rr['warmup']} | {_fmt(full.get('wall_s'), 1)} | "
                f"{_fmt((full.get('offline_bytes', 0) + full.get('online_bytes', 0)) / GB)} | "
                f"{_fmt(samp.get('wall_s'), 1)} | "
                f"{_fmt((samp.get('offline_bytes', 0) + samp.get('online_bytes', 0)) / GB)} |"
            )
    import matplotlib.pyplot as plt

    names = list(f["quality"])
    fig, axes = plt.subplots(2, len(names), figsize=(3.2 * len(names), 6))
    for k, name in enumerate(names):
        rows = f["quality"][name]
        xs = [r["value"] for r in rows]
        axes[0][k].plot(xs, [r["ter"] for r in rows], "o-", label="TER %")
        axes[0][k].plot(xs, [r["ba_asr"] for r in rows], "s-", label="BA-ASR %")
        axes[0][k].set_title(name)
        cost = f["cost"].get(name, [])
        axes[1][k].plot([c["value"] for c in cost], [c["tc_full"]["wall_s"] for c in cost], "o-", label="TC full")
        axes[1][k].plot(
            [c["value"] for c in cost], [c["tc_sample"]["wall_s"] for c in cost], "s-", label="TC sample-first"
        )
        axes[1][k].set_xlabel(name)
    axes[0][0].legend(fontsize=7)
    axes[1][0].legend(fontsize=7)
    if f.get("failures"):
        lines.append(f"\nMeasurements that failed: {f['failures']}.\n")
    axes[1][0].set_ylabel("2PC job seconds (model)")
    fig.suptitle("Starfish parameter sweeps: quality (plaintext, MNIST MLP) and 2PC cost (CNN size)")
    lines.append(f"\n![sweeps]({_save(fig, 'sweeps', res, quick)})\n")


def section_quality(lines: list[str]) -> None:
    res, quick = load("quality_compare")
    lines.append("## Forgetting quality of every method (Figure 3)\n")
    if res is None:
        lines.append("Not measured yet (`python -m bench quality_compare`).\n")
        return
    f = res["figures"]
    lines.append(_meta_line(res, quick) + "\n")
    lines.append(
        f"Real MNIST (5k subset), 20 clients with one backdoored target, 40 rounds, MLP; seeds {f['seeds']}; "
        "mean ± sample standard deviation (percent; time in seconds). `before` is the model before unlearning.\n"
    )
    lines.append("| method | TER % | BA-ASR % | MIA-ASR % | ARP % | time s |")
    lines.append("| --- | --- | --- | --- | --- | --- |")
    summary = f["summary"]
    for method, vals in summary.items():
        cells = [
            f"{vals[k]['mean']:.1f} ± {vals[k]['std']:.1f}" for k in ("ter", "ba_asr", "mia_asr", "arp", "seconds")
        ]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    if f.get("diverged"):
        lines.append(f"\nFailed or diverged runs (count over seeds): {f['diverged']}.")
    import matplotlib.pyplot as plt

    methods = list(summary)
    fig, axes = plt.subplots(1, 4, figsize=(14, 5.2))
    for ax, (key, title) in zip(
        axes, (("ter", "TER %"), ("ba_asr", "BA-ASR %"), ("mia_asr", "MIA-ASR %"), ("arp", "ARP %")), strict=True
    ):
        ax.bar(
            range(len(methods)),
            [summary[m][key]["mean"] for m in methods],
            yerr=[summary[m][key]["std"] for m in methods],
            capsize=2,
            color=[f"C{i % 10}" for i in range(len(methods))],
        )
        ax.set_xticks(range(len(methods)), methods, rotation=60, ha="right", fontsize=7)
        ax.set_title(title)
    fig.subplots_adjust(wspace=0.3)
    fig.suptitle(f"Unlearning quality on MNIST, mean ± std over {len(f['seeds'])} seed(s)")
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    lines.append(f"\n![quality]({_save(fig, 'quality', res, quick, bottom=None)})\n")


HEADER = """# Results: Starfish on CrypTen against the paper

Generated by `python -m bench` (`make bench`, or `starfish bench`; `--quick` for a smaller run; the
benchmarks are the table of `bench/table.py`, `python -m bench --help` lists it) from the JSON in
`bench/results/`; this file and `docs/figures/*.png` are rewritten by `python -m bench report`
(the last benchmark of the table). Every number below was measured on the machine named
under its section; the paper's numbers are from its Tables I, II, VII and VIII (ABY, LAN).

**Trust model difference.** Our offline phase uses a *dealer*: a third process (CrypTen's TTP
provider) generates Beaver triples and comparison randomness and sends party 0 its half (party 1
expands a shared seed). The paper's ABY implementation has no third party: its offline phase
produces the same correlated randomness between the two servers with oblivious transfer (OT
extension), which costs far more computation and traffic (the paper's offline GB dominate). Our
setting therefore assumes three non-colluding operators (party 0, party 1, dealer); the paper
assumes two. Offline figures are not like for like: ours are the dealer's traffic and the time the
parties wait for it, computed on demand during the run rather than in a separate preprocessing pass.
Other differences: 2 CPU cores on one host (loopback) against the paper's LAN machines; the
ring Z_2^64 with f fractional bits; comparisons by CrypTen's arithmetic-to-binary conversion.

**Believable figures.** A benchmark refuses to start when the one-minute load average exceeds
one per core or another benchmark or test run is alive (`bench/env.py`, `stamp`); with
`STARFISH_BENCH_FORCE=1` it runs anyway, its JSON says `"loaded": true` with the reasons, and its
section here says so. Every result records its commit. Ratios (Starfish ÷ plain, checked ÷
unchecked) come from arms whose rounds are interleaved in the same run.
"""


def build() -> str:
    from bench.report_multihost import section_multihost
    from bench.report_stage1 import section_stage1
    from bench.report_ue import section_ue_round

    lines = [HEADER]
    for section in (
        section_primitives,
        section_plane,
        section_steps,
        section_ue_round,
        section_whole_job,
        section_multihost,
        section_switching,
        section_precision,
        section_sweeps,
        section_quality,
        section_stage1,
    ):
        section(lines)
    return "\n".join(lines) + "\n"


def run(quick: bool = False) -> dict[str, Any]:
    """Rewrite docs/RESULTS.md and the figures from whatever results exist."""
    text = build()
    DOC.parent.mkdir(parents=True, exist_ok=True)
    notes = DOC.parent / "RESULTS-notes.md"
    if notes.exists():
        text += "\n" + notes.read_text()
    DOC.write_text(text)
    return {"document": str(DOC.relative_to(ROOT)), "bytes": len(text)}


if __name__ == "__main__":
    run()
