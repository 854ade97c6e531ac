"""The parameters of a job as a readable table: name, value, who set it, what it means.

The meanings follow docs/ALGORITHM.md ("Parameters", Starfish's Algorithm 4 inputs) and
docs/BASELINES.md (the other methods); a parameter not listed here is shown with its
value and "no description".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.report_page.glossary import term
from harness.report_page.markup import join, note, section, table

#: parameter name → what it means, in plain words
MEANINGS = {
    "sigma": "selection rate σ: the share of stored rounds replayed (T′ = ⌈σ·T⌉ rounds)",
    "alpha": "tolerance rate α: how far a client's estimate may drift before it counts as too far",
    "beta": "interval rate β: a threshold check every T_c = ⌈β·T⌉ unlearning rounds",
    "buffer_size": "curvature pairs B kept per client for the update estimate (L-BFGS memory)",
    "eta_u": "unlearning rate η_u: step size of the replay (none: the stored round's own rate)",
    "switch_threshold": "T_δ: the round-selection comparison switches method above this many stored rounds",
    "method": "round-selection comparison: auto (by T_δ), method1, method2 or alt",
    "inverse": "how the small curvature matrix is inverted: secmi (SecMI) or newton (iterative)",
    "curvature_eps": "curvature safety test: a pair is kept only if curved at least this much (and at least 2^-12)",
    "curvature_max": "curvature safety test: a pair is kept only if it is curved at most this much",
    "hv_bound": "the curvature correction is dropped when it is larger than this many times the update",
    "min_step": "model steps shorter than this are too small to give a curvature pair",
    "check_sample": "threshold check looks at this many public sample coordinates first (0: off)",
    "min_cohort": "release rule: fewest clients any published update may combine",
    "full_batch_gradients": "clients compute full-batch gradients, whatever the replayed round's data order",
    "anchor_noise": (
        "secret noise on a released update that holds a step taken at a Stage I model, so it cannot "
        "be differenced against that round's aggregate"
    ),
    "anchor_reach": "the anchored noise also covers steps within this many Stage I steps of a Stage I model",
    "recovery_rounds": "extra rounds with the remaining clients' exact gradients after the replay",
    "seed": "seed of the public random draw of rounds (random selection, the comparison baseline)",
    "warmup_rounds": "first rounds with exact gradients (none: buffer size + 1)",
    "correction_interval": "exact gradients every this many rounds (none: ⌈T/10⌉, 0: never)",
    "final_tuning": "last rounds with exact gradients (none: ⌈T/20⌉)",
    "tolerance_rate": "tolerance rate for the drift check of the estimates",
    "loss_reduction": "loss reduction α: a round is selected when the loss fell at least this much",
    "round_ratio": "round ratio λ: the share of rounds selected",
    "client_ratio": "client ratio δ: the share of clients kept per selected round",
    "sensitivity_ratio": "sensitivity ratio β: how strongly a client must react to be kept",
}
#: the short names a request may use (`unlearning.strategy_params` aliases)
ALIASES = {"B": "buffer_size", "T_delta": "switch_threshold", "eta": "eta_u"}


def _value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def parameters(report: Mapping[str, Any]) -> str:
    """The section: every effective parameter of the run, marked as requested or default."""
    job = report.get("job", {})
    asked = {ALIASES.get(k, k): v for k, v in (job.get("parameters") or {}).items()}
    used = report.get("params") or asked
    rows = [
        (
            name,
            _value(value),
            "the job" if name in asked else "default",
            MEANINGS.get(name, f"no description (a parameter of {job.get('strategy', '?')})"),
        )
        for name, value in sorted(used.items())
    ]
    if not rows:
        return section("parameters", "Parameters", note("The job ran with no parameters."))
    return section(
        "parameters",
        "Parameters",
        note(
            join(
                "The settings of this job. “the job”: named in the request, or added by the operators' policy "
                "(min_cohort); “default”: the method's default. T is the number of ",
                term("stored-rounds"),
                " (the raw values are in the JSON at the bottom of the page).",
            )
        ),
        table(["parameter", "value", "set by", "what it means"], rows),
    )
