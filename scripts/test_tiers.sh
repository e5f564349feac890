#!/usr/bin/env bash
# make test's tiers (an engine already started by scripts/docker_engine.sh, or none): the container
# images build in the background while the tiers that need no engine run, which hides most of a fresh
# machine's image build (debootstrap, the torch wheel, compose build: ~4 minutes) behind them.
#   1. tests/unit, tests/integration, tests/e2e      (no engine)
#   2. tests/compat, in its own process: it loads TorchServe's generated protos, which declare the
#      same protobuf packages as ours
#   3. tests/docker and the compose stack's fast checks, once the images are there (their tests skip
#      with the reason when no engine can run: compose_images.sh exits 3)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTEST=(.venv/bin/python -m pytest)
IMAGES_LOG=var/compose/images.log
mkdir -p var/compose

bash scripts/compose_images.sh >"$IMAGES_LOG" 2>&1 &
images=$!
trap 'kill "$images" 2>/dev/null || true' EXIT

"${PYTEST[@]}" tests/unit tests/integration tests/e2e
"${PYTEST[@]}" tests/compat

rc=0
wait "$images" || rc=$?
trap - EXIT
cat "$IMAGES_LOG"
((rc == 0 || rc == 3)) || exit "$rc"
"${PYTEST[@]}" tests/docker
"${PYTEST[@]}" -m compose tests/compose
