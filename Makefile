# Sluice developer interface. CI (.ci/run) calls `make test`; nothing else is needed on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PROTO_SRC := $(wildcard proto/sluice/v1/*.proto)
PROTO_ROOT := services/shared
PROTO_OUT := $(PROTO_ROOT)/sluice/v1
STAMP := $(VENV)/.installed-stamp
PYTEST := $(PY) -m pytest

.PHONY: help install proto lint fmt test test-unit test-integration test-e2e test-compat test-compose run \
        stop bench bench-quick clean

help:
	@echo "make run           start redis, manager, gateway and the demo model (Ctrl-C stops)"
	@echo "make test          venv, dependencies, protos, lint, then every test tier"
	@echo "make test-compose  build the images and run the compose stack with a real Docker engine"
	@echo "make install       venv + dependencies + generated protos + the 'sluice' CLI"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[worker,manager,dev]"
	touch $(STAMP)

$(PROTO_OUT)/.stamp: $(PROTO_SRC) $(STAMP)
	rm -rf $(PROTO_OUT) && mkdir -p $(PROTO_OUT)
	$(PY) scripts/gen_protos.py proto services/shared
	touch $@

install: $(STAMP) $(PROTO_OUT)/.stamp

proto: $(PROTO_OUT)/.stamp

LINTED := services tests scripts bench docker

lint: install
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy $(LINTED)
	$(PY) scripts/check_boundaries.py

fmt: install
	$(VENV)/bin/ruff format $(LINTED)
	$(VENV)/bin/ruff check --fix $(LINTED)

# The compat tier runs in its own process: it loads TorchServe's own generated protos, which declare
# the same protobuf packages as ours.
# The compose check builds the images from this tree and runs the stack on a real Docker engine (it
# prints SKIPPED with the reason when no engine can start here).
test: lint
	$(PYTEST) tests/unit tests/integration tests/e2e
	$(PYTEST) tests/compat
	bash scripts/test_compose.sh

test-unit: install
	$(PYTEST) tests/unit

test-integration: install
	$(PYTEST) tests/integration

test-e2e: install
	$(PYTEST) tests/e2e

test-compat: install
	$(PYTEST) tests/compat

test-compose: install
	bash scripts/test_compose.sh

# The demo archive is built into the runtime folder's model store, then served until Ctrl-C.
DEMO_STORE := var/model-store
run: install
	$(PY) -m sluice_worker.demo_model $(DEMO_STORE)
	$(VENV)/bin/sluice start --foreground --model-store $(DEMO_STORE) --models demo=demo.mar

stop: install
	$(VENV)/bin/sluice stop

# Benchmarks (bench/__init__.py): Sluice beside the in-process limit and TorchServe 0.12, which runs from
# its own venv (bench/.torchserve-venv, built on first use). Results in bench/results/<timestamp>/.
bench: install
	$(PY) -m bench --preset full

bench-quick: install
	$(PY) -m bench --preset quick

clean:
	rm -rf $(VENV) $(PROTO_OUT) var build *.egg-info
