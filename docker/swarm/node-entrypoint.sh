#!/bin/sh
# A swarm node's program (node.Dockerfile): forward 127.0.0.1:$SLUICE_REGISTRY_PORT to the registry
# container ($SLUICE_REGISTRY_HOST, an /etc/hosts entry swarm_up.sh keeps current), so that this node's
# engine pulls 127.0.0.1:<port>/<image> over plain HTTP like every other engine of the swarm, then run
# dockerd. Its containers' cgroups go under one parent named after the node, apart from the host's own.
set -eu
port=${SLUICE_REGISTRY_PORT:-5000}
host=${SLUICE_REGISTRY_HOST:-sluice-registry}
(
    while :; do
        socat "TCP-LISTEN:$port,bind=127.0.0.1,fork,reuseaddr" "TCP:$host:$port" || true
        sleep 1
    done
) &
# A node container killed and started again keeps its writable layer: a stale pid file whose pid now
# belongs to another process (the forwarder above) would stop dockerd from starting.
rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid
exec dockerd --cgroup-parent "/$(hostname)" "$@"
