# Every target is documented in README.md. The Makefile only wraps commands; logic lives in kit/ and scripts/.
SHELL := /bin/bash
PYTHON ?= python3
PRESET ?= cpu
MODEL ?=
PORT ?= 8000
RUN_DIR ?= run/$(PRESET)
CACHE_DIR ?= $(HOME)/.cache/vllm-kit
WHEELHOUSE ?= $(CACHE_DIR)/wheelhouse-$(PRESET)
BASE_IMAGE ?= vllm-kit/base:bookworm
PYTEST_ARGS ?=

.PHONY: help install setup test test-unit test-golden test-integration run down bench bench-plan golden schema lint clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/ -/'

install:  ## install the kit and its test dependencies into the current Python
	$(PYTHON) -m pip install -q -e '.[test]'

setup: install  ## install the kit, a Docker engine, Compose v2, hadolint and the local base image
	bash scripts/setup-host.sh

test: setup  ## the whole test suite (unit, golden, integration against a real Docker engine and vLLM)
	$(PYTHON) -m pytest $(PYTEST_ARGS)

test-unit: install  ## unit tests only (no Docker)
	$(PYTHON) -m pytest -m unit $(PYTEST_ARGS)

test-golden: install  ## golden files, hadolint and compose config for every preset
	$(PYTHON) -m pytest -m golden $(PYTEST_ARGS)

test-integration: setup  ## real builds and containers
	$(PYTHON) -m pytest -m integration $(PYTEST_ARGS)

run: setup  ## bring up PRESET (default cpu, with a locally made model) detached on 127.0.0.1:PORT
	$(PYTHON) -m kit.cli.main up preset=$(PRESET) $(if $(MODEL),model=$(MODEL)) --out $(RUN_DIR) --port $(PORT) \
		--wheelhouse $(WHEELHOUSE) $(if $(filter cpu,$(PRESET)),--base-image $(BASE_IMAGE))

down:  ## stop the stack started by `make run` and remove its containers
	$(PYTHON) -m kit.cli.main down --out $(RUN_DIR)

bench: setup  ## build, size and start-up figures (printed, not asserted)
	$(PYTHON) bench/bench.py --wheelhouse $(CACHE_DIR)/wheelhouse-cpu --base-image $(BASE_IMAGE)

bench-plan: install  ## memory planner error against real vLLM start-up logs
	$(PYTHON) bench/plan_accuracy.py

.PHONY: fuzz
fuzz: install  ## hostile model configs, overrides, preset files and CLI numbers: cases, tracebacks (0), slowest
	$(PYTHON) bench/fuzz.py

golden: install  ## regenerate golden files after a reviewed change (then read the diff)
	UPDATE_GOLDEN=1 $(PYTHON) -m pytest -m golden -q

schema: install  ## regenerate presets/schema.json from the preset model
	$(PYTHON) -m kit.schema

clean:  ## remove rendered run directories
	rm -rf run/
