#!/usr/bin/env bash
# Release build of build/mlaserve (runs on any x86-64 CPU with AVX2; the kernels for each
# instruction-set level inside). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
