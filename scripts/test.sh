#!/usr/bin/env bash
# The whole test suite: install dependencies, build the release tree and an ASan/UBSan
# binary for the corrupt-checkpoint tests, then run CTest (its summary line ends the output).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLASERVE_SANITIZE=ON \
      -DMLASERVE_TESTS=OFF >/dev/null
cmake --build build-asan -j"$(nproc)" --target mlaserve
scripts/build.sh -DMLASERVE_TESTS=ON -DMLASERVE_SANITIZED_BINARY="$PWD/build-asan/mlaserve"
cd build
ctest -j"$(nproc)" --output-on-failure --timeout 900
