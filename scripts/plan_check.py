#!/usr/bin/python3
"""The planner's predictions against published measurements (docs/planning.md's tables): each
deployment planned from specs alone, the error of each predicted figure, and how each figure moves
when one efficiency parameter of the catalog moves by -20% and +20%.
    scripts/plan_check.py [--binary build/mlaserve] [--sensitivity]"""
import argparse
import json
import os
import subprocess
import tempfile

# (label, plan flags, {figure: measured}); figures: single (tok/s, one stream), peak (total
# output tok/s), peak_in_out (input and output tok/s: InferenceX's "throughput per GPU" counts
# both), ttft / ttft_generic (s, --prompt-len), prefill (tok/s of one prompt on the
# deployment, --input-len tokens long), and at --max-concurrency C, the sweep's last point:
# total (output tok/s) and tpot (ms an output token takes a request: the C requests' cycle of
# prefills and decode steps, less its own prefill, over --output-len; at high concurrency a
# benchmark counts the wait for other prompts' prefills in TTFT instead, so only low
# concurrencies are compared); ranges as (low, high).
SEED = "seed deployment, Kimi K3, 1024 in / 400 out, DSpark"
MEASURED = [
    (f"8 x MI355X ({SEED})",
     ["--model", "kimi-k3", "--hardware", "mi355x", "--devices", "8", "--speculative", "dspark",
      "--max-concurrency", "64", "--prompt-len", "172000"],
     {"single": 118, "peak": 952, "ttft": 172000 / 13000, "ttft_generic": (172000 / 7000, 172000 / 4000)}),
    (f"16 x B200, 2 nodes, RoCE 195 Gb/s ({SEED})",
     ["--model", "kimi-k3", "--hardware", "b200", "--devices", "16", "--tp", "16", "--inter-node-gb-s", "24.4",
      "--speculative", "dspark", "--max-concurrency", "64"],
     {"single": 90, "peak": 498}),
    (f"8 x B300 ({SEED})",
     ["--model", "kimi-k3", "--hardware", "b300", "--devices", "8", "--speculative", "dspark",
      "--max-concurrency", "64"],
     {"single": 172, "peak": 1568}),
    ("8 x MI355X, Kimi K2.5 MXFP4, vLLM 0.18 + AITER, 8k in / 1k out (SemiAnalysis InferenceX)",
     ["--model", "kimi-k2", "--weights", "mxfp4", "--hardware", "mi355x", "--devices", "8",
      "--input-len", "8192", "--output-len", "1024"],
     {"single": 78.9, "peak_in_out": 2687 * 8}),
    # AMD's ROCm blog "Faster Kimi-K2.5-W4A8 Decoding with EAGLE3 on AMD Instinct MI325X" (SGLang TP 8,
    # sglang.bench_serving random 10,240 in / 512 out): without speculation and with an EAGLE3 draft
    # of 3 tokens a step accepting 3.97 (concurrency 2) and 3.93 (concurrency 40).
    *[(f"8 x MI325X, Kimi K2.5 W4A8, SGLang TP 8, 10k in / 512 out, concurrency {c}{name}",
       ["--model", "kimi-k2", "--weights", "int4", "--hardware", "mi325x", "--devices", "8", "--input-len", "10240",
        "--output-len", "512", "--max-concurrency", str(c), *spec], figures)
      for c, name, spec, figures in [
          (2, "", [], {"tpot": 16.94}), (2, ", EAGLE3", ["--speculative", "eagle:3.97"], {"tpot": 5.40}),
          (40, "", [], {"total": 672.30}), (40, ", EAGLE3", ["--speculative", "eagle:3.93"], {"total": 872.58})]],
    # AMD's ATOM engine on MI355X (graphs on, atom.benchmarks.benchmark_serving random prompts, output
    # tok/s), the unprofiled baselines of rocm-trace-lite's overhead validation (sunway513/rocm-trace-lite,
    # docs/extra/samples/index.html): DeepSeek-R1 FP8 at TP 8 and MXFP4 at TP 4, concurrency 1 and 64.
    *[(f"{n} x MI355X, DeepSeek-R1 {w.upper()}, ATOM TP {n}, {i} in / {o} out, concurrency {c}",
       ["--model", "deepseek-v3", "--weights", w, "--hardware", "mi355x", "--devices", str(n), "--tp", str(n),
        "--input-len", str(i), "--output-len", str(o), "--max-concurrency", str(c)], {"total": tok_s})
      for w, n, i, o, c, tok_s in [
          ("fp8", 8, 1024, 1024, 1, 97.3), ("fp8", 8, 1024, 1024, 64, 2285.9),
          ("fp8", 8, 128, 2048, 1, 100.9), ("fp8", 8, 128, 2048, 64, 3145.1),
          ("mxfp4", 4, 1024, 1024, 1, 130.0), ("mxfp4", 4, 1024, 1024, 64, 2614.6),
          ("mxfp4", 4, 128, 2048, 1, 131.2), ("mxfp4", 4, 128, 2048, 64, 2900.0)]],
    # ATOM's nightly benchmarks on MI355X (the dashboard data of ROCm/ATOM's gh-pages branch,
    # benchmark-dashboard/data.js, the latest run of each cell, 2026-05-12 to 05-24): output tok/s of random prompts, 1,024
    # out, at concurrency 4 to 256, with the latent cache in FP8 (the catalog's kv_cache_dtype,
    # .github/benchmark/models.json). MTP3 (3 draft tokens) is planned with the acceptance ATOM's GSM8K
    # runs report (3.01 tokens a forward for FP8, 2.93 for MXFP4); the throughput runs' own is not
    # published.
    *[(f"{n} x MI355X, {label}, ATOM TP {n}, {i} in / 1024 out, concurrency {c}",
       ["--model", model, "--weights", w, "--hardware", "mi355x", "--devices", str(n), "--tp", str(n),
        "--kv-cache-dtype", "fp8", "--input-len", str(i), "--output-len", "1024", "--max-concurrency", str(c),
        *(["--speculative", spec, "--num-draft-tokens", "3"] if spec else [])], {"total": tok_s})
      for label, model, w, n, spec, i, by_concurrency in [
          ("DeepSeek-R1 FP8", "deepseek-v3", "fp8", 8, "", 1024, [294.48, 1165.31, 3376.81, 6586.61]),
          ("DeepSeek-R1 FP8", "deepseek-v3", "fp8", 8, "", 8192, [315.47, 917.33, 1769.01, 2565.36]),
          ("DeepSeek-R1 MXFP4", "deepseek-v3", "mxfp4", 4, "", 1024, [409.42, 1096.76, 2739.31, 5671.51]),
          ("DeepSeek-R1 MXFP4", "deepseek-v3", "mxfp4", 4, "", 8192, [389.53, 841.56, 1549.65, 2043.17]),
          ("Kimi K2.5 MXFP4", "kimi-k2", "mxfp4", 4, "", 1024, [434.37, 1120.64, 2448.74, 5207.17]),
          ("Kimi K2.5 MXFP4", "kimi-k2", "mxfp4", 4, "", 8192, [381.95, 878.19, 1558.16, 2212.39]),
          ("DeepSeek-R1 FP8, MTP3", "deepseek-v3", "fp8", 8, "mtp:3.01", 1024, [539.08, 1623.14, 3393.34, 7062.86]),
          ("DeepSeek-R1 FP8, MTP3", "deepseek-v3", "fp8", 8, "mtp:3.01", 8192, [566.82, 1193.02, 2109.34, 3014.39]),
          ("DeepSeek-R1 MXFP4, MTP3", "deepseek-v3", "mxfp4", 4, "mtp:2.93", 1024, [609.58, 1574.44, 3527.85, 6168.45]),
          ("DeepSeek-R1 MXFP4, MTP3", "deepseek-v3", "mxfp4", 4, "mtp:2.93", 8192, [570.20, 1142.23, 1900.71, 2387.31])]
      for c, tok_s in zip([4, 16, 64, 256], by_concurrency)],
    # The same runs' mean TTFT of 8,192-token prompts at concurrency 4 (its lowest), in s.
    *[(f"{n} x MI355X, {label}, ATOM TP {n}, 8192 in, TTFT at concurrency 4",
       ["--model", model, "--weights", w, "--hardware", "mi355x", "--devices", str(n), "--tp", str(n),
        "--kv-cache-dtype", "fp8", "--prompt-len", "8192"], {"ttft": ttft_ms / 1000})
      for label, model, w, n, ttft_ms in [("DeepSeek-R1 FP8", "deepseek-v3", "fp8", 8, 294.86),
                                          ("DeepSeek-R1 MXFP4", "deepseek-v3", "mxfp4", 4, 322.63),
                                          ("Kimi K2.5 MXFP4", "kimi-k2", "mxfp4", 4, 313.63)]],
    # InferenceX's TensorRT-LLM runs (1.1.0rc2.post2, TP 8 with experts over 8, 2025-12-15) of
    # DeepSeek-R1 FP8 at 1,024 in / 1,024 out, output tok/s (output_tput_per_gpu x 8), from the API
    # snapshot in SemiAnalysisAI/InferenceX-app (packages/app/cypress/fixtures/api/benchmarks.json).
    *[(f"8 x {hw.upper()}, DeepSeek-R1 FP8, TensorRT-LLM TP 8 EP 8, 1024 in / 1024 out, concurrency {c}",
       ["--model", "deepseek-v3", "--weights", "fp8", "--hardware", hw, "--devices", "8", "--input-len", "1024",
        "--output-len", "1024", "--max-concurrency", str(c)], {"total": 8 * per_gpu})
      for hw, by_concurrency in [("b200", {4: 32.760, 8: 62.209, 16: 101.911, 32: 171.664}),
                                 ("h200", {4: 34.337, 8: 58.882, 16: 93.801, 32: 148.142, 64: 228.305})]
      for c, per_gpu in by_concurrency.items()],
    # The same snapshot's SGLang v0.5.9 runs of DeepSeek-R1 MXFP4 at TP 4 on MI355X (2026-02-27).
    *[(f"4 x MI355X, DeepSeek-R1 MXFP4, SGLang TP 4, 1024 in / 1024 out, concurrency {c}",
       ["--model", "deepseek-v3", "--weights", "mxfp4", "--hardware", "mi355x", "--devices", "4", "--tp", "4",
        "--input-len", "1024", "--output-len", "1024", "--max-concurrency", str(c)], {"total": 4 * per_gpu})
      for c, per_gpu in {4: 89.889, 8: 156.389, 16: 255.105, 32: 393.358, 64: 582.221}.items()],
    # All requests sent at once (vllm bench serve, request rate unbounded): prefill-bound runs.
    ("8 x H200, DeepSeek-R1-0528 FP8, vLLM 0.11 TP 8, 100 requests of 32,000 in / 100 out (GPUStack performance lab)",
     ["--model", "deepseek-v3", "--hardware", "h200", "--devices", "8", "--input-len", "32000", "--output-len", "100",
      "--max-concurrency", "100"],
     {"peak_in_out": 15514.57}),
    ("8 x H200, DeepSeek-R1-0528 FP8, vLLM 0.11 TP 8, 500 requests of 4,000 in / 200 out (GPUStack performance lab)",
     ["--model", "deepseek-v3", "--hardware", "h200", "--devices", "8", "--input-len", "4000", "--output-len", "200",
      "--max-concurrency", "500"],
     {"peak_in_out": 15808.55}),
    # Prefill tokens/s of an 8-GPU H800 node (H100's compute and HBM): DeepSeek's own service over
    # 24 hours (73.7k tok/s input with 56.3% cache hits: 32.2k computed; prompts ~4.4k tokens, EP32
    # over 4 nodes) and Alibaba RTP-LLM's benchmark (42.6k at 4k in under a 1.6 s TTFT bound).
    ("8 x H800, DeepSeek-V3/R1 FP8, DeepSeek's service, computed input tokens a node (Open Infra Index, day 6)",
     ["--model", "deepseek-v3", "--hardware", "h100", "--devices", "8", "--input-len", "4383"],
     {"prefill": 32200}),
    ("8 x H800, DeepSeek-R1 FP8, RTP-LLM, 4k in, prefill tokens a node",
     ["--model", "deepseek-v3", "--hardware", "h100", "--devices", "8", "--input-len", "4096"],
     {"prefill": 42600}),
]
PARAMETERS = ["bandwidth_efficiency", "flops_efficiency", "expert_flops_efficiency", "attention_efficiency",
              "kernel_overhead_us", "collective_latency_us", "inter_node_latency_us", "generic_mla_slowdown"]


