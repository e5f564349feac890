#!/usr/bin/env bash
# A local multi-node Docker Swarm on this one machine, with Sluice deployed on it (`make swarm-up`,
# docs/swarm.md). Idempotent: a second run keeps what runs and fixes what does not.
#   1. the engine and the compose images (scripts/docker_engine.sh start, scripts/compose_images.sh);
#   2. `docker swarm init` on the local engine, advertised on the default bridge's gateway; the local
#      engine is the swarm's only manager (and node 1). A swarm this script did not create: FAIL;
#   3. a registry container (docker/swarm/registry.Dockerfile) on 127.0.0.1:SWARM_REGISTRY_PORT, which
#      every node forwards from its own 127.0.0.1: the worker and gateway images are pushed there and
#      pulled by every node under one name, 127.0.0.1:<port>/sluice-worker:dev;
#   4. NODES-1 Docker-in-Docker node containers (docker/swarm/node.Dockerfile) joined as workers, each
#      of which pulls those images;
#   5. the attachable overlay SWARM_NETWORK, demo.mar in MODEL_STORE, and the stack deploy/swarm/stack.yml;
#   6. the front: a plain HAProxy container on the overlay publishing the stack's ports on 127.0.0.1;
#   7. a wait (bounded) until the demo model answers through the front (scripts/compose_check.py).
# Environment (besides scripts/swarm_env.sh's and the SLUICE_* pass-through settings of the stack):
#   NODES           swarm nodes, the local engine included (default 3, at most 8)
#   GATEWAYS        gateway replicas, on any node (default 1, at most 8: the front's slots)
#   MODEL_STORE     host folder of .mar files (default ./model_store; created here, so it is yours)
#   SWARM_LAUNCHER  the manager's launcher (default swarm); `external` makes the manager start no worker,
#                   and this script then runs SWARM_DEMO_WORKERS (default NODES) demo workers itself as
#                   a service spread over the nodes
#   SWARM_BUILD=0   use the images as they are (they must exist) instead of building them from this tree
#   GATEWAY_PORT, GATEWAY_REST_PORT, GATEWAY_METRICS_PORT, MANAGER_PORT, MANAGER_REST_PORT
#                   the front's ports on 127.0.0.1 (7070, 8080, 8082, 7071, 8081)
# What it made is written to var/swarm/env (KEY=VALUE, for the tests); logs in var/swarm/.
set -euo pipefail

SLUICE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$SLUICE_ROOT"
# shellcheck source=scripts/swarm_env.sh
source scripts/swarm_env.sh
PYTHON=${PYTHON:-$SLUICE_ROOT/.venv/bin/python}
NODES=${NODES:-3}
GATEWAYS=${GATEWAYS:-1}
SWARM_LAUNCHER=${SWARM_LAUNCHER:-swarm}
SWARM_DEMO_WORKERS=${SWARM_DEMO_WORKERS:-$NODES}
NODE_READY_S=60
REGISTRY_READY_S=30
PULL_TIMEOUT_S=900
MANAGER_READY_S=120
CONVERGE_S=240
SERVE_TIMEOUT_S=300
KEY_FILE=/var/lib/sluice/key_file.json
DEMO_SERVICE=sluice-demo-workers
STARTED=$SECONDS
mkdir -p "$SWARM_STATE_DIR"

log() { printf '[swarm-up] %s\n' "$*" >&2; }
fail() {
    echo "FAIL: $*"
    exit 1
}
# Run "$@" bounded, its output into var/swarm/<log>.log; on failure show its tail and FAIL.
logged() {
    local name=$1 limit=$2
    shift 2
    if ! timeout "$limit" "$@" >"$SWARM_STATE_DIR/$name.log" 2>&1; then
        tail -20 "$SWARM_STATE_DIR/$name.log" >&2
        fail "$* (log: $SWARM_STATE_DIR/$name.log)"
    fi
}

