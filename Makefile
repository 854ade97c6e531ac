# Starfish: `make demo` sets up and runs the whole system locally; `make test` lints, runs the tests and lists
# the 20 slowest.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.starfish-setup-done
TEST_WORKERS ?= 3  # test files run in parallel (pytest-xdist): most tests wait on their processes
# one OpenMP thread per process in the tests: their many processes (parties, workers, Flower's
# ClientApps) already fill the cores, and a second thread per process only spins
TEST_ENV := OMP_NUM_THREADS=1

.PHONY: setup demo test bench bench-quick clean

$(STAMP): deploy/setup.sh deploy/runtime.lock requirements.txt requirements-flower.txt pyproject.toml
	bash deploy/setup.sh

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m starfish_cli demo

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(TEST_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=20

bench: $(STAMP)
	$(PY) -m bench

bench-quick: $(STAMP)
	$(PY) -m bench --quick

clean:
	rm -rf $(VENV) .pytest_cache
