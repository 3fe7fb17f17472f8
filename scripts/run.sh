#!/usr/bin/env bash
# The main job: install dependencies, build, and serve the default model (models/kjv, the
# project's own DeepSeek-V3 trained on the King James Bible: docs/models.md) on
# http://127.0.0.1:8000 (Ctrl-C stops it). MLASERVE_MODEL serves another model directory.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh --target mlaserve -DMLASERVE_TESTS=OFF
model=${MLASERVE_MODEL:-models/kjv}
echo "try: curl http://127.0.0.1:${PORT:-8000}/v1/completions -d '{\"prompt\":\"And God said\",\"max_tokens\":48}'"
exec build/mlaserve serve --model "$model" --port "${PORT:-8000}" --kv-cache-gb "${KV_CACHE_GB:-1}"
