# The local swarm's image registry (scripts/swarm_up.sh, docs/swarm.md): Debian's docker-registry
# (Distribution 2.8) on the local base image, since no registry image can be pulled here. Plain HTTP on
# 5000, blobs in /var/lib/docker-registry (a volume). Published on 127.0.0.1 only; the nodes reach it
# through their own forwarder.
# Build from this folder:  docker build -f registry.Dockerfile -t local/sluice-registry:dev docker/swarm
ARG BASE_IMAGE=local/base:bookworm
FROM ${BASE_IMAGE}
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
    && apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry >/dev/null \
    && rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d \
    && install -d -o docker-registry -g docker-registry /var/lib/docker-registry
COPY registry.yml /etc/docker/registry/config.yml
VOLUME /var/lib/docker-registry
USER docker-registry
EXPOSE 5000
CMD ["docker-registry", "serve", "/etc/docker/registry/config.yml"]
