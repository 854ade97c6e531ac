"""The anchored noise is keyed (unlearning/starfish/anchor_noise.py, "Keyed draws"): an opening
repeated after a crash adds the very same noise (an operator who saw both learns nothing from
averaging them), two reveals of a run and two runs add different noise."""

from __future__ import annotations

import json

import torch

from mpc.plain_backend import PlainBackend
from unlearning.starfish import StarfishParams, StarfishState, StarfishStrategy
from unlearning.starfish.anchor_noise import new_noise_key, reveal_key, secret_gaussian
from unlearning.strategy import UnlearnContext

from helpers.stage2_attack_fl import ExactOracle, NonIIDLogReg

LR = 0.5
CLIENTS = [f"c{k}" for k in range(6)]


def _run(resume: StarfishState | None = None):
    """Starfish on six stored rounds of all clients, c0 forgotten, the secret default noise;
    (public models after each round, checkpoints, report)."""
    problem = NonIIDLogReg.make(len(CLIENTS))
    backend = PlainBackend()
    history = problem.history(backend, [CLIENTS] * 6, LR)
    states: list[StarfishState] = []
    ctx = UnlearnContext(backend=backend, history=history, oracle=ExactOracle(problem), targets=("c0",))
    ctx.on_checkpoint = states.append
    ctx.resume_from = resume
    result = StarfishStrategy().unlearn(ctx, StarfishParams(sigma=1.0, eta_u=LR, buffer_size=2))
    return [s.model for s in states], states, result.report


def _stored(state: StarfishState) -> StarfishState:
    """The state as a checkpoint stores and reads it back (JSON, tensors, secrets)."""
    return StarfishState.from_parts(
        json.loads(json.dumps(state.public_json())), state.public_tensors(), state.secrets()
    )


def test_a_reveal_opened_again_after_a_crash_adds_the_same_noise() -> None:
    models, states, report = _run()
    first = next(e for e in report["release"]["events"] if e["action"] == "revealed")
    assert first["noised_for"], "the first reveal carries the anchored noise"
    held = states[first["steps"][0] - 1]  # the checkpoint before the reveal: its steps are held
    assert not held.pending.empty and "noise_key" in held.secrets()
    again, _, _ = _run(resume=_stored(held))
    reveal = first["steps"][-1]
    assert torch.equal(again[0], models[reveal - 1]), "the repeated opening differs"
    # the rest of the run continues from the same model (to float64 rounding of the resumed caches)
    assert float((again[-1] - models[-1]).abs().max()) <= 1e-12


def test_two_runs_and_two_reveals_draw_different_noise() -> None:
    models, _, report = _run()
    other, _, _ = _run()
    first = next(e for e in report["release"]["events"] if e["action"] == "revealed")
    assert not torch.equal(models[first["steps"][-1] - 1], other[first["steps"][-1] - 1])
    backend = PlainBackend()
    key = new_noise_key(backend)
    draws = [secret_gaussian(backend, 16, reveal_key(backend, key, t)).value for t in (2, 2, 3)]
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])
    assert reveal_key(backend, key, 2) != reveal_key(backend, new_noise_key(backend), 2)
