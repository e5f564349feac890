#!/usr/bin/env bash
# Take the local swarm down (`make swarm-down`, docs/swarm.md), leaving nothing of it behind and the
# local engine out of swarm mode. Safe to run when nothing is up; every step is bounded.
#   1. the stack SWARM_STACK, and every service the manager created (labelled io.sluice.model or
#      io.sluice.cluster), then the wait until their tasks are gone;
#   2. the front, the node containers and their volumes, the registry and its volume;
#   3. the overlay network, the stack's volumes, the workers' model cache volume (unless a compose
#      stack's or in use), the pushed images' names on the local engine;
#   4. `docker swarm leave --force` and the docker_gwbridge network it leaves behind.
# A swarm swarm-up did not create is left alone (only this script's labelled containers go).
# Exit 0 when nothing is left. Environment: scripts/swarm_env.sh (SWARM_STACK, SWARM_NETWORK, ...).
set -euo pipefail

SLUICE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$SLUICE_ROOT"
# shellcheck source=scripts/swarm_env.sh
source scripts/swarm_env.sh
TASKS_GONE_S=60

log() { printf '[swarm-down] %s\n' "$*" >&2; }

timeout 20 docker info >/dev/null 2>&1 || {
    log "no docker engine answers: nothing to take down"
    exit 0
}

# Ours: the local node carries the label swarm_up.sh puts on it, or the recorded cluster id.
own_swarm() {
    local label cluster
    label=$(timeout 20 docker node inspect self --format "{{index .Spec.Labels \"$SWARM_LABEL\"}}" 2>/dev/null) ||
        true
    [[ $label == manager ]] && return 0
    cluster=$(timeout 20 docker info --format '{{.Swarm.Cluster.ID}}' 2>/dev/null) || true
    [[ -n $cluster && -f $SWARM_STATE_DIR/swarm-id && $(<"$SWARM_STATE_DIR/swarm-id") == "$cluster" ]]
}

ours=0
state=$(swarm_state)
if [[ $state != inactive ]] && own_swarm; then
    ours=1
elif [[ $state != inactive ]]; then
    log "the engine's swarm ($state) is not one swarm-up created: left as it is"
fi

