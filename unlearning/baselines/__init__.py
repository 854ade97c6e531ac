"""Baseline and seed unlearning methods, one module per strategy (see docs/BASELINES.md).

Every class implements `unlearning.strategy.Strategy`; `unlearning.registry` maps names
to them. Shared helpers live in `unlearning.baselines.common`.
"""
