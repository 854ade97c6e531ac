"""The sections of the job report page, each rendered from the job report (escaped HTML).

The report is `server.jobs.job_report.build_report`'s JSON (the strategy's report plus `job`,
`erasure` and `certificate`); every section copes with a missing part, so a report of
another strategy or an older job still renders.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.report_page import charts
from harness.report_page.glossary import TERMS, term
from harness.report_page.markup import Html, definitions, figure, join, mb, note, section, table, when

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
#: the glossary entry of each step
STEP_TERMS = {
    "TD": "secmax",
    "RS": "secrs",
    "warmup": "exact-gradients",
    "UE": "secue",
    "TC": "sectc",
    "correction": "exact-gradients",
    "recovery": "exact-gradients",
}
QUALITY = (("ter", "test error rate (TER)"), ("ba_asr", "backdoor attack success (BA-ASR)"), ("mia_asr", "MIA-ASR"))
QUALITY_TERMS = {"ter": "ter", "ba_asr": "ba-asr", "mia_asr": "mia-asr"}
MODELS = (("before", "before unlearning"), ("starfish", "after unlearning"), ("retrain", "retrained without target"))


def step_name(name: str) -> Html:
    """A protocol step's name, linked to its glossary entry."""
    label = STEPS.get(name, name)
    return term(STEP_TERMS[name], label) if name in STEP_TERMS else join(label)


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
        (
            "method",
            join(f"{job.get('strategy', report.get('strategy', '?'))} under ", term("2pc", "two-party computation")),
        ),
        ("parameters", Html('<a href="#parameters">the table below</a>')),
        ("replaced model", f"global model {job.get('base_round', '?')}: {job.get('base_model_hash', '?')}"),
        ("unlearned model", f"global model {job.get('new_global_round', '?')}: {job.get('model_hash', '?')}"),
        (term("stored-rounds", "stored rounds T"), report.get("stored_rounds", "?")),
        ("selected rounds", f"{len(sel.get('selected_rounds', []))} of {report.get('stored_rounds', '?')}"),
        (term("arp", "average round percentage saved (ARP)"), f"{report.get('arp_percent', float('nan')):.1f} %"),
        ("started / finished", f"{when(job.get('started'))} / {when(job.get('finished'))}"),
        ("duration", f"{job.get('seconds', 0.0):.1f} s in {job.get('session_attempts', '?')} session attempt(s)"),
        (
            join("bytes between the ", term("operators", "parties")),
            join(f"{mb(online)} online, {mb(offline)} offline (from the ", term("dealer"), ")"),
        ),
        (term("dealer"), _dealer(report.get("dealer", {}))),
    ]
    return section("summary", "Summary", definitions(rows))


def rounds(report: Mapping[str, Any]) -> str:
    total = int(report.get("stored_rounds", 0))
    sel = report.get("selection", {})
    checks = [int(f["round"]) for f in report.get("flags", [])]
    strip = charts.round_strip("selected-rounds", total, sel.get("selected_rounds", []), checks)
    text = join(
        term("secrs", "Round selection"),
        f" ({sel.get('method', '?')}) kept {len(sel.get('selected_rounds', []))} of the {total} ",
        term("stored-rounds", "stored rounds"),
        " (filled); outlined rounds are where the ",
        term("sectc", "threshold check"),
        " ran. Only this set was opened, sorted by round number (never the ranking).",
    )
    return section("rounds", "Selected rounds", figure(strip, text))


def flags(report: Mapping[str, Any]) -> str:
    checks = report.get("flags", [])
    clients = sorted({c for f in checks for c in f.get("flags", {})})
    title = join(term("sectc", "Threshold checks"), " and corrections")
    if not checks:
        return section("flags", title, note("No threshold check ran in this job."))
    labels = [f"unlearning round {f['t']} (round {f['round']})" for f in checks]
    cells = [[f["flags"].get(c) for c in clients] for f in checks]
    grid = charts.flag_grid("correction-flags", labels, clients, cells)
    events = report.get("corrections", {}).get("events", [])
    rows = [
        (e["t"], e["round"], e["reason"], len(e["asked"]), len(e["answered"]), ", ".join(e["missing"]) or "—")
        for e in events
    ]
    caption = join(
        term("correction_flags", "Correction flags"),
        " of each check (rows) and remaining client (columns); filled: the client's estimated update drifted past "
        "its threshold and the client was asked for its ",
        term("exact-gradients", "exact gradient"),
    )
    head = [term("unlearning-round"), "stored round", "reason", "clients asked", "answered", "missing"]
    return section("flags", title, figure(grid, caption), table(head, rows))


def _step_charts(names: list[str], data: Mapping[str, Any]) -> tuple[str, str]:
    """The wall time and the bytes per protocol step as two bar charts."""
    labels = [STEPS.get(n, n) for n in names]
    seconds = charts.hbar_chart(
        "step-seconds",
        labels,
        [charts.Series("wall time", [float(data[n].get("seconds", 0)) for n in names], charts.PALETTE[0])],
        lambda v: f"{v:.1f} s",
    )
    online = [float(data[n].get("online_bytes", 0)) for n in names]
    offline = [float(data[n].get("offline_bytes", 0)) for n in names]
    traffic = charts.hbar_chart(
        "step-bytes",
        labels,
        [
            charts.Series("online (party↔party)", online, charts.PALETTE[1]),
            charts.Series("offline (dealer→parties)", offline, charts.PALETTE[2]),
        ],
        mb,
    )
    return seconds, traffic