[[ $NODES =~ ^[1-8]$ ]] || fail "NODES must be 1 to 8, not '$NODES'"
[[ $GATEWAYS =~ ^[1-8]$ ]] || fail "GATEWAYS must be 1 to 8 (the front's slots), not '$GATEWAYS'"
[[ $SWARM_DEMO_WORKERS =~ ^[0-9]+$ ]] || fail "SWARM_DEMO_WORKERS must be a number, not '$SWARM_DEMO_WORKERS'"
export MODEL_STORE=${MODEL_STORE:-$SLUICE_ROOT/model_store}
mkdir -p "$MODEL_STORE"
MODEL_STORE=$(cd "$MODEL_STORE" && pwd)

# 1. Engine and images ----------------------------------------------------------------------------
bash scripts/docker_engine.sh start || fail "no docker engine (scripts/docker_engine.sh start)"
# A swarm this script did not make is refused before anything is built. Ours: the local node carries
# the label, or its cluster id is the one recorded when it was created.
own_swarm() {
    local label cluster
    label=$(docker node inspect self --format "{{index .Spec.Labels \"$SWARM_LABEL\"}}" 2>/dev/null) || true
    [[ $label == manager ]] && return 0
    cluster=$(docker info --format '{{.Swarm.Cluster.ID}}' 2>/dev/null) || true
    [[ -n $cluster && -f $SWARM_STATE_DIR/swarm-id && $(<"$SWARM_STATE_DIR/swarm-id") == "$cluster" ]]
}
foreign_swarm="the engine is in a swarm that swarm-up did not create (its node has no label"
foreign_swarm+=" $SWARM_LABEL=manager); leave it yourself (docker swarm leave --force) or use another engine"
if [[ $(swarm_state) == active ]] && ! own_swarm; then fail "$foreign_swarm"; fi
if [[ ${SWARM_BUILD:-1} != 0 ]]; then
    bash scripts/compose_images.sh || fail "the compose images (scripts/compose_images.sh)"
fi
for image in "$REDIS_IMAGE" local/sluice-worker:dev local/sluice-manager:dev local/sluice-gateway:dev \
    local/sluice-haproxy:dev; do
    docker image inspect "$image" >/dev/null 2>&1 || fail "image $image is missing (make compose-images)"
done
log "building the node and registry images (logs: $SWARM_STATE_DIR/build-*.log)"
logged build-node 900 docker build --force-rm --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    -f docker/swarm/node.Dockerfile -t "$SWARM_NODE_IMAGE" docker/swarm
logged build-registry 900 docker build --force-rm --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    -f docker/swarm/registry.Dockerfile -t "$SWARM_REGISTRY_IMAGE" docker/swarm

# 2. The swarm ------------------------------------------------------------------------------------
# The default bridge's gateway: the node containers reach the manager there (with the engine's
# default address, nodes join but calls between nodes over the overlay time out).
if [[ -z ${SWARM_ADVERTISE_ADDR:-} ]]; then
    SWARM_ADVERTISE_ADDR=$(docker network inspect bridge --format '{{(index .IPAM.Config 0).Gateway}}' 2>/dev/null) ||
        true
    SWARM_ADVERTISE_ADDR=${SWARM_ADVERTISE_ADDR:-172.17.0.1}
fi
state=$(swarm_state)
case $state in
inactive)
    log "docker swarm init --advertise-addr $SWARM_ADVERTISE_ADDR"
    logged swarm-init 60 docker swarm init --advertise-addr "$SWARM_ADVERTISE_ADDR" \
        --listen-addr "$SWARM_ADVERTISE_ADDR:2377"
    docker info --format '{{.Swarm.Cluster.ID}}' >"$SWARM_STATE_DIR/swarm-id"
    ;;
active)
    own_swarm || fail "$foreign_swarm"
    [[ $(docker info --format '{{.Swarm.ControlAvailable}}') == true ]] || fail "the local engine is not the swarm's manager"
    ;;
