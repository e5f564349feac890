#!/usr/bin/env bash
# A Docker engine for the compose stack and the container tests, on any machine (also a fresh one):
#
#   docker_engine.sh start        install docker.io, docker-compose and debootstrap if missing (apt, as
#                                 root), start dockerd if `docker info` fails and record its PID
#   docker_engine.sh stop         stop the dockerd `start` started (by its recorded PID), nothing else
#   docker_engine.sh run CMD ...  start, run CMD, then stop the engine if this run started it; exits
#                                 with CMD's status
#
# When no engine can run (no root, apt fails, dockerd does not start) `start` prints
# "SKIPPED: docker engine unavailable: <reason>" and exits 3; `run` prints the same and still runs CMD,
# whose container tests then skip with that reason. State and logs: var/docker-engine/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_DIR=$ROOT/var/docker-engine
PID_FILE=$STATE_DIR/dockerd.pid
DOCKERD_START_S=30
DOCKERD_STOP_S=30
UNAVAILABLE=3

log() { printf '[docker-engine] %s\n' "$*" >&2; }

unavailable() {
    echo "SKIPPED: docker engine unavailable: $*"
    return "$UNAVAILABLE"
}

install_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then
        missing+=(docker-compose)
    fi
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    ((${#missing[@]})) || return 0
    if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
        unavailable "missing ${missing[*]} and cannot install them (needs root and apt-get)"
        return
    fi
    log "installing ${missing[*]}"
    if ! { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 \
        apt-get install -y -qq "${missing[@]}"; } >"$STATE_DIR/apt.log" 2>&1; then
        unavailable "apt-get install ${missing[*]} failed: $(tail -1 "$STATE_DIR/apt.log")"
    fi
}

# The PID of the dockerd `start` recorded, if it still runs.
recorded_pid() {
    local pid
    [[ -f $PID_FILE ]] || return 1
    pid=$(<"$PID_FILE")
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]]; then
        echo "$pid"
        return 0
    fi
    rm -f "$PID_FILE"
    return 1
}

# Exit status 0: an engine answers (started here or not); $UNAVAILABLE: none can run.
start() {
    mkdir -p "$STATE_DIR"
    install_packages || return
    if timeout 20 docker info >/dev/null 2>&1; then
        return 0
    fi
    [[ $(id -u) == 0 ]] || {
        unavailable "docker info fails and starting dockerd needs root"
        return
    }
    log "starting dockerd (log: $STATE_DIR/dockerd.log)"
    # setsid: a terminal's Ctrl-C must not reach dockerd before the stack it runs was taken down.
    setsid dockerd >"$STATE_DIR/dockerd.log" 2>&1 </dev/null &
    local pid=$! deadline=$((SECONDS + DOCKERD_START_S))
    echo "$pid" >"$PID_FILE"
    until timeout 5 docker info >/dev/null 2>&1; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PID_FILE"
            unavailable "dockerd exited: $(grep -v '^$' "$STATE_DIR/dockerd.log" | tail -1)"
            return
        fi
        if ((SECONDS >= deadline)); then
            stop
            unavailable "dockerd not ready after ${DOCKERD_START_S}s: $(tail -1 "$STATE_DIR/dockerd.log")"
            return
        fi
        sleep 1
    done
    log "dockerd ready (pid $pid)"
}

stop() {
    local pid
    pid=$(recorded_pid) || return 0
    log "stopping the dockerd started by this script (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq "$DOCKERD_STOP_S"); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
}

run() {
    local rc=0
    if ! recorded_pid >/dev/null && ! timeout 20 docker info >/dev/null 2>&1; then
        # This run starts the engine, so it stops it too, also after Ctrl-C.
        trap stop EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
    fi
    start || rc=$?
    ((rc == 0 || rc == UNAVAILABLE)) || return "$rc"
    "$@"
}

case ${1:-} in
start) start ;;
stop) stop ;;
run)
    shift
    (($#)) || {
        echo "usage: $0 run CMD [ARG...]" >&2
        exit 2
    }
    run "$@"
    ;;
*)
    echo "usage: $0 start|stop|run CMD [ARG...]" >&2
    exit 2
    ;;
esac
