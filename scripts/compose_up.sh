#!/usr/bin/env bash
# Start the compose stack (`make compose-up`) on a running engine whose images are built
# (scripts/docker_engine.sh start, scripts/compose_images.sh), then wait (bounded) until it serves:
# a gateway healthy behind the load balancer and, when the demo model is a startup model, a prediction.
# Environment (besides the stack's own variables, docs/containers.md):
#   GATEWAYS      gateway replicas behind the published port (default 1, at most 8)
#   MODEL_STORE   the host folder of .mar files (default ./model_store; created here, so it is yours)
#   GPU=1         with docker-compose.gpu.yml (the CUDA worker image and SLUICE_NUMBER_OF_GPU)
#   HA=1, TLS=1   with docker-compose.ha.yml, docker-compose.tls.yml (scripts/compose_env.sh)
set -euo pipefail

SLUICE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$SLUICE_ROOT"
# shellcheck source=scripts/compose_env.sh
source scripts/compose_env.sh
PYTHON=${PYTHON:-$SLUICE_ROOT/.venv/bin/python}
GATEWAYS=${GATEWAYS:-1}
UP_TIMEOUT_S=300
SERVE_TIMEOUT_S=240
STATE_DIR=$SLUICE_ROOT/var/compose
KEY_FILE=/var/lib/sluice/key_file.json
[[ ${GPU:-0} == 1 ]] && export COMPOSE_FILES="${COMPOSE_FILES:-} docker-compose.gpu.yml"
mkdir -p "$STATE_DIR"

log() { printf '[compose-up] %s\n' "$*" >&2; }

if ! [[ $GATEWAYS =~ ^[1-8]$ ]]; then
    echo "FAIL: GATEWAYS must be 1 to 8 (the load balancer's slots), not '$GATEWAYS'"
    exit 2
fi
export MODEL_STORE=${MODEL_STORE:-$SLUICE_ROOT/model_store}
mkdir -p "$MODEL_STORE"

log "starting stack $COMPOSE_PROJECT_NAME with $GATEWAYS gateway(s), model store $MODEL_STORE"
if ! COMPOSE_TIMEOUT_S=$UP_TIMEOUT_S compose up -d --no-build --scale "gateway=$GATEWAYS" >"$STATE_DIR/up.log" 2>&1; then
    tail -20 "$STATE_DIR/up.log" >&2
    echo "FAIL: compose up (log: $STATE_DIR/up.log)"
    exit 1
fi

# The inference key from the key file the manager writes (none when token authorization is off).
inference_key() {
    local attempt
    for attempt in $(seq 60); do
        if COMPOSE_TIMEOUT_S=20 compose exec -T manager python -c \
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
        token=$(inference_key) || {
            echo "FAIL: no key file $KEY_FILE in the manager container"
            exit 1
        }
    fi
    log "waiting for the demo model to answer on 127.0.0.1:$grpc_port"
    tls_args=()
    [[ ${TLS:-0} == 1 ]] && tls_args=(--ca "${TLS_DIR:-$SLUICE_ROOT/tls}/cert.pem")
    if ! timeout $((SERVE_TIMEOUT_S + 30)) "$PYTHON" scripts/compose_check.py \
        --address "127.0.0.1:$grpc_port" --timeout-s "$SERVE_TIMEOUT_S" --token "$token" "${tls_args[@]}" >&2; then
        echo "FAIL: the stack does not serve the demo model (compose logs manager)"
        exit 1
    fi
fi

scheme=http
[[ ${TLS:-0} == 1 ]] && scheme=https
cat <<EOF
Sluice is up (project $COMPOSE_PROJECT_NAME):
  inference gRPC   127.0.0.1:$grpc_port     (TorchServe and KServe v2$([[ $scheme == https ]] && echo ", TLS"))
  inference REST   $scheme://127.0.0.1:${GATEWAY_REST_PORT:-8080}
  metrics          http://127.0.0.1:${GATEWAY_METRICS_PORT:-8082}/gateways/<1..$GATEWAYS>/metrics
  management       127.0.0.1:${MANAGER_PORT:-7071} (gRPC), $scheme://127.0.0.1:${MANAGER_REST_PORT:-8081} (REST)
  model store      $MODEL_STORE
  keys             docker compose -p $COMPOSE_PROJECT_NAME exec manager cat $KEY_FILE
  down             make compose-down
EOF
