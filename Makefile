# Every target sets itself up: a fresh machine needs only Python 3.11, Node.js and make.
# jsii prints a large banner on Node.js 20 (end of life) unless told to stay quiet.
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two stamps: make synth needs only the [cdk] extra (about 48 s, 547 MB on a fresh clone); the
# test tools go on top of it for lint, test and the rest, so nothing is installed twice.
INSTALLED_CDK := $(VENV)/.installed-cdk
INSTALLED := $(VENV)/.installed
INSTALLED_MEMBER := $(VENV)/.installed-member
# The AWS CDK CLI (npm aws-cdk) at one version, installed into this project's node_modules, never
# globally; tests/foundation/test_cdk_cli.py runs it. The stamp reinstalls on a version change.
CDK_CLI_VERSION := 2.1148.1
CDK_CLI := node_modules/.aws-cdk-$(CDK_CLI_VERSION)

.PHONY: install cdk-cli synth lint test member-extra test-member test-slurm bench dist clean

$(INSTALLED_CDK): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[cdk]"
	touch $@

$(INSTALLED): $(INSTALLED_CDK) pyproject.toml
	$(BIN)/pip install --quiet -e ".[cdk,test]"
	touch $@

install: $(INSTALLED)

$(CDK_CLI):
	npm install --no-save --no-audit --no-fund --prefix . aws-cdk@$(CDK_CLI_VERSION)
	touch $@

cdk-cli: $(CDK_CLI)

# Synthesize the reference organisation (CONFIG=path or $GPU_GOVERNANCE_CONFIG, else the
# built-in default config) with the compliance packs applied, then print the summary.
synth: $(INSTALLED_CDK)
	rm -rf cdk.out
	$(if $(CONFIG),GPU_GOVERNANCE_CONFIG='$(CONFIG)' )CDK_OUTDIR=cdk.out $(BIN)/python app.py
	$(BIN)/gpu-governance report cdk.out

# The lint rules of pyproject.toml's [tool.ruff.lint] over the whole tree, and the tree as `ruff format` writes it.
lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Two workers (pytest-xdist), each taking whole test modules: a module's fixtures synthesize once.
test: $(INSTALLED) $(CDK_CLI)
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slurm and not member_sdk" --durations=15

# The [member] extra's packages (pyproject.toml's list) added to the test environment, the project
# itself not reinstalled and every installed version held (a change fails here, not under a suite
# running beside it: .ci/run installs this during `make test`).
$(INSTALLED_MEMBER): $(INSTALLED)
	$(BIN)/pip freeze --exclude-editable > $(VENV)/held-versions.txt
	$(BIN)/pip install --quiet -c $(VENV)/held-versions.txt $$($(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["member"])')
	touch $@

member-extra: $(INSTALLED_MEMBER)

# The SageMaker Python SDK path: the [member] extra (sagemaker-train) and the tests marked member_sdk.
test-member: $(INSTALLED_MEMBER)
	$(BIN)/python -m pytest -m member_sdk

# Real local Slurm with accounting (installs Debian packages, needs root), then the slurm suite.
test-slurm: $(INSTALLED)
	bash tests/slurm/slurm-up.sh
	$(BIN)/python -m pytest -m slurm

# Speed figures recorded in docs/performance.md (prints tables; no timing assertions anywhere).
bench: $(INSTALLED)
	$(BIN)/python benchmarks/reclaim_planner.py
	$(BIN)/python benchmarks/simulator.py --jobs 100000
	$(BIN)/python benchmarks/cli_startup.py
	$(BIN)/python benchmarks/synth_scale.py
	$(BIN)/python benchmarks/aws_scenarios.py
	$(BIN)/python benchmarks/guard_checks.py
	$(BIN)/python -m tests.capacity.bench_month --days 30 --seeds 0 1 2

# A release (docs/install.md): the wheel and the source distribution of pyproject.toml's version.
dist: $(INSTALLED)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

clean:
	rm -rf cdk.out dist .pytest_cache .hypothesis

# Opt-in, never in CI: in a sandbox capacity account, checks what no offline test can (README,
# docs/security.md). VERIFY_ARGS="--queue Q --team-a A --team-b B --image I --instance-type T --output S3"
.PHONY: verify-live
verify-live: $(INSTALLED)
	$(BIN)/python -m tests.live.verify_live $(VERIFY_ARGS)
