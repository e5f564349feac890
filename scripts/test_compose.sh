#!/usr/bin/env bash
# End-to-end test of docker-compose.yml with a real Docker engine (`make test-compose`).
#
# 1. installs docker.io, docker-compose and debootstrap if missing (apt, as root);
# 2. starts dockerd if `docker info` fails, and stops only that dockerd afterwards;
# 3. builds local/base:bookworm (scripts/build_base_image.sh) if absent: no registry is needed;
# 4. puts the torch CPU wheel into docker/wheelhouse/ if missing;
# 5. builds the images with BASE_IMAGE=REDIS_IMAGE=local/base:bookworm, starts the stack, waits (bounded)
#    for the gateway, and runs one Predictions and one StreamPredictions from the host against
#    127.0.0.1 (scripts/compose_check.py); prints PASS or FAIL and tears the stack down.
# Exit 0 on PASS; 1 on FAIL; 0 with "SKIPPED: docker engine unavailable: <error>" when no engine can run.
# Environment: GATEWAY_PORT, GATEWAY_REST_PORT, GATEWAY_METRICS_PORT, MANAGER_PORT (host ports, default
# 7070, 8080, 8082, 7071; a free one is picked when taken); COMPOSE_TEST_KEEP=1 leaves the stack and a
# dockerd it started running, for inspection; COMPOSE_TEST_PYTHON (default .venv/bin/python) runs the checks.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

BASE=local/base:bookworm
PROJECT=sluice-compose-test
STATE_DIR=$ROOT/var/compose-test
PYTHON=${COMPOSE_TEST_PYTHON:-$ROOT/.venv/bin/python}
DOCKERD_START_S=30
UP_TIMEOUT_S=300
CHECK_TIMEOUT_S=240

mkdir -p "$STATE_DIR"
STARTED_DOCKERD_PID=""
STACK_UP=0
VERDICT="" # printed last, after the logs

log() { printf '[test-compose] %s\n' "$*"; }

fail() {
    VERDICT="FAIL: $*"
    return 1
}

skip() {
    echo "SKIPPED: docker engine unavailable: $*"
    exit 0
}

# shellcheck disable=SC2329  # invoked through trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if ((STACK_UP)); then
        if ((rc != 0)); then
            log "logs of the stack (last 60 lines per service):"
            timeout 60 "${COMPOSE[@]}" logs --no-color --tail=60 2>&1 | sed 's/^/    /' || true
        fi
        if [[ ${COMPOSE_TEST_KEEP:-0} == 1 ]]; then
            log "COMPOSE_TEST_KEEP=1: leaving the stack up (project $PROJECT)"
        else
            log "tearing down"
            timeout 120 "${COMPOSE[@]}" down -v --remove-orphans >"$STATE_DIR/down.log" 2>&1 ||
                log "compose down failed, see $STATE_DIR/down.log"
        fi
    fi
    if [[ -n $STARTED_DOCKERD_PID && ${COMPOSE_TEST_KEEP:-0} == 1 ]]; then
        log "leaving dockerd running (pid $STARTED_DOCKERD_PID, also in $STATE_DIR/dockerd.pid)"
    elif [[ -n $STARTED_DOCKERD_PID ]]; then
        log "stopping the dockerd this script started (pid $STARTED_DOCKERD_PID)"
        kill "$STARTED_DOCKERD_PID" 2>/dev/null || true
        for _ in $(seq 1 30); do
            kill -0 "$STARTED_DOCKERD_PID" 2>/dev/null || break
            sleep 1
        done
        kill -9 "$STARTED_DOCKERD_PID" 2>/dev/null || true
        rm -f "$STATE_DIR/dockerd.pid"
    fi
    if [[ -n $VERDICT ]]; then
        echo "$VERDICT"
    elif ((rc != 0)); then
        echo "FAIL: scripts/test_compose.sh exited with status $rc"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

