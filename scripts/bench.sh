#!/usr/bin/env bash
# The model-speed figures of docs/performance.md: bench-model on random models of the presets'
# shapes (mini BF16, small BF16, small with INT4 experts), ROUNDS rounds, each round one run of
# every case with every binary in turn (so a slow spell of the machine falls on all alike), then
# the median of each figure against the machine's own probes (bandwidth, fp32 FMA, bf16 dot) as
# bench-model measures them in the same run. Give two binaries to compare them side by side.
# Needs a build (scripts/build.sh). Models are written once under $MODELS (default /tmp/mlaserve-bench).
# Usage: scripts/bench.sh [ROUNDS=3] [BINARY ...]   (default binary: build/mlaserve)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
shift || true
binaries=("${@:-build/mlaserve}")
models=${MODELS:-/tmp/mlaserve-bench}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$models"
make_model() {  # NAME PRESET DTYPE
  [[ -f $models/$1/config.json ]] || "${binaries[0]}" make-model --preset "$2" --dtype "$3" --seed 1 "$models/$1" > /dev/null
}
make_model mini-bf16 mini bf16
make_model small-bf16 small bf16
make_model small-int4 small int4
# name | model | bench-model flags
cases=(
  "mini-bf16 decode, batch 8|mini-bf16|-p 512 -n 128 --batch 8"
  "small-int4 decode, batch 8|small-int4|-p 512 -n 64 --batch 8"
  "small-int4 at depth 1024|small-int4|-p 64 -n 64 --batch 1 --depth 1024"
  "small-bf16 prefill, exact|small-bf16|-p 512 -n 32 --batch 1"
  "small-bf16 prefill, --bf16-terms 1|small-bf16|-p 512 -n 4 --batch 1 --bf16-terms 1"
)
for r in $(seq "$rounds"); do
  for c in "${!cases[@]}"; do
    IFS='|' read -r _ model flags <<< "${cases[$c]}"
    for b in "${!binaries[@]}"; do
      # shellcheck disable=SC2086
      "${binaries[$b]}" bench-model --model "$models/$model" $flags -r 1 --json > "$work/$c-$b-$r.json" 2> /dev/null
    done
  done
done
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; medians of $rounds rounds"
/usr/bin/python3 - "$work" "$rounds" "${#binaries[@]}" "${binaries[@]}" "${cases[@]}" <<'PY'
import json, statistics, sys
work, rounds, n_binaries = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
binaries = sys.argv[4:4 + n_binaries]
cases = [c.split('|')[0] for c in sys.argv[4 + n_binaries:]]
fields = [("prefill tok/s", "prefill_tok_s"), ("% of FMA peak", "prefill_peak_pct"),
          ("% of bf16-dot peak", "prefill_bf16_dot_peak_pct"), ("decode tok/s", "decode_tok_s"),
          ("% of roofline", "decode_roofline_pct"), ("batch tok/s", "decode_batch_tok_s"),
          ("depth change %", "decode_depth_change_pct")]
def median(c, b, key):
    values = []
    for r in range(1, rounds + 1):
        v = json.load(open(f"{work}/{c}-{b}-{r}.json")).get(key)
        if isinstance(v, (int, float)): values.append(v)
    return statistics.median(values) if values else None
probe = json.load(open(f"{work}/0-0-1.json"))
print(f"probes (first run): triad {probe['membw_gb_s']:.1f} GB/s, fp32 FMA {probe['peak_fma_gflops']:.0f} GFLOP/s, "
      f"bf16 dot {probe['peak_bf16_dot_gflops']:.0f} GFLOP/s; kernels: amx {probe['amx']}")
print("| case | binary | " + " | ".join(f for f, _ in fields) + " |")
print("|---|---|" + "---|" * len(fields))
for c, name in enumerate(cases):
    for b, binary in enumerate(binaries):
        cells = []
        for _, key in fields:
            v = median(c, b, key)
            cells.append("-" if v is None else f"{v:.1f}")
        print(f"| {name} | {binary} | " + " | ".join(cells) + " |")
PY
