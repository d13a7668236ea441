# ddai developer commands. `make demo` and `make test` work on a fresh clone with nothing installed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build on disk; installed before anything that depends on torch so pip never pulls CUDA wheels.
# On a GPU machine: make setup TORCH_SPEC='torch==2.13.0 --index-url <your CUDA wheel index>'
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= train,llm,embed,serve,cloud,dev
STAMP := $(VENV)/.ddai-setup-$(shell cat pyproject.toml setup.py | cksum | cut -d' ' -f1)

.PHONY: setup demo test sweep lint format bench browser clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	rm -f $(VENV)/.ddai-setup-*
	touch $(STAMP)

demo: setup
	$(BIN)/ddai demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Headless Chromium for the report's browser test (Debian's package); skipped where apt is absent.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
	    echo "chromium not installed: the browser test will fail; install Debian's chromium package"; }

# The full kill -9 sweeps (`make sweep`) stay out of `make test`: it runs their sampled versions.
test: setup browser lint
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not sweep"

sweep: setup
	$(BIN)/python -m pytest -n 2 -m sweep tests/pipelines/test_kill_sweep_ingest.py

bench: setup
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) ddai-work .pytest_cache .ruff_cache
