# Every target sets itself up: a fresh machine needs only Python 3.11, Node.js and make.
# jsii prints a large banner on Node.js 20 (end of life) unless told to stay quiet.
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: install synth test test-slurm bench clean

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

install: $(INSTALLED)

# Synthesize the reference organisation (built-in default config unless CONFIG=path) with the
# compliance packs applied, then print the summary.
synth: $(INSTALLED)
	rm -rf cdk.out
	GPU_GOVERNANCE_CONFIG=$(CONFIG) CDK_OUTDIR=cdk.out $(BIN)/python app.py
	$(BIN)/gpu-governance report cdk.out

test: $(INSTALLED)
	$(BIN)/python -m pytest -m "not slurm"

# Real local Slurm with accounting (installs Debian packages, needs root), then the slurm suite.
test-slurm: $(INSTALLED)
	bash tests/slurm/slurm-up.sh
	$(BIN)/python -m pytest -m slurm

# Speed figures recorded in docs/performance.md (prints tables; no timing assertions anywhere).
bench: $(INSTALLED)
	$(BIN)/python benchmarks/reclaim_planner.py
	$(BIN)/python benchmarks/simulator.py --jobs 100000
	$(BIN)/python benchmarks/synth_scale.py

clean:
	rm -rf cdk.out .pytest_cache .hypothesis
