#!/usr/bin/env bash
# Release build of build/mlaserve (runs on any x86-64 CPU with AVX2; the kernels for each
# instruction-set level inside). `--target T` first builds only T and what it needs (run.sh:
# the binary, no tests or microbenchmarks); the other arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
target=()
if [[ ${1:-} == --target ]]; then
  target=(--target "$2")
  shift 2
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)" "${target[@]}"
