#!/usr/bin/env bash
# The main job: install dependencies, build, write the default model (the tiny preset with
# random weights) if it is absent, and generate text from it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DMLASERVE_TESTS=OFF
model=${MLASERVE_MODEL:-models/default}
if [ ! -f "$model/config.json" ]; then
  build/mlaserve make-model --preset tiny --dtype bf16 --seed 0 "$model"
fi
build/mlaserve generate --model "$model" --chat --prompt "${PROMPT:-What does the planner answer?}" -n 48
echo