*) fail "the engine's swarm state is '$state' (docker info); run make swarm-down" ;;
esac
manager_node=$(docker info --format '{{.Swarm.NodeID}}')
manager_name=$(docker node inspect self --format '{{.Description.Hostname}}')
timeout 20 docker node update --label-add "$SWARM_LABEL=manager" --label-add "io.sluice.node=$manager_name" \
    "$manager_node" >/dev/null
join_token=$(docker swarm join-token -q worker)

# 3. The registry (before the nodes: they forward to its address) -----------------------------------
registry_running=$(docker inspect -f '{{.State.Running}}' "$SWARM_REGISTRY_CONTAINER" 2>/dev/null) || true
if [[ -z $registry_running ]]; then
    log "starting the registry on 127.0.0.1:$SWARM_REGISTRY_PORT"
    docker volume create --label "$SWARM_LABEL=registry" "$SWARM_REGISTRY_VOLUME" >/dev/null
    logged registry-run 60 docker run -d --name "$SWARM_REGISTRY_CONTAINER" --label "$SWARM_LABEL=registry" \
        --init --restart unless-stopped --read-only --cap-drop ALL --security-opt no-new-privileges \
        -p "127.0.0.1:$SWARM_REGISTRY_PORT:5000" -v "$SWARM_REGISTRY_VOLUME:/var/lib/docker-registry" \
        "$SWARM_REGISTRY_IMAGE"
elif [[ $registry_running != true ]]; then
    logged registry-start 60 docker start "$SWARM_REGISTRY_CONTAINER"
fi
deadline=$((SECONDS + REGISTRY_READY_S))
until curl -fs -m 2 -o /dev/null "http://$SWARM_REGISTRY/v2/"; do
    ((SECONDS < deadline)) || fail "the registry does not answer on $SWARM_REGISTRY (docker logs $SWARM_REGISTRY_CONTAINER)"
    sleep 1
done
registry_ip=$(docker inspect -f '{{.NetworkSettings.Networks.bridge.IPAddress}}' "$SWARM_REGISTRY_CONTAINER")
[[ -n $registry_ip ]] || fail "the registry container has no address on the default bridge"

# Push what runs on every node: workers (the manager's services) and gateways (replicated on any
# node). The manager, Redis and the API filter stay on the manager node, under their local names.
SLUICE_WORKER_IMAGE=$SWARM_REGISTRY/sluice-worker:dev
SWARM_GATEWAY_IMAGE=$SWARM_REGISTRY/sluice-gateway:dev
export SLUICE_WORKER_IMAGE SWARM_GATEWAY_IMAGE
log "pushing $SLUICE_WORKER_IMAGE and $SWARM_GATEWAY_IMAGE (log: $SWARM_STATE_DIR/push.log)"
: >"$SWARM_STATE_DIR/push.log"
for pair in "local/sluice-worker:dev $SLUICE_WORKER_IMAGE" "local/sluice-gateway:dev $SWARM_GATEWAY_IMAGE"; do
    read -r source target <<<"$pair"
    docker tag "$source" "$target"
    if ! timeout "$PULL_TIMEOUT_S" docker push "$target" >>"$SWARM_STATE_DIR/push.log" 2>&1; then
        tail -20 "$SWARM_STATE_DIR/push.log" >&2
        fail "docker push $target (log: $SWARM_STATE_DIR/push.log)"
    fi
done

# 4. The nodes ------------------------------------------------------------------------------------
node_docker() {
    local node=$1
    shift
    timeout "$SWARM_CALL_TIMEOUT_S" docker exec "$node" docker "$@"
}

