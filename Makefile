# Every target is documented in README.md. The Makefile only wraps commands; logic lives in kit/ and scripts/.
SHELL := /bin/bash
# Debian 12's own python3 refuses `pip install` into the system interpreter (PEP 668, "externally managed"),
# so the kit and its test tools live in a virtual environment made here (ignored by git). BOOTSTRAP_PYTHON
# only makes the venv; everything after runs from it. Its bin/ goes first on PATH for the tools pip puts
# there (hadolint, docker-compose).
BOOTSTRAP_PYTHON ?= python3
VENV ?= .venv
PYTHON := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
PRESET ?= cpu
MODEL ?=
PORT ?= 8000
RUN_DIR ?= run/$(PRESET)
CACHE_DIR ?= $(HOME)/.cache/vllm-kit
WHEELHOUSE ?= $(CACHE_DIR)/wheelhouse-$(PRESET)
BASE_IMAGE ?= vllm-kit/base:bookworm
PYTEST_ARGS ?=
# make test runs two pytest workers: one takes every test that needs the Docker engine, in order (their images and
# stacks are session fixtures, shared), the other everything else meanwhile (tests/conftest.py groups them).
# PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= 2

.PHONY: help install setup setup-run test test-unit test-golden test-package test-integration run down loadtest bench bench-size bench-plan bench-start golden schema lint docs clean webui-e2e

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/ -/'

# Steps of scripts/setup-host.sh that serving does not need: arm64 emulation and its base image, the local
# registry, hadolint and the prometheus .deb are for the tests. The local base image is only for the cpu preset.
comma := ,
RUN_SETUP_SKIP := arm64,registry,hadolint,prometheus$(if $(filter cpu,$(PRESET)),,$(comma)base)

$(PYTHON):
	$(BOOTSTRAP_PYTHON) -m venv $(VENV) || { echo "making $(VENV) failed: on Debian, apt-get install -y python3-venv"; exit 1; }

# Reinstalled only when pyproject.toml changes (the install is editable: code changes need nothing).
# `make run` needs the CLI only; the tests add the test extra.
$(VENV)/.installed-run: pyproject.toml | $(PYTHON)
	$(PYTHON) -m pip install -e .
	touch $@

$(VENV)/.installed: pyproject.toml | $(PYTHON)
	$(PYTHON) -m pip install -e '.[test]'
	touch $@ $(VENV)/.installed-run

install: $(VENV)/.installed  ## make .venv and install the kit (editable) and its test dependencies into it

setup: install  ## install the kit, a Docker engine, Compose v2, hadolint, the local base images, QEMU, a registry
	PYTHON=$(PYTHON) bash scripts/setup-host.sh

setup-run: $(VENV)/.installed-run  ## only what serving needs: a Docker engine, Compose v2 (and the local base image for cpu)
	PYTHON=$(PYTHON) KIT_SETUP_SKIP="$(if $(KIT_SETUP_SKIP),$(KIT_SETUP_SKIP)$(comma))$(RUN_SETUP_SKIP)" bash scripts/setup-host.sh

test: setup  ## the whole test suite (unit, golden, integration against a real Docker engine and vLLM)
	$(PYTHON) -m pytest $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadgroup) $(PYTEST_ARGS)

test-unit: install  ## unit tests only (no Docker), without the slow_unit ones (make test runs those)
	$(PYTHON) -m pytest -m "unit and not slow_unit" $(PYTEST_ARGS)

test-golden: install  ## golden files, hadolint and compose config for every preset
	$(PYTHON) -m pytest -m golden $(PYTEST_ARGS)

test-package: install  ## build the sdist and wheel, install into a fresh venv, render every preset from outside
	$(PYTHON) -m pytest -m package $(PYTEST_ARGS)

test-integration: setup  ## real builds and containers
	$(PYTHON) -m pytest -m integration $(PYTEST_ARGS)

run: setup-run  ## bring up PRESET (default cpu, with a locally made model) detached on 127.0.0.1:PORT
	door=$$(bash scripts/door-image.sh $(VENV)/bin/python $(BASE_IMAGE)) && \
	VLLM_KIT_DOOR_IMAGE=$$door VLLM_KIT_PROG=$(VENV)/bin/kit $(VENV)/bin/kit up preset=$(PRESET) $(if $(MODEL),model=$(MODEL)) --out $(RUN_DIR) --port $(PORT) \
		--wheelhouse $(WHEELHOUSE) $(if $(filter cpu,$(PRESET)),--base-image $(BASE_IMAGE))