# 1. Services: the stack's, then the manager's workers (which outlive the manager).
if ((ours)); then
    if [[ -n $(docker stack ls --format '{{.Name}}' 2>/dev/null | grep -x "$SWARM_STACK") ]]; then
        log "removing stack $SWARM_STACK"
        timeout "$SWARM_CALL_TIMEOUT_S" docker stack rm "$SWARM_STACK" >&2 || true
    fi
    mapfile -t services < <({
        docker service ls -q --filter label=io.sluice.model
        docker service ls -q --filter label=io.sluice.cluster
    } | sort -u)
    if ((${#services[@]})); then
        log "removing ${#services[@]} worker service(s)"
        timeout "$SWARM_CALL_TIMEOUT_S" docker service rm "${services[@]}" >/dev/null || true
    fi
    deadline=$((SECONDS + TASKS_GONE_S))
    while [[ -n $(docker ps -aq --filter "label=com.docker.stack.namespace=$SWARM_STACK") ||
        -n $(docker ps -aq --filter label=com.docker.swarm.service.id --filter "network=$SWARM_NETWORK") ]]; do
        if ((SECONDS >= deadline)); then
            log "task containers still there after ${TASKS_GONE_S}s: removing them"
            docker ps -aq --filter label=com.docker.swarm.service.id | xargs -r docker rm -f >/dev/null || true
            break
        fi
        sleep 1
    done
fi

# 2. The containers swarm_up.sh ran: the front, the nodes (their engines leave first, so the manager
# does not wait for them), the registry.
docker rm -f "$SWARM_FRONT_CONTAINER" >/dev/null 2>&1 || true
mapfile -t nodes < <(swarm_node_containers)
for node in "${nodes[@]}"; do
    timeout 20 docker exec "$node" docker swarm leave --force >/dev/null 2>&1 || true
done
if ((${#nodes[@]})); then
    log "removing node containers ${nodes[*]}"
    timeout "$SWARM_CALL_TIMEOUT_S" docker rm -f -v "${nodes[@]}" >/dev/null
fi
docker rm -f -v "$SWARM_REGISTRY_CONTAINER" >/dev/null 2>&1 || true
mapfile -t volumes < <(docker volume ls -q --filter "label=$SWARM_LABEL")
if ((${#volumes[@]})); then
    docker volume rm "${volumes[@]}" >/dev/null
fi
# The pushed images' names on this engine: tags, and digests left once a tag is gone.
mapfile -t tags < <(docker images --digests --format '{{.Repository}} {{.Tag}} {{.Digest}}' |
    awk -v prefix="$SWARM_REGISTRY/sluice-" 'index($1, prefix) == 1 {
        if ($2 != "<none>") print $1 ":" $2; else if ($3 != "<none>") print $1 "@" $3 }')
if ((${#tags[@]})); then
    docker rmi "${tags[@]}" >/dev/null || true
fi

# 3. The overlay and the stack's volumes (once no task uses them).
if ((ours)); then
    if docker network inspect "$SWARM_NETWORK" >/dev/null 2>&1; then
        deadline=$((SECONDS + TASKS_GONE_S))
        until timeout 20 docker network rm "$SWARM_NETWORK" >/dev/null 2>&1; do
            ((SECONDS < deadline)) || {
                log "network $SWARM_NETWORK could not be removed"
                break
            }
            sleep 1
        done
    fi
    mapfile -t volumes < <(docker volume ls -q --filter "label=com.docker.stack.namespace=$SWARM_STACK")
    if ((${#volumes[@]})); then
        docker volume rm "${volumes[@]}" >/dev/null || true
    fi
    # 4. Out of swarm mode; leave keeps docker_gwbridge (and, unseen by the API, lb_* files).
    log "docker swarm leave --force"
    timeout "$SWARM_CALL_TIMEOUT_S" docker swarm leave --force >/dev/null || true
    rm -f "$SWARM_STATE_DIR/swarm-id"
fi
# The workers' model cache on this engine, which their services created (content by digest, so only
# a cache): a compose stack's (its labels say so) or one in use stays.
cache=${SLUICE_MODEL_CACHE_VOLUME:-sluice-model-cache}
if docker volume inspect "$cache" >/dev/null 2>&1 &&
    [[ -z $(docker volume inspect -f '{{index .Labels "com.docker.compose.project"}}' "$cache") ]]; then
    docker volume rm "$cache" >/dev/null 2>&1 || true
fi
# Out of swarm mode (now, or already: an earlier teardown that stopped half-way), docker_gwbridge is
# a leftover.
if [[ $(swarm_state) == inactive ]] && docker network inspect docker_gwbridge >/dev/null 2>&1; then
    timeout 20 docker network rm docker_gwbridge >/dev/null || true
fi
rm -f "$SWARM_STATE_DIR/env"

left_containers=$(docker ps -aq --filter "label=$SWARM_LABEL")
left_networks="" left_state=inactive
if [[ $state == inactive ]] || ((ours)); then
    left_networks=$(docker network ls --format '{{.Name}}' | grep -xE "$SWARM_NETWORK|docker_gwbridge|ingress" || true)
    left_state=$(swarm_state)
fi
if [[ -n $left_containers || -n $left_networks || $left_state != inactive ]]; then
    log "left behind: containers [${left_containers//$'\n'/ }] networks [${left_networks//$'\n'/ }] swarm $left_state"
    exit 1
fi
if [[ $state != inactive ]] && ((!ours)); then
    log "nothing of swarm-up's is left (the engine's own swarm is left as it is)"
else
    log "the swarm is down"
fi
