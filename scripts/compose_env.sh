# Sourced (after setting SLUICE_ROOT) by the compose scripts (compose_images.sh, compose_up.sh,
# compose_down.sh, test_compose.sh, gpu_check.sh): one set of defaults for building and running the
# stack, also on a machine without a registry.
#   BASE_IMAGE   base of every image (default local/base:bookworm, built by scripts/build_base_image.sh;
#                python:3.11-slim where a registry is reachable)
#   REDIS_IMAGE  image of the redis service (default: BASE_IMAGE when it is local/base:bookworm, else redis:7)
#   HA=1         with docker-compose.ha.yml (Redis Sentinel: a master, two replicas, three Sentinels)
#   TLS=1        with docker-compose.tls.yml (TLS on the published ports; TLS_DIR holds cert.pem, key.pem)
#   COMPOSE_PROJECT_NAME  the stack's name (default: what compose itself takes, the repository folder's
#                name, so `make compose-down` and a plain `docker compose` agree)
# shellcheck shell=bash
export BASE_IMAGE=${BASE_IMAGE:-local/base:bookworm}
if [[ -z ${REDIS_IMAGE:-} ]]; then
    if [[ $BASE_IMAGE == local/base:bookworm ]]; then REDIS_IMAGE=$BASE_IMAGE; else REDIS_IMAGE=redis:7; fi
fi
export REDIS_IMAGE
for flag in HA TLS; do
    file="docker-compose.$(tr '[:upper:]' '[:lower:]' <<<"$flag").yml"
    if [[ ${!flag:-0} == 1 && " ${COMPOSE_FILES:-} " != *" $file "* ]]; then
        export COMPOSE_FILES="${COMPOSE_FILES:-} $file"
    fi
done
if [[ -z ${COMPOSE_PROJECT_NAME:-} ]]; then
    COMPOSE_PROJECT_NAME=$(basename "$SLUICE_ROOT" | tr '[:upper:]' '[:lower:]' | tr -cd 'a-z0-9_-')
fi
export COMPOSE_PROJECT_NAME
# The legacy builder: BuildKit needs buildx, which Debian's packages do not have.
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0

# `docker-compose` (v1, Debian's) or `docker compose` (v2), with the repository's compose file(s):
# COMPOSE_FILES (space-separated) adds override files such as docker-compose.gpu.yml; every call is
# bounded by COMPOSE_TIMEOUT_S (default 600).
compose() {
    local files=(-f "$SLUICE_ROOT/docker-compose.yml") extra program=(docker compose)
    for extra in ${COMPOSE_FILES:-}; do files+=(-f "$SLUICE_ROOT/$extra"); done
    command -v docker-compose >/dev/null && program=(docker-compose)
    timeout "${COMPOSE_TIMEOUT_S:-600}" "${program[@]}" "${files[@]}" "$@"
}