down:  ## stop the stack started by `make run` and remove its containers
	$(PYTHON) -m kit.cli.main down --out $(RUN_DIR)

$(VENV)/.installed-loadtest: pyproject.toml | $(PYTHON)
	$(PYTHON) -m pip install -e '.[loadtest]'
	touch $@

WEBUI_PORT ?= 8080
WEBUI_WHEELHOUSE ?= $(CACHE_DIR)/wheelhouse-webui
# Debian's browser stack for the e2e run: Chromium, its WebDriver, and Selenium for Debian's python3.
WEBUI_E2E_APT := chromium chromium-driver python3-selenium
webui-e2e: setup-run  ## Open WebUI beside the cpu stack, driven by headless Chromium; screenshot in run/webui-e2e
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && /usr/bin/python3 -c 'import selenium' 2>/dev/null \
		|| DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(WEBUI_E2E_APT)
	$(if $(LOCK),flock $(LOCK)) env PYTHONPATH=$(CURDIR) $(PYTHON) scripts/webui-e2e/run.py --run-dir run/webui-e2e \
		--port $(PORT) --webui-port $(WEBUI_PORT) --wheelhouse $(WEBUI_WHEELHOUSE) \
		--cpu-wheelhouse $(CACHE_DIR)/wheelhouse-cpu --base-image $(BASE_IMAGE) $(if $(KEEP),--keep)

CONCURRENCY ?= 1,2,4,8
loadtest: $(VENV)/.installed-loadtest  ## load-test the stack `make run` started; report and plot in RUN_DIR
	$(PYTHON) -m kit.cli.main loadtest preset=$(PRESET) --out $(RUN_DIR) --port $(PORT) --concurrency $(CONCURRENCY) \
		--report $(RUN_DIR)/loadtest.json $(if $(BASELINE),--baseline $(BASELINE))

bench: setup  ## build, size and start-up figures (printed, not asserted)
	$(PYTHON) bench/bench.py --wheelhouse $(CACHE_DIR)/wheelhouse-cpu --base-image $(BASE_IMAGE) \
		--slim-wheelhouse $(CACHE_DIR)/wheelhouse-rtx4090-awq
	$(PYTHON) bench/image_sizes.py

bench-size: install  ## slim images' size breakdown vs the official image's published size; pruning's cut from the rtx4090-awq wheelhouse
	$(PYTHON) bench/image_sizes.py
	$(PYTHON) bench/image_sizes.py --wheelhouse $(CACHE_DIR)/wheelhouse-rtx4090-awq --arch 8.9

bench-plan: install  ## memory planner error against real vLLM start-up logs
	$(PYTHON) bench/plan_accuracy.py

bench-start: install  ## where a start goes (import, weights, compile, profile, graphs, API), first start vs restart, from recorded logs
	$(PYTHON) bench/start_report.py

.PHONY: bench-cli
bench-cli: install  ## CLI start-up (--help, completion, render) against `python -c pass`: medians and ratios
	$(PYTHON) bench/cli_startup.py

.PHONY: upstream-check
upstream-check: install  ## every pin (PyPI releases, Debian packages) against the indexes: newer releases, missing files (network; not in `make test`)
	$(PYTHON) scripts/upstream_check.py $(if $(DOWNLOAD),--download)

.PHONY: fuzz
fuzz: install  ## hostile model configs, overrides, preset files, CLI numbers and render inputs: cases, tracebacks (0), structure changes (0), slowest; hostile requests through the rendered door (Docker)
	$(PYTHON) bench/fuzz.py
	$(PYTHON) bench/fuzz_render.py
	$(PYTHON) bench/fuzz_door.py

golden: install  ## regenerate golden files after a reviewed change (then read the diff)
	UPDATE_GOLDEN=1 $(PYTHON) -m pytest -m golden -q

schema: install  ## regenerate presets/schema.json from the preset model
	$(PYTHON) -m kit.config.schema

# The rules and their reasons are in pyproject.toml ([tool.ruff.lint], [tool.mypy]); ruff and mypy come with the test extra.
lint: install  ## ruff over kit/, tests/, scripts/, bench/; mypy on kit/
	$(VENV)/bin/ruff check kit tests scripts bench
	$(VENV)/bin/mypy

# The docs site (docs/, mkdocs.yml): --strict turns a broken link or a page missing from the nav into a failure.
# mkdocs comes with the test extra; the site goes to site/ (ignored by git).
docs: install  ## build the docs site from docs/ with mkdocs build --strict into site/
	$(VENV)/bin/mkdocs build --strict

clean:  ## remove rendered run directories (the venv stays: rm -rf .venv to start over)
	rm -rf run/
