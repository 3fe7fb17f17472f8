"""bench-model's report on the tiny model: every field the issue names, medians of the runs, the
machine's limits as the better of two measurements, and the roofline percentages recomputed
here from config.json and the measured machine figures. Run by CTest through pytest
(tests/conftest.py)."""
import json
import os
import statistics
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from server_fixture import make_tiny_model  # noqa: E402

PROMPT = 24


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


def bench(binary, model, *args, timeout=300):
    return subprocess.run([binary, "bench-model", "--model", model, *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def tiny(binary, work_dir):
    return make_tiny_model(binary, os.path.join(work_dir, "tiny"))


@pytest.fixture(scope="module")
def config(tiny):
    with open(os.path.join(tiny, "config.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def report(binary, tiny):
    proc = bench(binary, tiny, "-p", str(PROMPT), "-n", "4", "--batch", "3", "-r", "3", "--threads", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_fields_and_medians(report, config):
    for key in ("prefill_tok_s", "decode_tok_s", "decode_batch_tok_s", "membw_gb_s", "read_bw_gb_s", "peak_fma_gflops",
                "decode_roofline_pct", "decode_read_roofline_pct", "prefill_peak_pct", "peak_rss_mb", "active_params"):
        assert report.get(key, 0) > 0, key
    assert report.get("threads") == 1, "--threads after the subcommand sets the threads"
    assert not config.get("tie_word_embeddings", False)
    for name, runs in (("prefill", "prefill_runs"), ("decode", "decode_runs"), ("decode_batch", "decode_batch_runs")):
        assert len(report[runs]) == 3, f"{name}: one figure per repetition"
        assert close(report[f"{name}_tok_s"], statistics.median(report[runs])), f"{name}: the median"
    assert close(report["decode_batch_speedup"], report["decode_batch_tok_s"] / report["decode_tok_s"])


def test_prefill_flops_and_rooflines(report, config):
    flops = expected_prefill_flops(config, report["active_params"], PROMPT)
    assert close(report["flops_per_prefill_token"], flops, 1e-6), "lm_head once per prompt"
    assert close(report["prefill_peak_pct"], 100 * report["prefill_tok_s"] * flops / (report["peak_fma_gflops"] * 1e9),
                 1e-6)
    assert close(report["decode_roofline_pct"],
                 100 * report["decode_tok_s"] * report["bytes_per_decoded_token"] / (report["membw_gb_s"] * 1e9))
    assert close(report["decode_read_roofline_pct"],
                 100 * report["decode_tok_s"] * report["bytes_per_decoded_token"] / (report["read_bw_gb_s"] * 1e9))
    if report["peak_bf16_dot_gflops"] > 0:  # a build with AVX512_BF16
        assert close(report["prefill_bf16_dot_peak_pct"],
                     100 * report["prefill_tok_s"] * flops / (report["peak_bf16_dot_gflops"] * 1e9), 1e-6)
    else:
        assert report["prefill_bf16_dot_peak_pct"] is None


def test_machine_limits_are_the_better_of_two_measurements(report):
    before, after = report["machine_before"], report["machine_after"]
    for name, key in (("triad_gb_s", "membw_gb_s"), ("read_gb_s", "read_bw_gb_s"), ("fma_gflops", "peak_fma_gflops"),
                      ("bf16_dot_gflops", "peak_bf16_dot_gflops")):
        assert report[key] == max(before[name], after[name]), key


def test_batch_step(report, config, batch=3, generate=4):
    """A batch step reads the weights once, each routed expert its tokens chose once: between
    top-k and batch x top-k experts a MoE layer, and the bytes, roofline and speedup limit follow."""
    top_k, n_experts = config["num_experts_per_tok"], config["n_routed_experts"]
    experts = report["decode_batch_experts_per_layer"]
    assert top_k <= experts <= min(batch * top_k, n_experts) + 1e-9
    moe_layers = config["num_hidden_layers"] - config["first_k_dense_replace"]
    routed_per_token = moe_layers * top_k * 3 * config["hidden_size"] * config["moe_intermediate_size"] * 2  # bf16
    kv_per_token = config["num_hidden_layers"] * (config["kv_lora_rank"] + config["qk_rope_head_dim"]) * 2 * (
        1 + generate // 2)  # bf16 latent rows at the decode's average depth
    weights_per_token = report["bytes_per_decoded_token"] - kv_per_token
    step = weights_per_token - routed_per_token + routed_per_token * experts / top_k + batch * kv_per_token
    assert close(report["decode_batch_bytes_per_step"], step, 1e-9), "other weights once + distinct experts + caches"
    assert close(report["decode_batch_roofline_pct"],
                 100 * report["decode_batch_tok_s"] / batch * step / (report["membw_gb_s"] * 1e9), 1e-9)
    assert close(report["decode_batch_speedup_limit"], batch * report["bytes_per_decoded_token"] / step, 1e-9)


def test_without_depth_or_drafts(report):
    """A fresh prompt's prefill is expanded; no decode at the start beside it; no verification."""
    assert report["mla_prefill"] == "expanded"
    assert report["decode_start_tok_s"] is None and report["decode_depth_change_pct"] is None
    assert "decode_start_runs" not in report
    assert report["num_draft_tokens"] == 0 and report["verify_cost"] is None


@pytest.mark.parametrize("form, want, terms", [("auto", "absorbed", "3"), ("expanded", "expanded", "2"),
                                               ("absorbed", "absorbed", "1")])
def test_prefill_at_depth(binary, tiny, config, form, want, terms):
    """--depth D: the prefill runs after D cached tokens (llama-bench's "pp4 @ d64"), its FLOPs
    counting attention over them; auto absorbs 4 tokens after 64 cached, --mla-prefill forces
    either form; each run also names its --bf16-terms. At depth, decode at the start is timed
    beside decode at depth in every repetition, and the change is the median of each pair's."""
    proc = bench(binary, tiny, "-p", "4", "-n", "2", "--batch", "2", "--depth", "64", "-r", "3", "--threads", "1",
                 "--mla-prefill", form, "--bf16-terms", terms, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["bf16_terms"] == int(terms)
    assert report["mla_prefill"] == want
    flops = expected_prefill_flops(config, report["active_params"], 4, depth=64)
    assert close(report["flops_per_prefill_token"], flops, 1e-6)
    starts, depths, changes = report["decode_start_runs"], report["decode_runs"], report["decode_depth_change_runs"]
    assert len(starts) == len(depths) and all(v > 0 for v in starts)
    assert close(report["decode_start_tok_s"], statistics.median(starts))
    pairs = [100 * (depth / start - 1) for depth, start in zip(depths, starts)]
    assert all(close(a, b, 1e-9) for a, b in zip(changes, pairs))
    assert close(report["decode_depth_change_pct"], statistics.median(pairs))


def test_the_table_at_depth(binary, tiny):
    table = bench(binary, tiny, "-p", "4", "-n", "2", "--batch", "2", "--depth", "64", "-r", "1", "--threads", "1")
    assert "| pp4 @ d64" in table.stdout and "MLA absorbed" in table.stdout, table.stdout
    assert "| tg2 @ d64" in table.stdout, table.stdout
    assert "| tg2 " in table.stdout and "decode at the start; tg2 @ d64" in table.stdout, table.stdout


def test_hybrid_prefill_flops_and_verification(binary, work_dir):
    """Kimi Linear (2 MLA and 2 KDA layers): attention FLOPs counted for the MLA layers only;
    --num-draft-tokens 3 times a verification step's cost in decode steps, alone and at --batch."""
    model = os.path.join(work_dir, "kimi-linear-tiny")
    subprocess.run([binary, "make-model", "--preset", "kimi-linear-tiny", "--seed", "3", model], check=True,
                   capture_output=True)
    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)
    proc = bench(binary, model, "-p", "8", "-n", "2", "--batch", "2", "-r", "1", "--threads", "1",
                 "--num-draft-tokens", "3", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["num_draft_tokens"] == 3 and report["verify_cost"] > 0 and report["verify_batch_cost"] > 0
    assert len(report["verify_cost_runs"]) == 1
    assert close(report["flops_per_prefill_token"], expected_prefill_flops(config, report["active_params"], 8), 1e-6)


@pytest.mark.parametrize("args, named", [
    (["-p", "4", "-n", "4", "--num-draft-tokens", "-1"], "--num-draft-tokens"),
    (["-p", "0", "-n", "4"], "-p"),
    (["-p", "4", "-n", "4", "--depth", "-5"], "--depth"),
    (["-p", "4", "-n", "4", "--mla-prefill", "flash"], "--mla-prefill"),
    (["-p", "4", "-n", "4", "--bf16-terms", "4"], "--bf16-terms"),
])
def test_bad_options_are_refused_by_name(binary, tiny, args, named):
    bad = bench(binary, tiny, *args, timeout=60)
    assert bad.returncode != 0 and named in bad.stderr, bad.stderr[-500:]


def test_a_bad_batch_is_refused_before_the_model_is_opened(binary, work_dir):
    bad = bench(binary, os.path.join(work_dir, "no-such-model"), "-p", "4", "-n", "4", "--batch", "0", timeout=60)
    assert bad.returncode == 1 and "--batch" in bad.stderr and "config.json" not in bad.stderr, bad.stderr[-500:]
