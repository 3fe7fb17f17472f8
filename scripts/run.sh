#!/usr/bin/env bash
# The main job: install dependencies, build, write the default model (the tiny preset with
# random weights) if it is absent, and serve it on http://127.0.0.1:8000 (Ctrl-C stops it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DMLASERVE_TESTS=OFF
model=${MLASERVE_MODEL:-models/default}
if [ ! -f "$model/config.json" ]; then
  build/mlaserve make-model --preset tiny --dtype bf16 --seed 0 "$model"
fi
echo "try: curl http://127.0.0.1:${PORT:-8000}/v1/chat/completions -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":32}'"
exec build/mlaserve serve --model "$model" --port "${PORT:-8000}" --kv-cache-gb "${KV_CACHE_GB:-1}"