def predict(binary, flags, hardware_file=None):
    extra = ["--hardware-file", hardware_file] if hardware_file else []
    out = subprocess.run([binary, "plan", "--json", *flags, *extra], check=True, capture_output=True, text=True)
    plan = json.loads(out.stdout)
    p = plan["predicted"]
    tokens_per_output = (p["input_len"] + p["output_len"]) / p["output_len"]
    last = p["curve"][-1] if p["curve"] else None
    prefill_s = p["input_len"] / p["prefill_tok_s"]
    return {"total": last and last["total_tok_s"],
            "tpot": last and 1000 * (last["concurrency"] / last["total_tok_s"] - prefill_s / p["output_len"]),
            "single": p["single_stream_tok_s"], "peak": p["peak_total_tok_s"], "ttft": p.get("ttft_s"),
            "peak_in_out": p["peak_total_tok_s"] * tokens_per_output,
            "ttft_generic": p.get("ttft_generic_s"), "prefill": p.get("prefill_tok_s"), "peak_concurrency": p["peak_concurrency"],
            "binding": p["decode_step_s"]["binding"]}


def error(predicted, measured):
    if isinstance(measured, tuple):
        low, high = measured
        return 0.0 if low <= predicted <= high else (predicted / (low if predicted < low else high) - 1)
    return predicted / measured - 1


