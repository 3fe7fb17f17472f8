#!/usr/bin/env bash
# Installs the official OpenAI and Anthropic clients and the Vercel AI SDK (with zod) for Node into
# WORK_DIR (once) and runs their end-to-end tests against fresh servers. Usage: run_openai_client.sh MLASERVE WORK_DIR
set -euo pipefail
binary=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "SKIPPED: npm/node are not installed, so the clients cannot be fetched"
  exit 0
fi
mkdir -p "$work"
[ -d "$work/node_modules/openai" ] || (cd "$work" && npm install --no-audit --no-fund --silent openai@4 >/dev/null)
[ -d "$work/node_modules/@anthropic-ai/sdk" ] || (cd "$work" && npm install --no-audit --no-fund --silent @anthropic-ai/sdk@1 >/dev/null)
[ -d "$work/node_modules/@ai-sdk/openai-compatible" ] ||
  (cd "$work" && npm install --no-audit --no-fund --silent ai@5 @ai-sdk/openai-compatible@1 zod@4 >/dev/null)
[ -f "$work/tiny/config.json" ] || "$binary" make-model --preset tiny --dtype bf16 --seed 7 "$work/tiny" 2>/dev/null
# Kimi K2 Thinking's template: it renders tools, tool calls and tool results.
node "$here/openai_client_test.js" "$work" "$binary" "$work/tiny" "$here/../data/chat_templates/kimi-k2-thinking.jinja"
# Kimi K3: no template, its own XTML protocol; through chat completions, Anthropic's messages and
# OpenAI's responses.
[ -f "$work/kimi-k3-tiny/config.json" ] || "$binary" make-model --preset kimi-k3-tiny --dtype mxfp4 --seed 7 "$work/kimi-k3-tiny" 2>/dev/null
node "$here/openai_client_k3_test.js" "$work" "$binary" "$work/kimi-k3-tiny"
node "$here/anthropic_client_test.js" "$work" "$binary" "$work/kimi-k3-tiny"
node "$here/responses_client_test.js" "$work" "$binary" "$work/kimi-k3-tiny"
# The Vercel AI SDK's generateObject with zod schemas, on the committed models/kjv.
node "$here/ai_sdk_test.js" "$work" "$binary" "$here/../../models/kjv"
