"""Crab: KL-divergence round selection, cosine client selection, adaptive rollback, calibration."""

from __future__ import annotations

import pytest
import torch

from mpc.plain_backend import PlainBackend
from unlearning.baselines.common import loss_windows
from unlearning.baselines.crab import CrabStrategy, KeptRound, kl_divergence, rollback_index
from unlearning.strategy import UnlearnContext, UnlearningError

from helpers.synthetic_fl import LogRegFL, LogRegProbe, TableOracle, history_from_gradients

BIG = {2, 5}  #: rounds with large steps in the constructed example


def constructed(target_row):
    """Six rounds in 2-D; rounds 2 and 5 take steps 8× larger; clients a, b benign (a slightly
    better aligned with every aggregate), u target."""
    table = []
    for i in range(1, 7):
        scale = 0.4 if i in BIG else 0.05
        table.append(
            {
                "a": torch.tensor([-scale, 0.1 * scale]),
                "b": torch.tensor([-0.9 * scale, -0.1 * scale]),
                "u": target_row(scale),
            }
        )
    backend = PlainBackend()
    history = history_from_gradients(backend, torch.tensor([0.2, 0.1]), table, {"a": 10, "b": 10, "u": 10}, lr=1.0)
    probe = LogRegProbe(LogRegFL.make(dim=2, seed=3))
    oracle = TableOracle(table)
    params = {"loss_reduction": 0.999, "round_ratio": 2 / 6, "client_ratio": 2 / 3}
    ctx = UnlearnContext(backend=backend, history=history, oracle=oracle, targets=("u",), params=params, probe=probe)
    return ctx, table, oracle


def test_kl_divergence_matches_definition():
    p = torch.tensor([[0.5, 0.5], [0.9, 0.1]])
    q = torch.tensor([[0.25, 0.75], [0.9, 0.1]])
    expected = (0.5 * torch.log(torch.tensor(2.0)) + 0.5 * torch.log(torch.tensor(2 / 3))) / 2
    assert kl_divergence(p, q) == pytest.approx(float(expected))
    assert kl_divergence(p, p) == 0.0


def test_loss_windows_close_on_the_loss_reduction_rate():
    assert loss_windows([1.0, 0.95, 0.85, 0.84, 0.70, 0.69], 0.1) == [[1, 2], [3, 4], [5]]


def test_crab_keeps_big_rounds_and_aligned_clients_and_skips_recovery_when_target_never_kept():
    """The paper's rollback weighs the kept clients only: a target never kept never moved it."""
    ctx, _, oracle = constructed(lambda s: torch.tensor([0.5 * s, 0.0]))  # target opposes the aggregate
    ctx.params = {**ctx.params, "rollback_clients": "kept"}
    result = CrabStrategy().run(ctx)
    report = result.report
    assert report["selected_rounds"] == sorted(BIG)
    assert report["selected_clients"] == {"2": ["a", "b"], "5": ["a", "b"]}
    assert report["rollback_round"] == 5 and report["recovery_rounds"] == []
    assert oracle.requests == []
    torch.testing.assert_close(result.model, ctx.history.model(5))


def test_crab_rolls_back_for_a_target_selective_storage_dropped():
    """Ours (the default): the rollback weighs every participant, so the same target — never
    kept, yet a third of every aggregate — sends the model back to M_0; the kept benign
    clients recover it."""
    ctx, table, oracle = constructed(lambda s: torch.tensor([0.5 * s, 0.0]))
    report = CrabStrategy().run(ctx).report
    assert report["selected_clients"] == {"2": ["a", "b"], "5": ["a", "b"]}
    assert report["rollback_round"] == 0 and report["recovery_rounds"] == [2, 5]
    assert [r.clients for r in oracle.requests] == [("a", "b"), ("a", "b")]


