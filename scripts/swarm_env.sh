# Sourced (after setting SLUICE_ROOT) by scripts/swarm_up.sh and scripts/swarm_down.sh: the names of
# everything the local multi-node swarm is made of (docs/swarm.md), so that `down` finds what `up` made.
# On top of scripts/compose_env.sh (BASE_IMAGE, REDIS_IMAGE, the legacy builder).
#   SWARM_STACK          the stack's name (default sluice): services <stack>_redis, _manager, _gateway...
#   SWARM_NETWORK        the attachable overlay every Sluice service, worker and the front join
#                        (default sluice-swarm)
#   SWARM_REGISTRY_PORT  the local registry's port, on 127.0.0.1 of the engine and of every node (5000)
#   SWARM_ADVERTISE_ADDR the swarm manager's address (default: the default bridge's gateway, 172.17.0.1)
# shellcheck shell=bash
# shellcheck source=scripts/compose_env.sh
source "$SLUICE_ROOT/scripts/compose_env.sh"
export SWARM_STACK=${SWARM_STACK:-sluice}
export SWARM_NETWORK=${SWARM_NETWORK:-sluice-swarm}
export SWARM_REGISTRY_PORT=${SWARM_REGISTRY_PORT:-5000}
# The registry as every engine of the swarm names it: each node forwards its own 127.0.0.1 port to the
# registry container, and Docker pulls from 127.0.0.0/8 over plain HTTP without configuration.
export SWARM_REGISTRY=127.0.0.1:$SWARM_REGISTRY_PORT
export SWARM_STATE_DIR=$SLUICE_ROOT/var/swarm
# What swarm_up.sh labels and names: the node containers and their volumes (sluice-node-<n>, n >= 2;
# node 1 is the local engine), the registry, the front.
SWARM_NODE_PREFIX=sluice-node-
SWARM_NODE_IMAGE=local/sluice-swarm-node:dev
SWARM_REGISTRY_IMAGE=local/sluice-registry:dev
SWARM_REGISTRY_CONTAINER=sluice-registry
SWARM_REGISTRY_VOLUME=sluice-registry-data
SWARM_FRONT_CONTAINER=sluice-front
# Every container and volume swarm_up.sh creates outside the stack carries this label.
SWARM_LABEL=io.sluice.swarm
# Calls to the engine that may hang (a node that stopped answering) are bounded by this.
SWARM_CALL_TIMEOUT_S=${SWARM_CALL_TIMEOUT_S:-60}

# The swarm's state on the local engine: inactive, pending, active, error or locked.
swarm_state() {
    timeout 20 docker info --format '{{.Swarm.LocalNodeState}}' 2>/dev/null || echo unknown
}

# The node containers of a previous swarm-up, by name.
swarm_node_containers() {
    docker ps -a --filter "label=$SWARM_LABEL=node" --format '{{.Names}}' | sort
}
