# A swarm node for the local multi-node swarm (scripts/swarm_up.sh, docs/swarm.md): Docker in Docker on
# the local base image, with Debian's docker.io. It runs without --privileged (the engine cannot grant
# every capability here): swarm_up.sh starts it with the capabilities, device rule and cgroup mount
# dockerd needs, and its /var/lib/docker on a volume.
# Build from this folder:  docker build -f node.Dockerfile -t local/sluice-swarm-node:dev docker/swarm
ARG BASE_IMAGE=local/base:bookworm
FROM ${BASE_IMAGE}
# socat: the node's 127.0.0.1:<registry port> forwarded to the registry (node-entrypoint.sh).
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
    && apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io socat >/dev/null \
    && rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d
COPY node-entrypoint.sh /usr/local/bin/sluice-node
VOLUME /var/lib/docker
ENTRYPOINT ["/usr/local/bin/sluice-node"]
