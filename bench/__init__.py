"""Benchmarks: each module exposes `run(quick: bool) -> dict` and writes bench/results/<name>.json
(`starfish bench` runs them; `bench.report` turns the JSON into docs/RESULTS.md and figures)."""