def costs(report: Mapping[str, Any]) -> str:
    data = report.get("costs", {})
    names = [n for n in STEPS if n in data] + sorted(n for n in data if n not in STEPS)
    if not names:
        return section("costs", "Time and bytes per step", note("The report holds no cost ledger."))
    seconds, traffic = _step_charts(names, data)
    rows = [
        (
            step_name(n),
            f"{data[n].get('seconds', 0):.2f}",
            mb(data[n].get("online_bytes", 0)),
            data[n].get("online_rounds", 0),
            mb(data[n].get("offline_bytes", 0)),
            f"{data[n].get('offline_seconds', 0):.2f}",
        )
        for n in names
    ]
    head = ["step", "seconds", term("online-offline", "online"), "online rounds", "offline", "offline seconds"]
    caption = join(
        "bytes per protocol step: ",
        term("online-offline", "online"),
        " between the parties, offline from the ",
        term("dealer"),
    )
    return section(
        "costs",
        "Time and bytes per step",
        figure(seconds, "wall time per protocol step (summed over session attempts; the table names each step)"),
        figure(traffic, caption),
        table(head, rows, "num"),
    )


#: Theorem 1's inputs as the report names them, with what each is
THEOREM1 = {
    "eta_u": "unlearning rate η_u (step size of the replay)",
    "sigma": "selection rate σ (share of stored rounds replayed)",
    "t_i": "selected rounds t_i (rounds replayed)",
    "compared_retrain_round": "retrain round compared, ⌈t_i/σ⌉",
    "stored_rounds": "stored rounds T",
    "mu": "strong convexity μ (how curved the training loss is)",
    "loss_gap": "F(M_0) − F(M*) (initial loss minus the best possible loss)",
}


def theorem1(report: Mapping[str, Any]) -> str:
    inputs = report.get("theorem1")
    title = join(term("theorem1"))
    if not inputs:
        return section("theorem1", title, note("This method reports no Theorem 1 inputs."))
    rows = [
        (label, "not known (depends on the data)" if inputs.get(k) is None else inputs[k])
        for k, label in THEOREM1.items()
    ]
    return section(
        "theorem1",
        title,
        note(
            "The paper's Theorem 1 guarantees that the unlearned model M̂ stays close to a model M retrained "
            "without the forgotten client: ‖M̂ − M‖ ≤ 2·sqrt(η_u·[1/μ + 1/(σ(μ − 2))]·[F(M_0) − F(M*)]·t_i). "
            "The job fixes η_u, σ and t_i; μ and the loss gap depend on the data, so the bound itself is not "
            "computed here. Quality is measured instead (see Forgetting quality)."
        ),
        table(["input", "value"], rows),
    )


def _values(values: Any) -> str:
    """Revealed values in words: a list of numbers as such, published updates by their steps and support."""
    if not values:
        return "—"
    if all(isinstance(v, int | float) for v in values):
        return ", ".join(str(v) for v in values)
    if all(isinstance(v, Mapping) and "steps" in v for v in values):
        return "; ".join(
            f"step{'s' if len(v['steps']) > 1 else ''} {', '.join(map(str, v['steps']))}: "
            f"{v.get('support', '?')} clients or more"
            for v in values
        )
    return str(values)


def _revealed_row(kind: str, entry: Mapping[str, Any]) -> tuple[Any, ...]:
    extra = f" ({entry['rejected']} rejected)" if "rejected" in entry else ""
    cohort, epsilon = entry.get("cohort"), entry.get("epsilon")
    return (
        term(kind, kind) if kind in TERMS else kind,
        f"{entry.get('count', '?')}{extra}",
        "—" if cohort is None else cohort,
        "no DP" if epsilon is None else f"{epsilon:g}",
        entry.get("why", ""),
        _values(entry.get("values")),
    )


def revealed(report: Mapping[str, Any]) -> str:
    items = report.get("revealed", {})
    rows = [_revealed_row(kind, entry) for kind, entry in sorted(items.items())]
    return section(
        "revealed",
        "What the computation revealed",
        note(
            join(
                "Every value opened during the ",
                term("2pc", "two-party computation"),
                " or published as a model, by kind (each kind links to its explanation), with its ",
                term("cohort"),
                " (the fewest clients any one value combines; 1 means a yes/no bit about one client) and the ",
                term("epsilon", "differential-privacy budget ε"),
                " spent. Nothing else about any client's contribution was revealed to either operator.",
            )
        ),
        table(["kind", "count", term("cohort"), term("epsilon", "ε"), "what it is (technical)", "values"], rows),
    )


def quality(metrics: Mapping[str, Mapping[str, float]] | None) -> str:
    if not metrics:
        return section(
            "quality",
            "Forgetting quality",
            note(
                join(
                    "Not measured for this job: the service holds no test data. The demo and the quality benchmarks "
                    "measure ",
                    term("ter", "test error"),
                    ", ",
                    term("ba-asr", "backdoor success"),
                    " and ",
                    term("mia-asr", "membership inference"),
                    " before and after unlearning.",
                )
            ),
        )
    present = [(k, label) for k, label in MODELS if k in metrics]
    series = [
        charts.Series(label, [100 * float(metrics[k].get(m, 0.0)) for m, _ in QUALITY], charts.PALETTE[i])
        for i, (k, label) in enumerate(present)
    ]
    chart = charts.hbar_chart("quality", [label for _, label in QUALITY], series, lambda v: f"{v:.1f} %", stacked=False)
    rows = [(label, *(f"{100 * float(metrics[k].get(m, 0.0)):.1f} %" for m, _ in QUALITY)) for k, label in present]
    head = ["model", *(term(QUALITY_TERMS[m], label) for m, label in QUALITY)]
    return section(
        "quality",
        "Forgetting quality",
        figure(
            chart, "lower backdoor and membership-inference success after unlearning means the client was forgotten"
        ),
        table(head, rows, "num"),
    )
