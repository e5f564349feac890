#!/usr/bin/env bash
# `make gpu-check`: the GPU variant end to end, on a machine with an NVIDIA GPU and the NVIDIA container
# runtime: builds the images with the worker's GPU variant, starts the stack with
# docker-compose.gpu.yml as project sluice-gpu-check, registers the demo archive with one worker, checks
# that it serves on cuda:0 and prints what it measured (scripts/gpu_measure.py), then takes it down.
# Without a GPU it prints "SKIPPED: no GPU: <why>" and exits 0: no nvidia-smi, nvidia-smi lists no GPU,
# or the engine has no NVIDIA runtime (nvidia-container-toolkit).
# GPU_CHECK_WITHOUT_GPU=1 runs the same steps on the CPU image, expecting cpu (a check of this script).
set -euo pipefail

SLUICE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$SLUICE_ROOT"
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-sluice-gpu-check}
# shellcheck source=scripts/compose_env.sh
source scripts/compose_env.sh
PYTHON=${PYTHON:-$SLUICE_ROOT/.venv/bin/python}
WITHOUT_GPU=${GPU_CHECK_WITHOUT_GPU:-0}

skip() {
    echo "SKIPPED: no GPU: $*"
    exit 0
}

if [[ $WITHOUT_GPU != 1 ]]; then
    command -v nvidia-smi >/dev/null || skip "nvidia-smi not found"
    gpus=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    ((gpus > 0)) || skip "nvidia-smi lists no GPU"
fi
rc=0
bash scripts/docker_engine.sh start || rc=$?
((rc == 0)) || exit 0 # printed SKIPPED: docker engine unavailable
if [[ $WITHOUT_GPU != 1 ]]; then
    timeout 20 docker info --format '{{json .Runtimes}}' | grep -q nvidia ||
        skip "the Docker engine has no NVIDIA runtime (install nvidia-container-toolkit)"
    export COMPOSE_FILES=docker-compose.gpu.yml SLUICE_NUMBER_OF_GPU=${SLUICE_NUMBER_OF_GPU:-$gpus}
    expect=cuda:0
    bash scripts/compose_images.sh --gpu
else
    expect=cpu
    bash scripts/compose_images.sh
fi

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for port in GATEWAY_PORT GATEWAY_REST_PORT GATEWAY_METRICS_PORT MANAGER_PORT MANAGER_REST_PORT; do
    export "$port=$(free_port)"
done
export SLUICE_ENABLE_MODEL_API=true SLUICE_MODEL_CACHE_VOLUME=$COMPOSE_PROJECT_NAME-model-cache
export MODEL_STORE=$SLUICE_ROOT/var/gpu-check/model_store
cleanup() { REMOVE_VOLUMES=1 bash scripts/compose_down.sh || true; }
trap cleanup EXIT
bash scripts/compose_up.sh

key() {
    COMPOSE_TIMEOUT_S=30 compose exec -T manager python -c \
        "import json; print(json.load(open('/var/lib/sluice/key_file.json'))['$1']['key'])"
}
cluster=$(COMPOSE_TIMEOUT_S=30 compose exec -T redis redis-cli --raw GET sluice:manager:cluster-id | tr -d '\r')
timeout 900 "$PYTHON" scripts/gpu_measure.py --grpc-port "$GATEWAY_PORT" \
    --management-port "$MANAGER_REST_PORT" --inference-key "$(key inference)" \
    --management-key "$(key management)" --cluster "$cluster" --expect-device "$expect"
