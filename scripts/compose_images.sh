#!/usr/bin/env bash
# Build the compose stack's images from this tree, on an engine that already runs
# (scripts/docker_engine.sh start):
#   1. local/base:bookworm with debootstrap if it is the base and absent (scripts/build_base_image.sh);
#   2. the torch CPU wheel into docker/wheelhouse/ if missing;
#   3. `compose build` (gateway, manager, worker, haproxy); cached layers make a rebuild take seconds;
#   4. local/sluice-standalone:dev on the worker image (docker/standalone/Dockerfile: the KServe runtime).
# With --gpu, the worker's GPU variant too (docker-compose.gpu.yml: local/sluice-worker:gpu, CUDA torch).
# Prints "SKIPPED: docker engine unavailable: ..." and exits 3 when no engine answers.
# Environment: see scripts/compose_env.sh; PYTHON (default .venv/bin/python) reads the torch pin.
set -euo pipefail

SLUICE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$SLUICE_ROOT"
# shellcheck source=scripts/compose_env.sh
source scripts/compose_env.sh
PYTHON=${PYTHON:-$SLUICE_ROOT/.venv/bin/python}
STATE_DIR=$SLUICE_ROOT/var/compose
mkdir -p "$STATE_DIR"

log() { printf '[compose-images] %s\n' "$*" >&2; }

if ! timeout 20 docker info >/dev/null 2>&1; then
    echo "SKIPPED: docker engine unavailable: docker info fails (scripts/docker_engine.sh start)"
    exit 3
fi

if [[ $BASE_IMAGE == local/base:bookworm ]]; then
    timeout 900 bash scripts/build_base_image.sh "$BASE_IMAGE" >&2
fi

torch=$("$PYTHON" docker/requirements.py pyproject.toml worker | grep '^torch==')
mkdir -p docker/wheelhouse
if ! compgen -G "docker/wheelhouse/torch-${torch#torch==}[-+]*.whl" >/dev/null; then
    log "downloading $torch into docker/wheelhouse/"
    timeout 600 "$PYTHON" -m pip download -q --no-deps "$torch" -d docker/wheelhouse
fi

build() {
    log "building images (log: $STATE_DIR/build.log)"
    if ! COMPOSE_TIMEOUT_S=1800 compose build --force-rm "$@" >"$STATE_DIR/build.log" 2>&1; then
        tail -30 "$STATE_DIR/build.log" >&2
        echo "FAIL: compose build (log: $STATE_DIR/build.log)"
        exit 1
    fi
}

build
log "building local/sluice-standalone:dev (log: $STATE_DIR/build-standalone.log)"
standalone_args=(--build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg WORKER_IMAGE=local/sluice-worker:dev)
for name in PIP_INDEX_URL PIP_EXTRA_INDEX_URL; do
    if [[ -n ${!name:-} ]]; then standalone_args+=(--build-arg "$name=${!name}"); fi
done
if ! timeout 1800 docker build --force-rm "${standalone_args[@]}" -f docker/standalone/Dockerfile \
    -t local/sluice-standalone:dev . >"$STATE_DIR/build-standalone.log" 2>&1; then
    tail -30 "$STATE_DIR/build-standalone.log" >&2
    echo "FAIL: docker build docker/standalone/Dockerfile (log: $STATE_DIR/build-standalone.log)"
    exit 1
fi
if [[ ${1:-} == --gpu ]]; then
    COMPOSE_FILES=docker-compose.gpu.yml build gpu-probe
fi