start_node() {
    local node=$1 running
    running=$(docker inspect -f '{{.State.Running}}' "$node" 2>/dev/null) || true
    if [[ -z $running ]]; then
        log "starting node container $node"
        docker volume create --label "$SWARM_LABEL=node" "$node-docker" >/dev/null
        # Not --privileged (the engine's capability set lacks CAP_SYS_RESOURCE): every other capability,
        # unconfined profiles, every device, and the host's cgroups for the node's own containers.
        logged "run-$node" 60 docker run -d --name "$node" --hostname "$node" --label "$SWARM_LABEL=node" \
            --init --restart unless-stopped \
            --cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined \
            --security-opt apparmor=unconfined --security-opt systempaths=unconfined \
            --device-cgroup-rule 'a *:* rwm' -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
            -v "$node-docker:/var/lib/docker" --add-host "sluice-registry:$registry_ip" \
            -e "SLUICE_REGISTRY_PORT=$SWARM_REGISTRY_PORT" "$SWARM_NODE_IMAGE"
    elif [[ $running != true ]]; then
        logged "start-$node" 60 docker start "$node"
    fi
}

# Wait for the node's engine, point its forwarder at the registry's current address, join the swarm.
join_node() {
    local node=$1 deadline=$((SECONDS + NODE_READY_S)) state node_id
    until node_docker "$node" info >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "node $node: its dockerd does not answer (docker logs $node)"
        sleep 1
    done
    # A restarted registry may have a new address: the forwarder resolves the name per connection.
    docker exec "$node" sh -c "awk '\$2 != \"sluice-registry\"' /etc/hosts >/tmp/hosts &&
        echo '$registry_ip sluice-registry' >>/tmp/hosts && cat /tmp/hosts >/etc/hosts && rm /tmp/hosts"
    state=$(node_docker "$node" info --format '{{.Swarm.LocalNodeState}}')
    node_id=$(node_docker "$node" info --format '{{.Swarm.NodeID}}')
    if [[ $state == active ]] && docker node inspect "$node_id" >/dev/null 2>&1; then
        :
    else
        [[ $state == inactive ]] || logged "leave-$node" 60 docker exec "$node" docker swarm leave --force
        log "node $node joins the swarm"
        logged "join-$node" 90 docker exec "$node" docker swarm join --token "$join_token" \
            "$SWARM_ADVERTISE_ADDR:2377"
        node_id=$(node_docker "$node" info --format '{{.Swarm.NodeID}}')
    fi
    timeout 20 docker node update --label-add "$SWARM_LABEL=node" --label-add "io.sluice.node=$node" \
        "$node_id" >/dev/null
    # Entries of earlier containers of this name (recreated: a new node id) are down for good.
    docker node ls --format '{{.ID}} {{.Hostname}} {{.Status}}' | while read -r id host status; do
        if [[ $host == "$node" && $id != "$node_id" && $status != Ready ]]; then
            timeout 20 docker node rm --force "$id" >/dev/null || true
        fi
    done
}

nodes=()
for n in $(seq 2 "$NODES"); do nodes+=("$SWARM_NODE_PREFIX$n"); done
# Nodes of an earlier, larger swarm-up: drained, removed from the swarm, their containers removed.
for node in $(swarm_node_containers); do
    [[ " ${nodes[*]} " == *" $node "* ]] && continue
    log "removing node $node (NODES=$NODES)"
    docker exec "$node" timeout 20 docker swarm leave --force >/dev/null 2>&1 || true
    docker rm -f "$node" >/dev/null
    docker volume rm "$node-docker" >/dev/null 2>&1 || true
    docker node ls --format '{{.ID}} {{.Hostname}}' | while read -r id host; do
        if [[ $host == "$node" ]]; then timeout 20 docker node rm --force "$id" >/dev/null || true; fi
    done
done
for node in "${nodes[@]}"; do start_node "$node"; done
for node in "${nodes[@]}"; do join_node "$node"; done

# Every node pulls the images now (checks the registry path, and spares the first worker the wait).
pids=()
for node in "${nodes[@]}"; do
    (
        for image in "$SLUICE_WORKER_IMAGE" "$SWARM_GATEWAY_IMAGE"; do
            timeout "$PULL_TIMEOUT_S" docker exec "$node" docker pull -q "$image" || exit 1
        done
    ) >"$SWARM_STATE_DIR/pull-$node.log" 2>&1 &
    pids+=($!)
