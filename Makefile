# The two README commands: `make demo` (the main job) and `make test` (the default test run).
# Both set everything up on a fresh machine: a local venv, torch's CPU build (pinned: an unpinned
# torch pulls a multi-GB CUDA build), and this project installed editable. A second run reuses it.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo test test-all lint bench docs clean

# Recipes are quiet (@): what a user reads is one line per step. pip's own output is kept only
# when it fails (the log is printed), so a failed set-up still says why.
$(STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 1; }
	@echo "setting up $(VENV) (Python, torch's CPU build, hwsim and its tools, and the simulator's compiled kernels; a few minutes)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0 >$(VENV)/setup.log 2>&1 \
		|| { cat $(VENV)/setup.log; exit 1; }
	@$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,docs,parquet,sweep,dask,tune,fuzz,mcp,perfetto]' \
		>>$(VENV)/setup.log 2>&1 || { cat $(VENV)/setup.log; exit 1; }
	@# the import check also compiles the Numba code once (saying so), so no later run compiles
	@$(BIN)/python -c "import torch, hwsim.bridge, numba, simpy, ml_dtypes, pytest, hwsim.kernels, hwsim.builder; \
		hwsim.kernels.warm_up(); hwsim.builder.warm_up()"
	@touch $(STAMP)
	@echo "set up: $(VENV) is ready"

setup: $(STAMP)

# The main job: a kernel on the simulated NeuronCore, then tiny GPT-2 through torch.compile.
demo: setup
	@$(BIN)/hwsim demo
	@$(BIN)/python -m hwsim.bridge.demo

test: setup
	@$(BIN)/pytest -n 2 -q

test-all: setup
	$(BIN)/pytest -n 2 -q -m ""

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	tools/typecheck.sh $(BIN)/mypy

bench: setup
	$(BIN)/python bench/fidelity.py
	$(BIN)/python bench/speed.py

# The documentation site, from docs/ (mkdocs.yml), into site/.
docs: setup
	@NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	@echo "wrote site/ (open site/index.html)"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
