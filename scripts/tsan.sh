#!/usr/bin/env bash
# ThreadSanitizer on the code that runs on several threads: builds build-tsan/ (-fsanitize=thread)
# and runs the engine, scheduler, drafter, thread-pool, thread-rank, HTTP server and task-queue
# unit tests, then the server's Python tests (concurrent streams, hostile requests, shutdown)
# against the TSan binary (less the two whose time bounds the 10-20x slower build cannot meet).
# Any report fails the run (halt_on_error). Takes ~40 min on 2 cores, most of it building.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DMLASERVE_TSAN=ON \
  -DMLASERVE_TESTS=ON -DMLASERVE_BENCH=OFF >/dev/null
cmake --build build-tsan -j"$(nproc)" --target unit_tests mlaserve
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
build-tsan/tests/unit_tests --gtest_brief=1 \
  --gtest_filter='Engine*:MicroEngine*:Scheduler*:BlockManager*:ThreadPool*:ThreadCommunicator*:SingleSequence*:*Drafter*:DraftPolicy*:StateSnapshots*:HttpServer*:Prometheus*:LifoTaskQueue*'
/usr/bin/python3 -m pytest -q -p no:cacheprovider --rootdir=tests tests/server/test_concurrency.py \
  tests/server/test_robustness.py --binary build-tsan/mlaserve --work-dir build-tsan/pytest \
  -k "not test_overload_queues_or_refuses and not test_sigterm_finishes"
