# The two commands people need are `make run` and `make test`; the rest serve them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: run test test-fast bench faults lint format check clean-data

$(INSTALLED): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e ".[dev]"
	@touch $@

## Start the whole console: database, migrations, demo fleet, worker, beat, web on :8000.
run: $(INSTALLED)
	$(BIN)/python -m console.launcher run

## Run every check and the whole test suite.
test: $(INSTALLED)
	$(BIN)/python -m console.launcher test $(ARGS)

## The suite without the end-to-end and browser tests, for a quick local loop.
test-fast: $(INSTALLED)
	$(BIN)/python -m console.launcher test -m "not e2e and not browser" $(ARGS)

## Measure throughput, latency and memory targets; results go to docs/benchmarks.md.
bench: $(INSTALLED)
	$(BIN)/python -m console.launcher bench

## The fault campaign (about 30 minutes): outages, kill -9s and hostile batches on private
## servers; its table goes to docs/benchmarks.md. `make faults OUTAGE=20` for a short one.
OUTAGE ?= 300
faults: $(INSTALLED)
	$(BIN)/python -m tests.bench.run_all --only faults --outage $(OUTAGE)

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(INSTALLED)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## Stop the embedded database and delete its data (the next `make run` starts afresh).
clean-data: $(INSTALLED)
	$(BIN)/python -m console.launcher clean-data
