#!/usr/bin/env bash
# Speculative decoding measured as served: for no drafter and each drafter of the trained model
# (n-gram, its MTP layer, the dense draft model, the DFlash block draft), each with a fixed draft length and with the
# adaptive policy, start `mlaserve serve` on models/kjv, run bench-serve at concurrency 1, 4 and
# 16 (random prompts, fixed lengths, --ignore-eos) REPEATS times, and print the median of each
# figure: output tok/s, median per-user tok/s, mean TTFT and the accept length (tokens a
# verifying step emits). Needs a build (scripts/build.sh).
# Usage: scripts/bench-speculative.sh [REPEATS=3] [NUM_DRAFT_TOKENS=4] [INPUT_LEN=256] [OUTPUT_LEN=128]
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3} k=${2:-4} input_len=${3:-256} output_len=${4:-128}
port=${PORT:-8137}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
# One server a configuration, all started first; the runs then alternate between them, so a
# slow spell of the machine falls on every configuration alike.
runs=(none ngram/fixed ngram/adaptive mtp/fixed mtp/adaptive draft:models/kjv-draft/fixed draft:models/kjv-draft/adaptive
      dflash:models/kjv-dflash/fixed dflash:models/kjv-dflash/adaptive)
names=()
for i in "${!runs[@]}"; do
  run=${runs[$i]} flags=()
  drafter=${run%/*} policy=${run##*/}
  [[ $run != none ]] && flags=(--speculative "$drafter" --num-draft-tokens "$k" --draft-policy "$policy")
  names+=("${drafter%%:*}${flags:+-$policy}")
  build/mlaserve serve --model models/kjv --port $((port + i)) --kv-cache-gb 0.2 "${flags[@]}" > "$work/server-$i.log" 2>&1 &
done
for i in "${!runs[@]}"; do
  until curl -sf "http://127.0.0.1:$((port + i))/health" > /dev/null; do sleep 0.2; done
done
for r in $(seq "$repeats"); do
  for i in "${!runs[@]}"; do
    build/mlaserve bench-serve --base-url "http://127.0.0.1:$((port + i))" --tokenizer models/kjv --input-len "$input_len" \
      --output-len "$output_len" --num-prompts 32 --warmup-requests 2 --ignore-eos --sweep 1,4,16 --no-progress \
      --svg "$work/sweep.svg" --json "$work/${names[$i]}-$r.json" > /dev/null 2>&1
  done
done
echo "models/kjv, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; input $input_len," \
     "output $output_len, 32 requests a level, up to $k draft tokens; medians of $repeats runs"
/usr/bin/python3 - "$work" "$repeats" <<'PY'
import json, statistics, sys
work, repeats = sys.argv[1], int(sys.argv[2])
print("| drafter | draft length | concurrency | output tok/s | per-user tok/s | mean TTFT (ms) | accept length |")
print("|---|---|---|---|---|---|---|")
for drafter in ("none", "ngram-fixed", "ngram-adaptive", "mtp-fixed", "mtp-adaptive", "draft-fixed", "draft-adaptive",
                "dflash-fixed", "dflash-adaptive"):
    runs = [json.load(open(f"{work}/{drafter}-{r}.json"))["runs"] for r in range(1, repeats + 1)]
    for level in range(len(runs[0])):
        pick = lambda f: statistics.median(f(rs[level]) for rs in runs)
        name, _, policy = drafter.partition("-")
        print(f"| {name} | {policy or '-'} | {runs[0][level]['max_concurrency']} | {pick(lambda x: x['output_throughput']):,.0f} | "
              f"{pick(lambda x: x['per_user_tok_s']['median']):,.0f} | {pick(lambda x: x['ttft_ms']['mean']):.1f} | "
              f"{pick(lambda x: x['accept_length']):.2f} |")
PY