def show(measured):
    return f"{measured[0]:.3g}–{measured[1]:.3g}" if isinstance(measured, tuple) else f"{measured:.4g}"


def accuracy_table(binary):
    print("| deployment | figure | measured | predicted | error |\n|---|---|---|---|---|")
    for label, flags, figures in MEASURED:
        predicted = predict(binary, flags)
        for figure, measured in figures.items():
            extra = f" (at {predicted['peak_concurrency']})" if figure.startswith("peak") else ""
            print(f"| {label} | {figure} | {show(measured)} | {predicted[figure]:.4g}{extra} | "
                  f"{100 * error(predicted[figure], measured):+.0f}% |")


def hardware_name(flags):
    return flags[flags.index("--hardware") + 1]


def sensitivity_table(binary):
    catalog = {e["name"]: e for e in json.loads(subprocess.run([binary, "plan", "--dump-catalog"], check=True,
                                                               capture_output=True, text=True).stdout)}
    print("| deployment | parameter | figure | -20% | +20% |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for label, flags, figures in MEASURED:
            base = predict(binary, flags)
            entry = catalog[hardware_name(flags)]
            for parameter in PARAMETERS:
                moved = {}
                for factor in (0.8, 1.2):
                    value = entry[parameter] * factor
                    if parameter.endswith("efficiency"):
                        value = min(value, 1.0)
                    if parameter == "generic_mla_slowdown":
                        value = max(value, 1.0)
                    path = os.path.join(work, "hardware.json")
                    json.dump([{"name": entry["name"], parameter: value}], open(path, "w"))
                    moved[factor] = predict(binary, flags, path)
                for figure in figures:
                    changes = [moved[f][figure] / base[figure] - 1 for f in (0.8, 1.2)]
                    if max(abs(c) for c in changes) >= 0.005:
                        print(f"| {label.split(' (')[0]} | {parameter} | {figure} | {100 * changes[0]:+.0f}% | "
                              f"{100 * changes[1]:+.0f}% |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/mlaserve")
    parser.add_argument("--sensitivity", action="store_true", help="also the -20%/+20% table")
    args = parser.parse_args()
    accuracy_table(args.binary)
    if args.sensitivity:
        print()
        sensitivity_table(args.binary)


if __name__ == "__main__":
    main()
