"""The cheap Starfish schedule of the jobs that test the service's plumbing.

Tests that file a job through the service (admin RPC, `starfish admin unlearn`, the Flower
relay) to check filing, faults, restarts, answers or storage test the plumbing, not the
schedule. They give their job T′ = ⌈0.6T⌉ replayed rounds (Algorithm 4 input σ) and no
recovery round, instead of the defaults' every stored round plus one relayed FedAvg round
with all remaining clients. The defaults, which rounds are replayed and the recovery round
are tested in tests/unlearning/test_starfish_strategy.py and by the quality benchmarks
(docs/QUALITY.md); the tests that assert them (recovery, report pages, ARP) keep the defaults.
"""

from __future__ import annotations

#: σ = 0.6 (T′ = ⌈0.6T⌉ replayed rounds) and R = 0 recovery rounds
PLUMBING_SCHEDULE: dict[str, float | int] = {"sigma": 0.6, "recovery_rounds": 0}
