"""The sections of the job report page, each rendered from the job report (escaped HTML).

The report is `server.jobs.job_report.build_report`'s JSON (the strategy's report plus `job`,
`erasure` and `certificate`); every section copes with a missing part, so a report of
another strategy or an older job still renders.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from starfish.report_page import charts

#: protocol steps in the order a Starfish job runs them, with the paper's protocol names
STEPS = {
    "TD": "threshold determination (SecMax)",
    "RS": "round selection (SecRS)",
    "warmup": "warm-up (exact gradients)",
    "UE": "update estimation (SecUE)",
    "TC": "threshold checking (SecTC)",
    "correction": "correction (exact gradients)",
    "recovery": "recovery rounds (exact gradients)",
}
QUALITY = (("ter", "test error rate (TER)"), ("ba_asr", "backdoor attack success (BA-ASR)"), ("mia_asr", "MIA-ASR"))
MODELS = (("before", "before unlearning"), ("starfish", "after unlearning"), ("retrain", "retrained without target"))


def mb(n: float) -> str:
    """A byte count in the unit that suits it (B, kB, MB, GB; decimal)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n)} B"


def when(ts: float | None) -> str:
    if not ts:
        return "—"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def table(head: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    th = "".join(f"<th>{escape(str(h))}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def section(ident: str, title: str, *parts: str) -> str:
    return f'<section id="{ident}"><h2>{escape(title)}</h2>{"".join(parts)}</section>'


def note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


def figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>"


def _dealer(dealer: Mapping[str, Any]) -> str:
    """The dealer's label and, per session attempt, the identity and certificate fingerprint that served it."""
    served = ", ".join(
        f"{s.get('dealer_identity', '?')} ({str(s.get('dealer_certificate_sha256', '?'))[:16]})"
        for s in dealer.get("sessions", [])
    )
    return f"{dealer.get('label', '?')}; sessions served by {served or 'no recorded dealer'}"


def summary(report: Mapping[str, Any]) -> str:
    job = report.get("job", {})
    sel = report.get("selection", {})
    costs = report.get("costs", {})
    online = sum(int(c.get("online_bytes", 0)) for c in costs.values())
    offline = sum(int(c.get("offline_bytes", 0)) for c in costs.values())
    rows = [
        ("forgotten client(s)", ", ".join(job.get("targets", []))),
        ("method", f"{job.get('strategy', report.get('strategy', '?'))} under two-party computation"),
        ("parameters", json.dumps(report.get("params", job.get("parameters", {})), sort_keys=True)),
        ("replaced model", f"global model {job.get('base_round', '?')}: {job.get('base_model_hash', '?')}"),
        ("unlearned model", f"global model {job.get('new_global_round', '?')}: {job.get('model_hash', '?')}"),
        ("stored rounds T", report.get("stored_rounds", "?")),
        ("selected rounds", f"{len(sel.get('selected_rounds', []))} of {report.get('stored_rounds', '?')}"),
        ("average round percentage saved (ARP)", f"{report.get('arp_percent', float('nan')):.1f} %"),
        ("started / finished", f"{when(job.get('started'))} / {when(job.get('finished'))}"),
        ("duration", f"{job.get('seconds', 0.0):.1f} s in {job.get('session_attempts', '?')} session attempt(s)"),
        ("bytes between the parties", f"{mb(online)} online, {mb(offline)} offline (from the dealer)"),
        ("dealer", _dealer(report.get("dealer", {}))),
    ]
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{escape(str(v))}</dd>" for k, v in rows)
    return section("summary", "Summary", f"<dl>{dl}</dl>")


def rounds(report: Mapping[str, Any]) -> str:
    total = int(report.get("stored_rounds", 0))
    sel = report.get("selection", {})
    checks = [int(f["round"]) for f in report.get("flags", [])]
    strip = charts.round_strip("selected-rounds", total, sel.get("selected_rounds", []), checks)
    text = (
        f"Round selection ({sel.get('method', '?')}) kept {len(sel.get('selected_rounds', []))} of the {total} stored "
        f"rounds (filled); outlined rounds are where the threshold check ran. Only this set was opened, sorted by "
        "round index (never the rank order)."
    )
    return section("rounds", "Selected rounds", figure(strip, text))


def flags(report: Mapping[str, Any]) -> str:
    checks = report.get("flags", [])
    clients = sorted({c for f in checks for c in f.get("flags", {})})
    if not checks:
        return section("flags", "Threshold checks and corrections", note("No threshold check ran in this job."))
    labels = [f"unlearning round {f['t']} (round {f['round']})" for f in checks]
    cells = [[f["flags"].get(c) for c in clients] for f in checks]
    grid = charts.flag_grid("correction-flags", labels, clients, cells)
    events = report.get("corrections", {}).get("events", [])
    rows = [
        (e["t"], e["round"], e["reason"], len(e["asked"]), len(e["answered"]), ", ".join(e["missing"]) or "—")
        for e in events
    ]
    return section(
        "flags",
        "Threshold checks and corrections",
        figure(
            grid, "SecTC flags (filled: the client's estimated update drifted past its threshold and was corrected)"
        ),
        table(["unlearning round", "round", "reason", "asked", "answered", "missing"], rows),
    )


def costs(report: Mapping[str, Any]) -> str:
    data = report.get("costs", {})
    names = [n for n in STEPS if n in data] + sorted(n for n in data if n not in STEPS)
    if not names:
        return section("costs", "Time and bytes per step", note("The report holds no cost ledger."))
    labels = [STEPS.get(n, n) for n in names]
    seconds = charts.hbar_chart(
        "step-seconds",
        labels,
        [charts.Series("wall time", [float(data[n].get("seconds", 0)) for n in names], charts.PALETTE[0])],
        lambda v: f"{v:.1f} s",
    )
    traffic = charts.hbar_chart(
        "step-bytes",
        labels,
        [
            charts.Series(
                "online (party↔party)", [float(data[n].get("online_bytes", 0)) for n in names], charts.PALETTE[1]
            ),
            charts.Series(
                "offline (dealer→parties)", [float(data[n].get("offline_bytes", 0)) for n in names], charts.PALETTE[2]
            ),
        ],
        mb,
    )
    rows = [
        (
            STEPS.get(n, n),
            f"{data[n].get('seconds', 0):.2f}",
            mb(data[n].get("online_bytes", 0)),
            data[n].get("online_rounds", 0),
            mb(data[n].get("offline_bytes", 0)),
            f"{data[n].get('offline_seconds', 0):.2f}",
        )
        for n in names
    ]
    head = ["step", "seconds", "online", "online rounds", "offline", "offline seconds"]
    return section(
        "costs",
        "Time and bytes per step",
        figure(seconds, "wall time per protocol step (summed over session attempts)"),
        figure(traffic, "bytes per protocol step: online between the parties, offline from the dealer"),
        table(head, rows, "num"),
    )


def theorem1(report: Mapping[str, Any]) -> str:
    inputs = report.get("theorem1")
    if not inputs:
        return section("theorem1", "Theorem 1 inputs", note("This strategy reports no Theorem 1 inputs."))
    names = {
        "eta_u": "unlearning rate η_u",
        "sigma": "selection rate σ",
        "t_i": "selected rounds t_i",
        "compared_retrain_round": "retrain round compared, ⌈t_i/σ⌉",
        "stored_rounds": "stored rounds T",
        "mu": "strong convexity μ",
        "loss_gap": "F(M_0) − F(M*)",
    }
    rows = [
        (label, "not known (depends on the data)" if inputs.get(k) is None else inputs[k]) for k, label in names.items()
    ]
    return section(
        "theorem1",
        "Theorem 1 inputs",
        note(
            "Theorem 1 bounds the distance between the unlearned model and a model retrained without the target: "
            "‖M̂ − M‖ ≤ 2·sqrt(η_u·[1/μ + 1/(σ(μ − 2))]·[F(M_0) − F(M*)]·t_i). The run fixes η_u, σ and t_i; "
            "μ and the loss gap depend on the data."
        ),
        table(["input", "value"], rows),
    )


def revealed(report: Mapping[str, Any]) -> str:
    items = report.get("revealed", {})
    rows = []
    for kind, entry in sorted(items.items()):
        extra = f" ({entry['rejected']} rejected)" if "rejected" in entry else ""
        values = entry.get("values")
        cohort = entry.get("cohort")
        epsilon = entry.get("epsilon")
        rows.append(
            (
                kind,
                f"{entry.get('count', '?')}{extra}",
                "—" if cohort is None else cohort,
                "no DP" if epsilon is None else f"{epsilon:g}",
                entry.get("why", ""),
                values if values else "—",
            )
        )
    return section(
        "revealed",
        "What the computation revealed",
        note(
            "Every value opened during the two-party computation or published as a model, by kind, with its "
            "cohort (the fewest clients any one value aggregates) and the differential-privacy budget ε spent. "
            "Nothing else about any client's gradient was revealed to either party."
        ),
        table(["kind", "count", "cohort", "ε", "what it is", "values"], rows),
    )


def quality(metrics: Mapping[str, Mapping[str, float]] | None) -> str:
    if not metrics:
        return section(
            "quality",
            "Forgetting quality",
            note(
                "Not measured for this job: the service holds no test data. The demo and the quality benchmarks "
                "measure test error, backdoor success and membership inference before and after unlearning."
            ),
        )
    present = [(k, label) for k, label in MODELS if k in metrics]
    series = [
        charts.Series(label, [100 * float(metrics[k].get(m, 0.0)) for m, _ in QUALITY], charts.PALETTE[i])
        for i, (k, label) in enumerate(present)
    ]
    chart = charts.hbar_chart("quality", [label for _, label in QUALITY], series, lambda v: f"{v:.1f} %", stacked=False)
    rows = [(label, *(f"{100 * float(metrics[k].get(m, 0.0)):.1f} %" for m, _ in QUALITY)) for k, label in present]
    return section(
        "quality",
        "Forgetting quality",
        figure(
            chart, "lower backdoor and membership-inference success after unlearning means the client was forgotten"
        ),
        table(["model", *(label for _, label in QUALITY)], rows, "num"),
    )