install_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then
        missing+=(docker-compose)
    fi
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    ((${#missing[@]})) || return 0
    if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
        skip "missing ${missing[*]} and cannot install them (needs root and apt-get)"
    fi
    log "installing ${missing[*]}"
    if ! { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 \
        apt-get install -y -qq "${missing[@]}"; } >"$STATE_DIR/apt.log" 2>&1; then
        skip "apt-get install ${missing[*]} failed: $(tail -1 "$STATE_DIR/apt.log")"
    fi
}

start_engine() {
    if timeout 20 docker info >/dev/null 2>&1; then
        log "docker engine already running"
        return 0
    fi
    [[ $(id -u) == 0 ]] || skip "docker info fails and starting dockerd needs root"
    log "starting dockerd (log: $STATE_DIR/dockerd.log)"
    # setsid: dockerd must not get the terminal's Ctrl-C before the cleanup ran `compose down`.
    setsid dockerd >"$STATE_DIR/dockerd.log" 2>&1 </dev/null &
    STARTED_DOCKERD_PID=$!
    echo "$STARTED_DOCKERD_PID" >"$STATE_DIR/dockerd.pid"
    local deadline=$((SECONDS + DOCKERD_START_S))
    until timeout 5 docker info >/dev/null 2>&1; do
        if ! kill -0 "$STARTED_DOCKERD_PID" 2>/dev/null; then
            STARTED_DOCKERD_PID=""
            skip "dockerd exited: $(grep -v '^$' "$STATE_DIR/dockerd.log" | tail -1)"
        fi
        if ((SECONDS >= deadline)); then
            skip "dockerd not ready after ${DOCKERD_START_S}s: $(tail -1 "$STATE_DIR/dockerd.log")"
        fi
        sleep 1
    done
    log "dockerd ready (pid $STARTED_DOCKERD_PID)"
}

fill_wheelhouse() {
    local torch
    torch=$("$PYTHON" docker/requirements.py pyproject.toml worker | grep '^torch==')
    mkdir -p docker/wheelhouse
    if compgen -G "docker/wheelhouse/torch-${torch#torch==}[-+]*.whl" >/dev/null; then
        return 0
    fi
    log "downloading $torch into docker/wheelhouse/"
    timeout 600 "$PYTHON" -m pip download -q --no-deps "$torch" -d docker/wheelhouse
}

port_free() {
    "$PYTHON" - "$1" <<'EOF'
import socket, sys
with socket.socket() as s:
    try:
        s.bind(("127.0.0.1", int(sys.argv[1])))
    except OSError:
        sys.exit(1)
EOF
}

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Publish on the usual 127.0.0.1 ports, or on free ones where the usual are taken (say by `make run`).
choose_ports() {
    local pair var port
    for pair in GATEWAY_PORT:7070 GATEWAY_REST_PORT:8080 GATEWAY_METRICS_PORT:8082 MANAGER_PORT:7071; do
        var=${pair%%:*}
        port=${!var:-${pair#*:}}
        if ! port_free "$port"; then
            port=$(free_port)
            log "the usual port of $var is taken; publishing on 127.0.0.1:$port"
        fi
        export "$var=$port"
    done
}

wait_healthy() { # service, timeout_s
    local id status deadline=$((SECONDS + $2))
    local format='{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}'
    id=$("${COMPOSE[@]}" ps -q "$1")
    while :; do
        status=$(docker inspect -f "$format" "$id")
        [[ $status == healthy ]] && return 0
        if ((SECONDS >= deadline)) || [[ $status == exited || $status == dead ]]; then
            log "$1 is $status"
            return 1
        fi
        sleep 2
    done
}

# The inference key from the key_file.json the manager writes in its working directory (token
# authorization is on by default), once it exists.
inference_key() {
    local attempt
    for attempt in $(seq 90); do
        if "${COMPOSE[@]}" exec -T manager python -c \
            'import json; print(json.load(open("key_file.json"))["inference"]["key"])' 2>/dev/null; then
            return 0
        fi
        sleep 1
    done
    return 1
}

main() {
    install_packages
    start_engine
    if command -v docker-compose >/dev/null; then
        COMPOSE=(docker-compose -p "$PROJECT")
    else
        COMPOSE=(docker compose -p "$PROJECT")
    fi
    # The legacy builder: BuildKit needs buildx, which the Debian packages do not have.
    export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0
    export BASE_IMAGE=$BASE REDIS_IMAGE=$BASE

    timeout 900 bash scripts/build_base_image.sh "$BASE"
    fill_wheelhouse

    log "building images (log: $STATE_DIR/build.log)"
    if ! timeout 1800 "${COMPOSE[@]}" build --force-rm >"$STATE_DIR/build.log" 2>&1; then
        tail -30 "$STATE_DIR/build.log"
        fail "docker-compose build (log: $STATE_DIR/build.log)"
    fi

    choose_ports
    STACK_UP=1
    log "starting the stack (gateway on 127.0.0.1:$GATEWAY_PORT)"
    if ! timeout "$UP_TIMEOUT_S" "${COMPOSE[@]}" up -d >"$STATE_DIR/up.log" 2>&1; then
        tail -20 "$STATE_DIR/up.log"
        fail "docker-compose up (log: $STATE_DIR/up.log)"
    fi
    wait_healthy gateway 120 || fail "the gateway did not become healthy"
    TOKEN=$(inference_key) || fail "no key_file.json in the manager container"
    log "gateway healthy; running the checks"
    if ! timeout $((CHECK_TIMEOUT_S + 30)) "$PYTHON" scripts/compose_check.py \
        --address "127.0.0.1:$GATEWAY_PORT" --timeout-s "$CHECK_TIMEOUT_S" --token "$TOKEN"; then
        fail "end-to-end checks against the compose stack"
    fi
    VERDICT="PASS: the compose stack served Predictions and StreamPredictions"
}

main "$@"
