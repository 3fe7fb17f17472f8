#!/usr/bin/env bash
# Installs the official OpenAI client for Node into WORK_DIR (once) and runs the end-to-end
# test against a fresh server. Usage: run_openai_client.sh MLASERVE WORK_DIR
set -euo pipefail
binary=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "SKIPPED: npm/node are not installed, so the OpenAI client cannot be fetched"
  exit 0
fi
mkdir -p "$work"
[ -d "$work/node_modules/openai" ] || (cd "$work" && npm install --no-audit --no-fund --silent openai@4 >/dev/null)
[ -f "$work/tiny/config.json" ] || "$binary" make-model --preset tiny --dtype bf16 --seed 7 "$work/tiny" 2>/dev/null
# Kimi K2 Thinking's template: it renders tools, tool calls and tool results.
node "$here/openai_client_test.js" "$work" "$binary" "$work/tiny" "$here/../data/chat_templates/kimi-k2-thinking.jinja"
# Kimi K3: no template, its own XTML protocol.
[ -f "$work/kimi-k3-tiny/config.json" ] || "$binary" make-model --preset kimi-k3-tiny --dtype mxfp4 --seed 7 "$work/kimi-k3-tiny" 2>/dev/null
node "$here/openai_client_k3_test.js" "$work" "$binary" "$work/kimi-k3-tiny"
