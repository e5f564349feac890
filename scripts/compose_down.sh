#!/usr/bin/env bash
# Take the compose stack down, leaving no container and no network behind (`make compose-down`).
# `compose down` alone leaves the worker containers: the manager starts them through the Engine API
# and they outlive it (a restarted manager adopts them). So:
#   1. read the stack's cluster id from its Redis (SLUICE_CLUSTER_ID when set), while Redis runs;
#   2. stop the manager, so that it replaces no worker that disappears;
#   3. remove the worker containers: labelled io.sluice.cluster=<that id>, and any container labelled
#      io.sluice.cluster that is attached to one of the stack's networks;
#   4. compose down --remove-orphans; with REMOVE_VOLUMES=1 also the volumes (registry, keys, model cache).
# Exit 0 when nothing of the stack is left. Environment: scripts/compose_env.sh (COMPOSE_PROJECT_NAME).
set -euo pipefail

SLUICE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$SLUICE_ROOT"
# shellcheck source=scripts/compose_env.sh
source scripts/compose_env.sh
PROJECT=$COMPOSE_PROJECT_NAME
CLUSTER_KEY=sluice:manager:cluster-id

log() { printf '[compose-down] %s\n' "$*" >&2; }

timeout 20 docker info >/dev/null 2>&1 || {
    log "no docker engine answers: nothing to take down"
    exit 0
}

cluster=${SLUICE_CLUSTER_ID:-}
if [[ -z $cluster && -n $(COMPOSE_TIMEOUT_S=30 compose ps -q redis 2>/dev/null) ]]; then
    cluster=$(COMPOSE_TIMEOUT_S=20 compose exec -T redis redis-cli --raw GET "$CLUSTER_KEY" 2>/dev/null | tr -d '\r') || true
fi

COMPOSE_TIMEOUT_S=60 compose stop manager >/dev/null 2>&1 || true

workers=()
if [[ -n $cluster ]]; then
    mapfile -t workers < <(docker ps -aq --filter "label=io.sluice.cluster=$cluster")
fi
mapfile -t networks < <(docker network ls -q --filter "label=com.docker.compose.project=$PROJECT")
for network in "${networks[@]}"; do
    mapfile -t -O "${#workers[@]}" workers < <(docker ps -aq --filter label=io.sluice.cluster --filter "network=$network")
done
if ((${#workers[@]})); then
    mapfile -t workers < <(printf '%s\n' "${workers[@]}" | sort -u)
    log "removing ${#workers[@]} worker container(s) of cluster ${cluster:-?}"
    docker rm -f "${workers[@]}" >/dev/null
fi

down=(down --remove-orphans --timeout 20)
[[ ${REMOVE_VOLUMES:-0} == 1 ]] && down+=(--volumes)
COMPOSE_TIMEOUT_S=180 compose "${down[@]}" >&2

left=$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT")
left_networks=$(docker network ls -q --filter "label=com.docker.compose.project=$PROJECT")
if [[ -n $left || -n $left_networks ]]; then
    log "left behind: containers [${left//$'\n'/ }] networks [${left_networks//$'\n'/ }]"
    exit 1
fi
log "stack $PROJECT is down"
