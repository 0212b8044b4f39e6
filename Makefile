# Task runner. `make setup` once, then `make up` / `make test`.
SHELL := /bin/bash
ENV ?= dev
VENV ?= .venv
PY := $(VENV)/bin/python
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
CDK := npx --no-install cdk

.PHONY: setup up down synth diff snapshot test lint bench check plan

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch from this machine's local wheel; an unpinned torch pulls a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0

setup: $(PY)  ## virtual environment, the project with every extra, the CDK CLI
	$(PY) -m pip install --quiet -e '.[dev]'
	npm ci --no-audit --no-fund --silent

up: setup  ## main job: until the local platform lands, synth of the dev environment
	$(PY) -m config check --env $(ENV)
	$(CDK) synth -c env=$(ENV) -q && ls cdk.out/*.template.json

down:  ## stop what `make up` started (nothing runs in the background yet)
	@echo "nothing to stop"

synth: $(PY)  ## synth one environment with the cdk-nag packs: make synth ENV=prod
	$(CDK) synth -c env=$(ENV) -q

check: $(PY)  ## validate the catalog for every environment
	$(PY) -m config check

plan: $(PY)  ## device-memory plan: how many adapters fit
	$(PY) -m config plan --env $(ENV)

lint: $(PY)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: setup  ## the test suite (what .ci/run runs after lint)
	$(PY) -m pytest -q

diff:  ## reserved: offline template diff against the committed snapshot (infrastructure issue)
	@echo "template snapshots are not committed yet"; exit 2

snapshot:  ## reserved: update committed template snapshots (infrastructure issue)
	@echo "template snapshots are not committed yet"; exit 2

bench: setup  ## benchmarks (each prints a table and writes benchmarks/RESULTS.md)
	$(PY) benchmarks/serving.py
	$(PY) benchmarks/router.py
	$(PY) -m training.train_all
