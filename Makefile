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

.PHONY: help install proto lint fmt test test-tiers test-unit test-integration test-e2e test-compat test-compose \
        test-compose-tier test-swarm test-swarm-tier compose-images compose-up compose-down swarm-up swarm-down gpu-check run stop bench \
        bench-quick bench-containers bench-sequences bench-autoscale bench-generate bench-failover bench-platform \
        bench-workflows bench-large bench-relay bench-worker-loop clean

help:
	@echo "make run           start redis, manager, gateway and the demo model (Ctrl-C stops)"
	@echo "make test          venv, dependencies, protos, lint, then every test tier (a Docker engine for"
	@echo "                   tests/docker and the compose stack's fast checks is installed and started)"
	@echo "make test-compose  the compose stack's faults under load and supervision on a real Docker engine"
	@echo "make test-swarm    a local 3-node Docker Swarm: the swarm launcher, a drained and a killed node under load"
	@echo "make compose-up    engine, images, then the compose stack (GATEWAYS=N, GPU=1, HA=1, TLS=1; docs/containers.md)"
	@echo "make compose-down  the stack, its worker containers and network (REMOVE_VOLUMES=1: also its data)"
	@echo "make swarm-up      a local NODES-node Docker Swarm (default 3) and Sluice on it (GATEWAYS=N; docs/swarm.md)"
	@echo "make swarm-down    the stack, its worker services, the node containers, registry and network; leaves swarm mode"
	@echo "make gpu-check     the GPU variant end to end on an NVIDIA GPU (prints SKIPPED without one)"
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

LINTED := services tests scripts bench docker examples

lint: install
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy $(LINTED)
	$(PY) scripts/check_boundaries.py

fmt: install
	$(VENV)/bin/ruff format $(LINTED)
	$(VENV)/bin/ruff check --fix $(LINTED)

# A Docker engine runs the docker tier and the compose stack's fast checks: scripts/docker_engine.sh
# installs and starts one when none answers (and stops it afterwards); if none can run, it prints
# SKIPPED with the reason and those tests skip. The images are built from this tree while the tiers
# that need no engine run (scripts/test_tiers.sh; cached layers: seconds).
test: lint
	bash scripts/docker_engine.sh run $(MAKE) --no-print-directory test-tiers

test-tiers: install
	bash scripts/test_tiers.sh

test-unit: install
	$(PYTEST) tests/unit

test-integration: install
	$(PYTEST) tests/integration

test-e2e: install
	$(PYTEST) tests/e2e

test-compat: install
	$(PYTEST) tests/compat

# The compose stack's slow checks: faults under load and supervision (.ci/run runs them after make test).
test-compose: install
	bash scripts/docker_engine.sh run $(MAKE) --no-print-directory test-compose-tier

test-compose-tier: install
	bash scripts/compose_images.sh || test $$? = 3
	$(PYTEST) -m compose_slow tests/compose

# A local multi-node swarm (docs/swarm.md): the swarm launcher's contract, workers spread over nodes, a
# drained and a killed node under load, manager restart, swarm-down leaving nothing (.ci/run runs it
# after make test-compose). The tier brings its own swarm up and takes it down.
test-swarm: install
	bash scripts/docker_engine.sh run $(MAKE) --no-print-directory test-swarm-tier

test-swarm-tier: install
	$(PYTEST) -m swarm tests/swarm

# The compose stack (docs/containers.md): a Docker engine (installed and started when none answers),
# the images from this tree, then `compose up` waiting until the demo model answers. GATEWAYS=N gateways
# behind the published port; GPU=1 with docker-compose.gpu.yml; HA=1 with docker-compose.ha.yml (Redis
# Sentinel); TLS=1 with docker-compose.tls.yml (cert.pem, key.pem in TLS_DIR, default ./tls). Give
# compose-down the same flags. compose-down also removes the worker
# containers the manager started and stops an engine compose-up started.
compose-images: install
	bash scripts/docker_engine.sh start
	bash scripts/compose_images.sh $(if $(filter 1,$(GPU)),--gpu)

compose-up: compose-images
	bash scripts/compose_up.sh

compose-down:
	bash scripts/compose_down.sh
	bash scripts/docker_engine.sh stop

