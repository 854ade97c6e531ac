"""Benchmarks: each module of the table (`bench.table`) exposes `run(quick: bool) -> dict` and writes
bench/results/<name>.json. `python -m bench NAME...` runs them (`starfish bench` delegates to it);
`bench.report` turns the JSON into docs/RESULTS.md and figures."""
