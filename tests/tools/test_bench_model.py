"""bench-model's report on the tiny model: every field the issue names, medians of the runs, the
machine's limits as the better of two measurements, and the roofline percentages recomputed
here from config.json and the measured machine figures.
Usage: test_bench_model.py MLASERVE WORK_DIR"""
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checklist import check, finish  # noqa: E402
from server_fixture import make_tiny_model  # noqa: E402


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def expected_prefill_flops(config, active_params, prompt):
    """2 FLOPs a weight; the output projection once per prompt (only the last token's logits);
    causal attention over the average depth prompt / 2 (q.k over qk_head_dim, p.v over v_head_dim)."""
    output = config["vocab_size"] * config["hidden_size"]
    qk = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
    attention = config["num_hidden_layers"] * 2 * config["num_attention_heads"] * (qk + config["v_head_dim"]) * prompt / 2
    return 2 * (active_params - output) + attention + 2 * output / prompt


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = make_tiny_model(binary, os.path.join(work, "tiny"))
    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)
    prompt = 24
    proc = subprocess.run([binary, "bench-model", "--model", model, "-p", str(prompt), "-n", "4", "--batch", "3",
                           "-r", "3", "--threads", "1", "--json"], capture_output=True, text=True, timeout=300)
    check("bench-model exits 0", proc.returncode == 0, proc.stderr[-2000:])
    report = json.loads(proc.stdout)
    for key in ("prefill_tok_s", "decode_tok_s", "decode_batch_tok_s", "membw_gb_s", "read_bw_gb_s", "peak_fma_gflops",
                "decode_roofline_pct", "decode_read_roofline_pct", "prefill_peak_pct", "peak_rss_mb", "active_params"):
        check(f"{key} is positive", report.get(key, 0) > 0, f"{report.get(key)}")
    check("--threads after the subcommand sets the threads", report.get("threads") == 1, f"{report.get('threads')}")
    check("tie_word_embeddings is off in the tiny preset", not config.get("tie_word_embeddings", False))
    for name, runs in (("prefill", "prefill_runs"), ("decode", "decode_runs"), ("decode_batch", "decode_batch_runs")):
        check(f"{name}: one figure per repetition", len(report[runs]) == 3, f"{report[runs]}")
        check(f"{name}: the median of the repetitions", close(report[f"{name}_tok_s"], statistics.median(report[runs])))
    flops = expected_prefill_flops(config, report["active_params"], prompt)
    check("prefill FLOPs a token: lm_head once per prompt", close(report["flops_per_prefill_token"], flops, 1e-6),
          f"{report['flops_per_prefill_token']} vs {flops}")
    check("prefill % of peak", close(report["prefill_peak_pct"],
                                     100 * report["prefill_tok_s"] * flops / (report["peak_fma_gflops"] * 1e9), 1e-6))
    check("decode % of the bandwidth roofline", close(
        report["decode_roofline_pct"],
        100 * report["decode_tok_s"] * report["bytes_per_decoded_token"] / (report["membw_gb_s"] * 1e9)))
    check("decode % of the read-bandwidth roofline", close(
        report["decode_read_roofline_pct"],
        100 * report["decode_tok_s"] * report["bytes_per_decoded_token"] / (report["read_bw_gb_s"] * 1e9)))
    if report["peak_bf16_dot_gflops"] > 0:  # a build with AVX512_BF16
        check("prefill % of the bf16 dot's peak", close(
            report["prefill_bf16_dot_peak_pct"],
            100 * report["prefill_tok_s"] * flops / (report["peak_bf16_dot_gflops"] * 1e9), 1e-6))
    else:
        check("no bf16 dot, no % of it", report["prefill_bf16_dot_peak_pct"] is None,
              f"{report['prefill_bf16_dot_peak_pct']}")
    before, after = report["machine_before"], report["machine_after"]
    for name, key in (("triad_gb_s", "membw_gb_s"), ("read_gb_s", "read_bw_gb_s"), ("fma_gflops", "peak_fma_gflops"),
                      ("bf16_dot_gflops", "peak_bf16_dot_gflops")):
        check(f"{key}: the better of the measurements before and after",
              report[key] == max(before[name], after[name]), f"{report[key]} {before[name]} {after[name]}")
    check("batch speedup", close(report["decode_batch_speedup"], report["decode_batch_tok_s"] / report["decode_tok_s"]))

    bad = subprocess.run([binary, "bench-model", "--model", model, "-p", "0", "-n", "4"], capture_output=True,
                         text=True, timeout=60)
    check("-p 0 is refused by name", bad.returncode != 0 and "-p" in bad.stderr, bad.stderr[-500:])

    finish()


if __name__ == "__main__":
    main()