done
if ((${#nodes[@]})); then log "nodes ${nodes[*]} pull the images (logs: $SWARM_STATE_DIR/pull-*.log)"; fi
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || {
        tail -5 "$SWARM_STATE_DIR/pull-${nodes[$i]}.log" >&2
        fail "node ${nodes[$i]} cannot pull the images from $SWARM_REGISTRY"
    }
done
deadline=$((SECONDS + NODE_READY_S))
until [[ $(docker node ls --filter role=worker --format '{{.Status}}' | grep -c '^Ready$') -ge ${#nodes[@]} ]]; do
    ((SECONDS < deadline)) || fail "not every node is Ready (docker node ls)"
    sleep 1
done

# 5. The overlay, the demo archive, the stack ------------------------------------------------------
driver=$(docker network inspect -f '{{.Driver}} {{.Attachable}}' "$SWARM_NETWORK" 2>/dev/null) || true
if [[ -z $driver ]]; then
    logged network-create 60 docker network create --driver overlay --attachable \
        --label "$SWARM_LABEL=network" "$SWARM_NETWORK"
elif [[ $driver != "overlay true" ]]; then
    fail "network $SWARM_NETWORK exists and is not an attachable overlay ($driver)"
fi

if [[ -z ${SLUICE_LOAD_MODELS+set} || ${SLUICE_LOAD_MODELS} == *demo* ]]; then
    # As compose's one-shot demo-model: root, to write into a host folder whatever its owner.
    logged demo-model 120 docker run --rm --init --user root --cap-drop ALL --cap-add CHOWN \
        --cap-add DAC_OVERRIDE -v "$MODEL_STORE:/models" local/sluice-worker:dev sh -c \
        'python -m sluice_worker.demo_model /models && chown --reference=/models /models/demo.mar'
fi

export SWARM_LAUNCHER GATEWAYS
log "deploying stack $SWARM_STACK (launcher $SWARM_LAUNCHER, $GATEWAYS gateway(s), model store $MODEL_STORE)"
logged deploy 180 docker stack deploy --resolve-image never -c deploy/swarm/stack.yml "$SWARM_STACK"

if [[ $SWARM_LAUNCHER == external ]]; then
    # No launcher starts workers: demo workers as one service spread over the nodes, as the swarm
    # launcher would place them (the worker finds the model's record in Redis and fetches the archive).
    if docker service inspect "$DEMO_SERVICE" >/dev/null 2>&1; then
        logged demo-workers 120 docker service update --detach --replicas "$SWARM_DEMO_WORKERS" \
            --image "$SLUICE_WORKER_IMAGE" "$DEMO_SERVICE"
    else
        log "starting $SWARM_DEMO_WORKERS demo worker(s) as service $DEMO_SERVICE (SWARM_LAUNCHER=external)"
        logged demo-workers 120 docker service create --detach --name "$DEMO_SERVICE" \
            --replicas "$SWARM_DEMO_WORKERS" --env SLUICE_MODEL_NAME=demo --env SLUICE_MODEL_VERSION=1.0 \
            --label io.sluice.model=demo --network "$SWARM_NETWORK" --endpoint-mode dnsrr \
            --env SLUICE_REDIS_URL=redis://redis:6379/0 --env SLUICE_LOG_FORMAT=json \
            --env SLUICE_MODEL_CACHE_DIR=/var/cache/sluice --read-only --cap-drop ALL \
            --mount type=volume,source=sluice-model-cache,target=/var/cache/sluice \
            --mount type=tmpfs,target=/tmp --mount type=tmpfs,target=/home/sluice \
            --placement-pref spread=node.id "$SLUICE_WORKER_IMAGE" python -m sluice_worker
    fi
elif docker service inspect "$DEMO_SERVICE" >/dev/null 2>&1; then
    # Left by an earlier SWARM_LAUNCHER=external run: gone before the check, which they must not pass.
    timeout 60 docker service rm "$DEMO_SERVICE" >/dev/null
    demo_tasks() {
        local node filter=(ps -q --filter "label=com.docker.swarm.service.name=$DEMO_SERVICE")
        docker "${filter[@]}"
        for node in "${nodes[@]}"; do node_docker "$node" "${filter[@]}" || true; done
    }
    deadline=$((SECONDS + CONVERGE_S))
    while [[ -n $(demo_tasks) ]]; do
        ((SECONDS < deadline)) || fail "the tasks of $DEMO_SERVICE are still there after ${CONVERGE_S}s"
        sleep 1
    done
fi

# Every service of the stack (and the demo workers) runs its replicas and no update is under way:
# a second swarm-up that changed a service must not check against the tasks being replaced.
converged() {
    local replicas update
    while read -r replicas; do
        [[ $replicas =~ ^([0-9]+)/([0-9]+) && ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]] || return 1
    done < <(docker service ls --filter "label=com.docker.stack.namespace=$SWARM_STACK" --format '{{.Replicas}}'
        docker service ls --filter "name=$DEMO_SERVICE" --format '{{.Replicas}}')
    update=$(docker service ls -q --filter "label=com.docker.stack.namespace=$SWARM_STACK" |
        xargs -r docker service inspect -f '{{.Spec.Name}} {{if .UpdateStatus}}{{.UpdateStatus.State}}{{end}}')
    [[ $update != *paused* && $update != *rollback* ]] || fail "a service update failed: ${update//$'\n'/, }"
    [[ $update != *updating* ]]
}
log "waiting for the services to run their replicas (docker service ls)"
deadline=$((SECONDS + CONVERGE_S))
until converged; do
    if ((SECONDS >= deadline)); then
        docker service ls >&2
        fail "the services do not run their replicas after ${CONVERGE_S}s (docker service ps <service>)"
    fi
    sleep 2
done

# 6. The front --------------------------------------------------------------------------------------
ports=()
for pair in "GATEWAY_PORT 7070" "GATEWAY_REST_PORT 8080" "GATEWAY_METRICS_PORT 8082" "MANAGER_PORT 7071" \
    "MANAGER_REST_PORT 8081"; do
    read -r name port <<<"$pair"
    ports+=(-p "127.0.0.1:${!name:-$port}:$port")
done
# Recreated only when what it is made of changed (ports, configuration, image, network).
front_config=$(printf '%s\n' "${ports[*]}" "$SWARM_NETWORK" "$(docker image inspect -f '{{.Id}}' local/sluice-haproxy:dev)" |
    cat - docker/swarm/front.cfg | sha256sum | cut -c1-16)
current=$(docker inspect -f "{{.State.Running}} {{index .Config.Labels \"$SWARM_LABEL.config\"}}" \
    "$SWARM_FRONT_CONTAINER" 2>/dev/null) || true
if [[ $current != "true $front_config" ]]; then
    [[ -z $current ]] || docker rm -f "$SWARM_FRONT_CONTAINER" >/dev/null
    log "starting the front $SWARM_FRONT_CONTAINER on $SWARM_NETWORK"
    logged front 60 docker run -d --name "$SWARM_FRONT_CONTAINER" --label "$SWARM_LABEL=front" \
        --label "$SWARM_LABEL.config=$front_config" --init --restart unless-stopped --read-only \
        --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges --network "$SWARM_NETWORK" "${ports[@]}" \
        -v "$SLUICE_ROOT/docker/swarm/front.cfg:/etc/haproxy/front.cfg:ro" local/sluice-haproxy:dev \
        haproxy -db -f /etc/haproxy/lb.cfg -f /etc/haproxy/front.cfg
fi

cat >"$SWARM_STATE_DIR/env" <<EOF
SWARM_STACK=$SWARM_STACK
SWARM_NETWORK=$SWARM_NETWORK
SWARM_REGISTRY=$SWARM_REGISTRY
SLUICE_WORKER_IMAGE=$SLUICE_WORKER_IMAGE
SWARM_GATEWAY_IMAGE=$SWARM_GATEWAY_IMAGE
SWARM_LAUNCHER=$SWARM_LAUNCHER
SWARM_MANAGER_NODE=$manager_name
SWARM_NODE_CONTAINERS="${nodes[*]}"
SWARM_FRONT_CONTAINER=$SWARM_FRONT_CONTAINER
NODES=$NODES
GATEWAYS=$GATEWAYS
MODEL_STORE=$MODEL_STORE
GATEWAY_PORT=${GATEWAY_PORT:-7070}
GATEWAY_REST_PORT=${GATEWAY_REST_PORT:-8080}
GATEWAY_METRICS_PORT=${GATEWAY_METRICS_PORT:-8082}
MANAGER_PORT=${MANAGER_PORT:-7071}
MANAGER_REST_PORT=${MANAGER_REST_PORT:-8081}
EOF

# 7. Serving ----------------------------------------------------------------------------------------
manager_container() {
    docker ps -q --filter "label=com.docker.swarm.service.name=${SWARM_STACK}_manager" | head -1
}
inference_key() {
    local deadline=$((SECONDS + MANAGER_READY_S)) container
    while ((SECONDS < deadline)); do
        container=$(manager_container)
        if [[ -n $container ]] && timeout 20 docker exec "$container" python -c \
            "import json; print(json.load(open('$KEY_FILE'))['inference']['key'])" 2>/dev/null; then
            return 0
        fi
        sleep 1
    done
    return 1
}

grpc_port=${GATEWAY_PORT:-7070}
if [[ -z ${SLUICE_LOAD_MODELS+set} || ${SLUICE_LOAD_MODELS} == *demo* ]]; then
    token=""
    if [[ ${SLUICE_DISABLE_TOKEN_AUTHORIZATION:-false} != true ]]; then
        token=$(inference_key) || fail "no key file $KEY_FILE in the manager's task container" \
            "(docker service ps ${SWARM_STACK}_manager; docker service logs ${SWARM_STACK}_manager)"
    fi
    log "waiting for the demo model to answer on 127.0.0.1:$grpc_port"
    if ! timeout $((SERVE_TIMEOUT_S + 30)) "$PYTHON" scripts/compose_check.py \
        --address "127.0.0.1:$grpc_port" --timeout-s "$SERVE_TIMEOUT_S" --token "$token" >&2; then
        fail "the swarm does not serve the demo model (docker service logs ${SWARM_STACK}_manager)"
    fi
fi
# The management API answers through the front (any HTTP status: without a key it is 401).
management_rest=http://127.0.0.1:${MANAGER_REST_PORT:-8081}/models
deadline=$((SECONDS + MANAGER_READY_S))
until [[ $(curl -s -m 5 -o /dev/null -w '%{http_code}' "$management_rest") =~ ^(200|401)$ ]]; do
    ((SECONDS < deadline)) || fail "the management API does not answer on $management_rest"
    sleep 1
done

cat <<EOF
Sluice is up on a $NODES-node swarm (stack $SWARM_STACK, $((SECONDS - STARTED)) s):
  nodes            $manager_name (manager)${nodes[*]:+, ${nodes[*]}}   (docker node ls)
  inference gRPC   127.0.0.1:$grpc_port     (TorchServe and KServe v2)
  inference REST   http://127.0.0.1:${GATEWAY_REST_PORT:-8080}
  metrics          http://127.0.0.1:${GATEWAY_METRICS_PORT:-8082}/gateways/<1..$GATEWAYS>/metrics
  management       127.0.0.1:${MANAGER_PORT:-7071} (gRPC), http://127.0.0.1:${MANAGER_REST_PORT:-8081} (REST)
  worker image     $SLUICE_WORKER_IMAGE   (launcher $SWARM_LAUNCHER, network $SWARM_NETWORK)
  model store      $MODEL_STORE
  keys             docker exec \$(docker ps -q -f label=com.docker.swarm.service.name=${SWARM_STACK}_manager) cat $KEY_FILE
  down             make swarm-down
EOF
