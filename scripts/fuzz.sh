#!/usr/bin/env bash
# Coverage-guided fuzzing of the parsers (fuzz/): builds every target with clang, libFuzzer, ASan
# and UBSan into build-fuzz/, then runs each in turn for --seconds on a working corpus seeded
# from fuzz/corpus/<target>/, and prints executions, corpus size and crashes per target.
# Crashing inputs land in build-fuzz/crashes/<target>/; once fixed, add them to fuzz/corpus/
# so the test suite (ctest -L fuzz) replays them for ever. An input counts as a hang (and is
# reported as a slow unit) after 60 s of wall-clock time: a niced fuzzer on a busy 2-core machine
# can be starved for many seconds.
#   scripts/fuzz.sh [--seconds N] [--jobs N] [TARGET...]   (default: 600 s each, 1 job, all)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600 jobs=1 targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=($(ls fuzz/corpus))
command -v clang++ >/dev/null || { echo "needs clang (apt install clang libclang-rt-14-dev)" >&2; exit 1; }
CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DMLASERVE_SANITIZE=ON -DMLASERVE_FUZZ=ON -DMLASERVE_TESTS=OFF -DMLASERVE_BENCH=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}"
printf '%-18s %12s %8s %8s %s\n' target executions exec/s corpus "new crashes"
shopt -s nullglob
cd build-fuzz  # with --jobs, libFuzzer writes fuzz-N.log files into the working directory
for target in "${targets[@]}"; do
  work=corpus/$target crashes=crashes/$target log=$target.log
  mkdir -p "$work" "$crashes"
  rm -f fuzz-*.log
  dict=../fuzz/json.dict
  [[ $target == chat_template ]] && dict=../fuzz/jinja.dict
  [[ $target == kimi_k3_output ]] && dict=../fuzz/xtml.dict
  [[ $target == tiktoken || $target == tokenizer_encode || $target == chat_output ]] && dict=""
  parallel=()
  ((jobs > 1)) && parallel=(-jobs="$jobs" -workers="$jobs")
  touch "$crashes/.run-start"
  UBSAN_OPTIONS=print_stacktrace=1 fuzz/fuzz_$target -max_total_time="$seconds" "${parallel[@]}" -print_final_stats=1 -timeout=60 -report_slow_units=60 -rss_limit_mb=2048 -max_len=8192 -artifact_prefix="$crashes/" \
    ${dict:+-dict=$dict} "$work" "../fuzz/corpus/$target" >"$log" 2>&1 || true
  executions=$(cat "$log" fuzz-*.log | { grep -o 'number_of_executed_units: [0-9]*' || true; } | awk '{s += $2} END {print s + 0}')
  rate=$((executions / seconds))
  printf '%-18s %12s %8s %8s %s\n' "$target" "$executions" "$rate" "$(ls "$work" | wc -l)" "$(find "$crashes" -type f -newer "$crashes/.run-start" | wc -l)"
done