def test_crab_rolls_back_to_m0_when_the_target_dominates_and_recovers_with_kept_benign_clients():
    ctx, table, oracle = constructed(lambda s: torch.tensor([-10 * s, 0.0]))  # target pushes hard, aligned
    result = CrabStrategy().run(ctx)
    report = result.report
    assert report["selected_clients"] == {"2": ["a", "u"], "5": ["a", "u"]}
    assert report["rollback_round"] == 0 and report["recovery_rounds"] == [2, 5]
    assert [r.clients for r in oracle.requests] == [("a",), ("a",)]
    # calibrated fresh update = stored length × fresh direction = the stored gradient of "a"
    expected = ctx.history.model(0).double() - table[1]["a"].double() - table[4]["a"].double()
    torch.testing.assert_close(result.model, expected.float())
    assert report["client_rounds"]["a"] == 2 and report["client_rounds"]["b"] == 0


def test_rollback_index_is_the_last_round_within_the_threshold():
    backend = PlainBackend()

    def kept(rows: dict[str, tuple[float, float]]) -> KeptRound:
        grads = backend.share(torch.tensor(list(rows.values()), dtype=torch.float64))
        return KeptRound(0, list(rows), grads, backend.share(torch.ones(len(rows))), 1.0)

    counts = [{"a": 1, "u": 1}] * 3
    # S = 0, 0, 4 (‖mean(a, u) − a‖ in round 3); Φ = β·(1 + 0 + 0) = 0.5 throughout
    rounds = [kept({"a": (1.0, 0.0)}), kept({"a": (1.0, 0.0)}), kept({"a": (1.0, 0.0), "u": (9.0, 0.0)})]
    assert rollback_index(backend, iter(rounds), counts, {"u"}, beta=0.5) == 2
    assert rollback_index(backend, iter(rounds[:2]), counts[:2], {"u"}, beta=0.5) == 2
    target_first = [kept({"a": (1.0, 0.0), "u": (9.0, 0.0)})] + rounds[:2]
    assert rollback_index(backend, iter(target_first), counts, {"u"}, beta=0.5) == 0


def test_crab_on_a_trained_history_reports_consistent_selection(logreg_fl):
    result = CrabStrategy().run(logreg_fl.context(params={"loss_reduction": 0.2}))
    report = result.report
    for window in report["windows"]:
        chosen = [i for i in window if i in report["selected_rounds"]]
        assert len(chosen) == -(-len(window) * 6 // 10)  # ⌈0.6·B_b⌉
        scores = {i: report["divergences"][str(i)] for i in window}
        assert min(scores[i] for i in chosen) >= max([scores[i] for i in window if i not in chosen], default=-1)
    assert all(len(k) == 4 for k in report["selected_clients"].values())  # ⌈0.7·5⌉
    assert torch.isfinite(result.model).all()


def test_crab_needs_a_probe_for_the_papers_round_scores(logreg_fl):
    with pytest.raises(UnlearningError, match="ModelProbe"):
        CrabStrategy().run(logreg_fl.context(with_probe=False, params={"round_score": "kl"}))


def test_crab_without_a_probe_scores_rounds_by_their_public_model_steps(logreg_fl):
    """The data-free rule: windows by the aggregate's norm, scores ‖M_i − M_{i−1}‖²."""
    report = CrabStrategy().run(logreg_fl.context(with_probe=False)).report
    history = logreg_fl.history
    steps = {
        str(i): float((history.model(i).double() - history.model(i - 1).double()).norm()) ** 2 for i in range(1, 9)
    }
    assert report["round_score"] == "step" and report["divergences"] == pytest.approx(steps)
    norms = [float((history.model(i - 1).double() - history.model(i).double()).norm()) / 0.5 for i in range(1, 9)]
    assert report["windows"] == loss_windows(norms + norms[-1:], 0.1)
    assert CrabStrategy().run(logreg_fl.context()).report["round_score"] == "kl"  # with a probe


@pytest.mark.parametrize(
    "params",
    [
        {"loss_reduction": 1.0},
        {"round_ratio": 0},
        {"client_ratio": 1.5},
        {"sensitivity_ratio": -0.1},
        {"lambda": 0.6},
        {"rollback_clients": "some"},
        {"round_score": "loss"},
    ],
)
def test_crab_rejects_bad_parameters(logreg_fl, params):
    with pytest.raises(UnlearningError):
        CrabStrategy().run(logreg_fl.context(params=params))
