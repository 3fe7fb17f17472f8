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


def expected_prefill_flops(config, active_params, prompt, depth=0):
    """2 FLOPs a weight; the output projection once per prompt (only the last token's logits);
    each MLA layer's causal attention over the average depth depth + prompt / 2 (q.k over
    qk_head_dim, p.v over v_head_dim; a Kimi Linear model's KDA layers have none)."""
    output = config["vocab_size"] * config["hidden_size"]
    qk = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
    mla_layers = config["num_hidden_layers"]
    if "linear_attn_config" in config:
        mla_layers -= len(config["linear_attn_config"]["kda_layers"])
    attention = mla_layers * 2 * config["num_attention_heads"] * (qk + config["v_head_dim"]) * (depth + prompt / 2)
    return 2 * (active_params - output) + attention + 2 * output / prompt


def check_batch_step(config, report, batch, generate):
    """A batch step reads the weights once, each routed expert its tokens chose once: between
    top-k and batch x top-k experts a MoE layer, and the bytes, roofline and speedup limit follow."""
    top_k, n_experts = config["num_experts_per_tok"], config["n_routed_experts"]
    experts = report["decode_batch_experts_per_layer"]
    check("batch step: at least top-k routed experts a MoE layer, at most batch x top-k",
          top_k <= experts <= min(batch * top_k, n_experts) + 1e-9, f"{experts}")
    moe_layers = config["num_hidden_layers"] - config["first_k_dense_replace"]
    routed_per_token = moe_layers * top_k * 3 * config["hidden_size"] * config["moe_intermediate_size"] * 2  # bf16
    kv_per_token = config["num_hidden_layers"] * (config["kv_lora_rank"] + config["qk_rope_head_dim"]) * 2 * (
        1 + generate // 2)  # bf16 latent rows at the decode's average depth
    weights_per_token = report["bytes_per_decoded_token"] - kv_per_token
    step = weights_per_token - routed_per_token + routed_per_token * experts / top_k + batch * kv_per_token
    check("batch step: bytes = other weights once + its distinct experts + each sequence's cache",
          close(report["decode_batch_bytes_per_step"], step, 1e-9), f"{report['decode_batch_bytes_per_step']} vs {step}")
    check("batch step: % of the bandwidth roofline", close(
        report["decode_batch_roofline_pct"],
        100 * report["decode_batch_tok_s"] / batch * step / (report["membw_gb_s"] * 1e9), 1e-9))
    check("batch step: speedup limit = batch x bytes a token / bytes a step",
          close(report["decode_batch_speedup_limit"], batch * report["bytes_per_decoded_token"] / step, 1e-9))


def check_prefill_at_depth(binary, model, config):
    """--depth D: the prefill runs after D cached tokens (llama-bench's "pp4 @ d64"), its FLOPs
    counting attention over them; auto absorbs 4 tokens after 64 cached, --mla-prefill forces
    either form, and the table names the test and the form."""
    for form, want in (("auto", "absorbed"), ("expanded", "expanded"), ("absorbed", "absorbed")):
        terms = {"auto": "3", "expanded": "2", "absorbed": "1"}[form]  # each run also names its --bf16-terms
        proc = subprocess.run([binary, "bench-model", "--model", model, "-p", "4", "-n", "2", "--batch", "2",
                               "--depth", "64", "-r", "3", "--threads", "1", "--mla-prefill", form, "--bf16-terms", terms,
                               "--json"], capture_output=True, text=True, timeout=300)
        check(f"--depth 64 --mla-prefill {form} exits 0", proc.returncode == 0, proc.stderr[-2000:])
        report = json.loads(proc.stdout)
        check(f"--bf16-terms {terms} reported", report["bf16_terms"] == int(terms), f"{report['bf16_terms']}")
        check(f"--mla-prefill {form}: the prefill ran {want}", report["mla_prefill"] == want, report["mla_prefill"])
        flops = expected_prefill_flops(config, report["active_params"], 4, depth=64)
        check(f"--mla-prefill {form}: FLOPs a token with attention over the 64 cached",
              close(report["flops_per_prefill_token"], flops, 1e-6), f"{report['flops_per_prefill_token']} vs {flops}")
    check_depth_comparison(report)
    table = subprocess.run([binary, "bench-model", "--model", model, "-p", "4", "-n", "2", "--batch", "2", "--depth",
                            "64", "-r", "1", "--threads", "1"], capture_output=True, text=True, timeout=300)
    check("the table names pp4 @ d64 and its MLA form", "| pp4 @ d64" in table.stdout and "MLA absorbed" in table.stdout,
          table.stdout)
    check("the table names tg2 @ d64", "| tg2 @ d64" in table.stdout, table.stdout)
    check("the table gives decode at the start and the change at depth",
          "| tg2 " in table.stdout and "decode at the start; tg2 @ d64" in table.stdout, table.stdout)


def check_depth_comparison(report):
    """At --depth, decode at the start is timed beside decode at depth in every repetition, and
    the change is the median of each pair's, not a ratio of the two medians."""
    starts, depths, changes = report["decode_start_runs"], report["decode_runs"], report["decode_depth_change_runs"]
    check("one start run per repetition, each positive", len(starts) == len(depths) and all(v > 0 for v in starts),
          f"{starts}")
    check("decode at the start: the median of its runs", close(report["decode_start_tok_s"], statistics.median(starts)))
    pairs = [100 * (depth / start - 1) for depth, start in zip(depths, starts)]
    check("each pair's change: decode at depth against decode at the start, in percent",
          all(close(a, b, 1e-9) for a, b in zip(changes, pairs)), f"{changes} vs {pairs}")
    check("the change: the median of the pairs'", close(report["decode_depth_change_pct"], statistics.median(pairs)))


def check_hybrid_prefill_flops(binary, work):
    """Kimi Linear (2 MLA and 2 KDA layers): attention FLOPs counted for the MLA layers only."""
    model = os.path.join(work, "kimi-linear-tiny")
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([binary, "make-model", "--preset", "kimi-linear-tiny", "--seed", "3", model], check=True,
                       capture_output=True)
    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)
    proc = subprocess.run([binary, "bench-model", "--model", model, "-p", "8", "-n", "2", "--batch", "2", "-r", "1",
                           "--threads", "1", "--num-draft-tokens", "3", "--json"], capture_output=True, text=True,
                          timeout=300)
    check("Kimi Linear bench-model exits 0", proc.returncode == 0, proc.stderr[-2000:])
    report = json.loads(proc.stdout)
    check("--num-draft-tokens 3: a verification step's cost in decode steps, alone and at --batch",
          report["num_draft_tokens"] == 3 and report["verify_cost"] > 0 and report["verify_batch_cost"] > 0
          and len(report["verify_cost_runs"]) == 1, f"{report.get('verify_cost')} {report.get('verify_batch_cost')}")
    flops = expected_prefill_flops(config, report["active_params"], 8)
    check("Kimi Linear: prefill attention FLOPs over its MLA layers only",
          close(report["flops_per_prefill_token"], flops, 1e-6), f"{report['flops_per_prefill_token']} vs {flops}")


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
    check_batch_step(config, report, batch=3, generate=4)

    check("a fresh prompt's prefill is expanded", report["mla_prefill"] == "expanded", report["mla_prefill"])
    check("without --depth no decode at the start beside it",
          report["decode_start_tok_s"] is None and report["decode_depth_change_pct"] is None
          and "decode_start_runs" not in report, f"{report['decode_start_tok_s']}")
    check_prefill_at_depth(binary, model, config)
    check_hybrid_prefill_flops(binary, work)

    check("without --num-draft-tokens no verification steps are timed",
          report["num_draft_tokens"] == 0 and report["verify_cost"] is None, f"{report.get('verify_cost')}")
    bad = subprocess.run([binary, "bench-model", "--model", model, "-p", "4", "-n", "4", "--num-draft-tokens", "-1"],
                         capture_output=True, text=True, timeout=60)
    check("a negative --num-draft-tokens is refused by name", bad.returncode != 0 and "--num-draft-tokens" in bad.stderr,
          bad.stderr[-500:])
    bad = subprocess.run([binary, "bench-model", "--model", model, "-p", "0", "-n", "4"], capture_output=True,
                         text=True, timeout=60)
    check("-p 0 is refused by name", bad.returncode != 0 and "-p" in bad.stderr, bad.stderr[-500:])
    bad = subprocess.run([binary, "bench-model", "--model", model, "-p", "4", "-n", "4", "--depth", "-5"],
                         capture_output=True, text=True, timeout=60)
    check("a negative --depth is refused by name", bad.returncode == 1 and "--depth" in bad.stderr, bad.stderr[-500:])
    # Before loading: a directory that is not a model is not even opened.
    bad = subprocess.run([binary, "bench-model", "--model", os.path.join(work, "no-such-model"), "-p", "4", "-n", "4",
                          "--batch", "0"], capture_output=True, text=True, timeout=60)
    check("--batch 0 is refused before the model is opened", bad.returncode == 1 and "--batch" in bad.stderr
          and "config.json" not in bad.stderr, bad.stderr[-500:])
    bad = subprocess.run([binary, "bench-model", "--model", model, "-p", "4", "-n", "4", "--mla-prefill", "flash"],
                         capture_output=True, text=True, timeout=60)
    check("an unknown --mla-prefill is refused by name",
          bad.returncode != 0 and "--mla-prefill" in bad.stderr and "flash" in bad.stderr, bad.stderr[-500:])
    bad = subprocess.run([binary, "bench-model", "--model", model, "-p", "4", "-n", "4", "--bf16-terms", "4"],
                         capture_output=True, text=True, timeout=60)
    check("--bf16-terms 4 is refused by name", bad.returncode == 1 and "--bf16-terms" in bad.stderr, bad.stderr[-500:])

    finish()


if __name__ == "__main__":
    main()
