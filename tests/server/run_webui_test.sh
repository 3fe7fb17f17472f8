#!/usr/bin/env bash
# Installs playwright-core into WORK_DIR (once; it downloads no browser) and drives the built-in
# web page in Debian's Chromium against fresh servers. Usage: run_webui_test.sh MLASERVE WORK_DIR ARTIFACTS
set -euo pipefail
binary=$1 work=$2 artifacts=$3
here=$(cd "$(dirname "$0")" && pwd)
chromium=/usr/bin/chromium
for tool in npm node "$chromium"; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed (scripts/install-deps.sh --tests installs it)"; exit 1; }
done
mkdir -p "$work" "$artifacts"
[ -d "$work/node_modules/playwright-core" ] || (cd "$work" && npm install --no-audit --no-fund --silent playwright-core@1.64.1 >/dev/null)
# 32 layers instead of the preset's 4: a 3,000-token reply lasts seconds, so Stop lands mid-stream.
model=$work/tiny-32-layers
[ -f "$model/config.json" ] || "$binary" make-model --preset tiny --dtype bf16 --seed 7 \
  --override '{"num_hidden_layers": 32}' "$model" 2>/dev/null
node "$here/webui_test.js" "$work" "$binary" "$model" "$here/../data/chat_templates/kimi-k2-thinking.jinja" "$chromium" "$artifacts"
