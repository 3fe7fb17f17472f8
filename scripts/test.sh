#!/usr/bin/env bash
# The whole test suite: install dependencies, build the release tree and the ASan/UBSan
# checkpoint_probe for the corrupt-checkpoint tests, then run CTest (its summary line ends the output).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
# -O1 without debug info: ASan/UBSan still see every bad access, and the tree compiles in
# half the time of RelWithDebInfo on 2 cores.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O1 -DMLASERVE_SANITIZE=ON \
      -DMLASERVE_TESTS=ON >/dev/null
cmake --build build-asan -j"$(nproc)" --target checkpoint_probe
# The microbenchmarks are not tests: not built here (scripts/build.sh -DMLASERVE_BENCH=ON builds them).
scripts/build.sh -DMLASERVE_TESTS=ON -DMLASERVE_BENCH=OFF -DMLASERVE_SANITIZED_PROBE="$PWD/build-asan/tests/checkpoint_probe"
cd build
ctest -j"$(nproc)" --output-on-failure --timeout 900