# A local multi-node Docker Swarm (docs/swarm.md): the local engine as manager, NODES-1 Docker-in-Docker
# nodes, a local registry the nodes pull the worker and gateway images from, the stack
# deploy/swarm/stack.yml and a front publishing its ports on 127.0.0.1; waits until the demo model
# answers. scripts/swarm_up.sh starts the engine and builds the images itself (SWARM_BUILD=0: not).
# swarm-down leaves the engine running, out of swarm mode.
swarm-up: install
	bash scripts/swarm_up.sh

swarm-down:
	bash scripts/swarm_down.sh

gpu-check: install
	bash scripts/gpu_check.sh

# The demo archives (an MLP, and tiny_gpt with continuous batching: examples/tiny_gpt) are built into
# the runtime folder's model store, then served until Ctrl-C.
DEMO_STORE := var/model-store
run: install
	$(PY) -m sluice_worker.demo_model $(DEMO_STORE)
	$(PY) -m examples.tiny_gpt.archive $(DEMO_STORE)
	$(VENV)/bin/sluice start --foreground --model-store $(DEMO_STORE) --models demo=demo.mar,tiny_gpt=tiny_gpt.mar

stop: install
	$(VENV)/bin/sluice stop

# Benchmarks (bench/__init__.py): Sluice beside the in-process limit and TorchServe 0.12, which runs from
# its own venv (bench/.torchserve-venv, built on first use). Results in bench/results/<timestamp>/.
bench: install
	$(PY) -m bench --preset full

bench-quick: install
	$(PY) -m bench --preset quick

# Stateful models (sequence batching): Sluice beside TorchServe 0.12, with and without state saving.
bench-sequences: install
	$(PY) -m bench.sequences

# Autoscaling on queue depth under an open-loop step load, against fixed 1 and 3 workers, and the cold
# start from zero (bench/autoscale.py). ARGS=--quick for a short run.
bench-autoscale: install
	$(PY) -m bench.autoscale $(ARGS)

# Generative serving (bench/generate.py): token streams against Sluice with and without continuous
# batching (gRPC and REST), TorchServe 0.12 (REST) and the handler in-process. ARGS=--quick for a short run.
bench-generate: install
	$(PY) -m bench.generate $(ARGS)

# The broker failing over (bench/failover.py): what a Sentinel failover costs clients under a steady
# load, and Sentinel against a single Redis on the hot path. ARGS=--quick for a short run.
bench-failover: install
	$(PY) -m bench.failover $(ARGS)

# TLS and OpenTelemetry tracing (100% and 1% sampled) beside a plain stack, same rounds (bench/platform.py).
bench-platform: install
	$(PY) -m bench.platform $(ARGS)

# 1, 4 and 16 MiB inputs (TorchServe gRPC, KServe v2 raw tensors and system shared memory), Sluice beside TorchServe 0.12, same
# rounds (bench/large_inputs.py). ARGS=--quick for a short run.
bench-large: install
	$(PY) -m bench.large_inputs $(ARGS)

# What the broker alone adds to a call at C=1: a job and its reply relayed through Redis between two
# processes with Sluice's pipelined client, nothing else (bench/broker_relay.py). ARGS=--quick.
bench-relay: install
	$(PY) -m bench.broker_relay $(ARGS)

# Plain batching's handler inline on the worker loop's thread against the torch thread, same rounds
# (bench/worker_loop.py): MLP C=1 latency and worker CPU per request, CNN throughput at saturation.
bench-worker-loop: install
	$(PY) -m bench.worker_loop $(ARGS)

# A three-node workflow (pre -> cnn -> post): Sluice's /wfpredict and KServe v2 form, TorchServe 0.12's
# /wfpredict on the same .war, and a client chaining the three calls itself (bench/workflows.py).
# ARGS=--quick for a short run (~2 minutes).
bench-workflows: install
	$(PY) -m bench.workflows $(ARGS)

# Worker containers against worker processes (bench/containers.py), then the swarm launcher on a local
# three-node swarm (bench/swarm.py); needs a Docker engine and the images. ARGS=--quick: short rounds.
bench-containers: compose-images
	$(PY) -m bench.containers $(ARGS)
	$(PY) -m bench.swarm $(ARGS)

clean:
	rm -rf $(VENV) $(PROTO_OUT) var build *.egg-info
