"""Starfish (privacy-preserving federated unlearning under 2PC), one module per step:

* `params`     — parameters σ, α, β, B, η_u, T_δ, method, inverse, safeguards, min_cohort (validated);
* `thresholds` — threshold determination [δ^j] = SecMax_i [δ_i^j];
* `secrs`      — round selection SecRS (Algorithm 1) and SecRS(alt) (Algorithm 6);
* `secue`      — update estimation SecUE (Algorithm 2) with compact L-BFGS (`unlearning.lbfgs`);
* `correction` — threshold checking with SecTC (Algorithm 3) and correction;
* `release`    — the Stage II release rule (minimum cohort, no differencing with Stage I);
* `release_gate` — the release step under that rule (exclusion, hold, reveal), also the baselines';
* `recovery`   — optional FedAvg recovery rounds with the remaining clients after the replay;
* `state`      — the resumable state (public parts and secrets);
* `run_log`    — the typed log of a run (rounds, flags, asks, curvature bits, release decisions);
* `run_report` — ARP, Theorem 1 inputs, revealed values;
* `driver`     — Algorithm 4 as `StarfishStrategy` (given a `RoundSelector`, SecRS by default).
"""

from unlearning.starfish.driver import StarfishStrategy
from unlearning.starfish.params import StarfishParams
from unlearning.starfish.state import StarfishState

__all__ = ["StarfishParams", "StarfishState", "StarfishStrategy"]
