#!/usr/bin/env bash
# mlaserve beside ik_llama.cpp on the same machine, in one run: builds ik_llama.cpp from a source
# tree into a scratch folder (never into this repository), writes random models of the presets'
# shapes with make-model (BF16, and with INT4 experts for mlaserve's 4-bit path, also run with
# --requantize q4, which quantizes its BF16 projections as ik's Q4_0 files do; and BF16 also with
# --bf16-terms 1, which rounds activations to bf16 as ik's BF16 matrix products do), writes the same
# BF16 weights as GGUFs in ik's layout (tools/bench/to_gguf.py) and quantizes them to Q4_0, then
# runs bench-model and llama-bench (ik's fastest CPU flags: -mla 3 -fa 1 -fmoe 1 -rtr 1)
# interleaved, ROUNDS rounds of every case, and prints one table of medians with the ratio per
# cell, each engine's bytes read a decoded token, and the machine's bandwidth roofline. The gguf-*
# cases load the very GGUF files ik runs (BF16, and Q8_0, Q6_K, Q4_0, Q4_K from ik's quantizer).
#   scripts/side_by_side.sh --ik-src DIR [--ik-build DIR] [--work DIR] [--rounds 5]
#                           [--presets "mini small"] [--cases "int4 int4-requantize-q4 bf16 bf16-terms
#                            gguf-bf16 gguf-q8_0 gguf-q6_k gguf-q4_0 gguf-q4_k"]
#                           [--binary build/mlaserve]
# DIR for --ik-src: an ik_llama.cpp checkout (e.g. git clone https://github.com/ikawrakow/ik_llama.cpp).
# --ik-build keeps the build between runs (default: a folder under --work); --work keeps the
# models (default /tmp/mlaserve-side-by-side).
set -euo pipefail
cd "$(dirname "$0")/.."
ik_src="" ik_build="" work=/tmp/mlaserve-side-by-side rounds=5 presets="mini small" binary=build/mlaserve
wanted="int4 int4-requantize-q4 bf16 bf16-terms"
while (($#)); do
  case "$1" in
    --ik-src) ik_src="$2"; shift 2 ;;
    --ik-build) ik_build="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --presets) presets="$2"; shift 2 ;;
    --cases) wanted="$2"; shift 2 ;;
    --binary) binary="$2"; shift 2 ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ -n $ik_src && -f $ik_src/CMakeLists.txt ]] || { echo "--ik-src must name an ik_llama.cpp source tree" >&2; exit 2; }
[[ -x $binary ]] || { echo "$binary: build mlaserve first (scripts/build.sh)" >&2; exit 2; }
ik_build=${ik_build:-$work/ik-build}
mkdir -p "$work" "$ik_build"
threads=$(nproc)

if [[ ! -x $ik_build/bin/llama-bench || ! -x $ik_build/bin/llama-quantize ]]; then
  echo "building ik_llama.cpp in $ik_build (several minutes on 2 cores)" >&2
  cmake -S "$ik_src" -B "$ik_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF -DGGML_IQK_FA_ALL_QUANTS=OFF > "$ik_build/cmake.log"
  ninja -C "$ik_build" llama-bench llama-quantize > "$ik_build/build.log"
fi

for preset in $presets; do
  for dtype in bf16 int4; do
    [[ -f $work/$preset-$dtype/config.json ]] ||
      "$binary" make-model --preset "$preset" --dtype "$dtype" --seed 1 "$work/$preset-$dtype" > /dev/null
  done
  [[ -f $work/$preset-bf16.gguf ]] ||
    GGUF_PY="$ik_src/gguf-py" /usr/bin/python3 tools/bench/to_gguf.py "$work/$preset-bf16" "$work/$preset-bf16.gguf" >&2
  for type in q4_0 q8_0 q6_k q4_k; do
    [[ $type == q4_0 || " $wanted " == *" gguf-$type "* ]] || continue
    [[ -f $work/$preset-$type.gguf ]] ||
      "$ik_build/bin/llama-quantize" "$work/$preset-bf16.gguf" "$work/$preset-$type.gguf" "${type^^}" "$threads" > /dev/null 2>&1
  done
done

results=$work/results
rm -rf "$results" && mkdir -p "$results"
# mlaserve case | its model | its flags | the GGUF ik runs beside it (once a round)
all_cases=("int4|int4||q4_0" "int4-requantize-q4|int4|--requantize q4|q4_0" "bf16|bf16||bf16"
           "bf16-terms|bf16|--bf16-terms 1|bf16" "gguf-bf16|bf16.gguf||bf16" "gguf-q8_0|q8_0.gguf||q8_0"
           "gguf-q6_k|q6_k.gguf||q6_k" "gguf-q4_0|q4_0.gguf||q4_0" "gguf-q4_k|q4_k.gguf||q4_k")
cases=()
for case in "${all_cases[@]}"; do
  [[ " $wanted " == *" ${case%%|*} "* ]] && cases+=("$case")
done
((${#cases[@]})) || { echo "--cases names none of: ${all_cases[*]%%|*}" >&2; exit 2; }
for r in $(seq "$rounds"); do
  echo "round $r of $rounds" >&2
  for preset in $presets; do
    for case in "${cases[@]}"; do
      IFS='|' read -r name ours flags theirs <<< "$case"
      # shellcheck disable=SC2086
      "$binary" bench-model --model "$work/$preset-$ours" -p 512 -n 64 --batch 1 -r 1 --json $flags \
        > "$results/mlaserve-$preset-$name-$r.json" 2> /dev/null
      # shellcheck disable=SC2086
      "$binary" bench-model --model "$work/$preset-$ours" -p 64 -n 64 --depth 1024 --batch 1 -r 1 --json $flags \
        > "$results/mlaserve-depth-$preset-$name-$r.json" 2> /dev/null
      [[ -f $results/ik-$preset-$theirs-$r.json ]] && continue  # a case before ran it this round
      cat "$work/$preset-$theirs.gguf" > /dev/null  # in the page cache, as mlaserve's files are after their first run
      "$ik_build/bin/llama-bench" -m "$work/$preset-$theirs.gguf" -t "$threads" -r 1 -p 512 -n 64 -gp 1024,64 \
        -mla 3 -fa 1 -fmoe 1 -rtr 1 -o json > "$results/ik-$preset-$theirs-$r.json" 2> /dev/null
    done
  done
done
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $threads threads; medians of $rounds rounds"
GGUF_PY="$ik_src/gguf-py" /usr/bin/python3 tools/bench/side_by_side_table.py "$results" "$work" $presets
