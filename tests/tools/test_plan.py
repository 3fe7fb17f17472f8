"""mlaserve plan reproduces the seed deployment's published table from its inputs and computes
parameter counts from the real configs. Run by CTest through pytest (tests/conftest.py)."""
import json
import os
import subprocess

import pytest


def plan(binary, *args):
    out = subprocess.run([binary, "plan", "--json", *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


@pytest.fixture(scope="module")
def mi355x(binary):
    return plan(binary, "--model", "kimi-k3", "--hardware", "mi355x", "--devices", "8", "--measured-tok-s", "952",
                "--price", "2.5")


def test_seed_cost_table(binary, mi355x):
    """Measured throughput and price give the seed's tokens/s per dollar-hour."""
    b200 = plan(binary, "--model", "kimi-k3", "--hardware", "b200", "--devices", "16", "--measured-tok-s", "498",
                "--price", "4.25")
    b300 = plan(binary, "--model", "kimi-k3", "--hardware", "b300", "--devices", "8", "--measured-tok-s", "1568",
                "--price", "6")
    assert mi355x["tok_s_per_dollar_hour"] == pytest.approx(47.6, rel=0.005)
    assert b200["tok_s_per_dollar_hour"] == pytest.approx(7.3, rel=0.01)
    assert b300["tok_s_per_dollar_hour"] == pytest.approx(32.7, rel=0.005)
    assert mi355x["measured_tok_s_per_node"] / b200["measured_tok_s_per_node"] == pytest.approx(3.8, rel=0.02)
    assert b300["measured_tok_s"] / mi355x["measured_tok_s"] == pytest.approx(1.65, rel=0.01)


def test_kimi_k3_fit(binary, mi355x):
    """~1.45 TB of weights: two nodes of 192 GB cards, one of 288 GB."""
    b200 = plan(binary, "--model", "kimi-k3", "--hardware", "b200")
    assert not b200["fits"] and b200["nodes_needed"] == 2
    assert plan(binary, "--model", "kimi-k3", "--hardware", "b300")["fits"]
    assert mi355x["fits"]
    assert mi355x["weight_bytes"] / 2**40 == pytest.approx(1.42, rel=0.02)  # TiB, as the checkpoint lists it


def test_parameter_counts_from_published_configs(binary, mi355x):
    deepseek, k2 = plan(binary, "--model", "deepseek-v3"), plan(binary, "--model", "kimi-k2")
    assert deepseek["total_params"] == pytest.approx(671e9, rel=0.01)
    assert deepseek["active_params"] == pytest.approx(37e9, rel=0.02)
    assert k2["total_params"] == pytest.approx(1.03e12, rel=0.01)
    assert k2["active_params"] == pytest.approx(32e9, rel=0.02)
    assert mi355x["total_params"] == pytest.approx(2.8e12, rel=0.02)
    assert mi355x["kv_bytes_per_token"] == 27648  # Kimi K3's MLA latent bytes a token
    assert mi355x["kda_recurrent_state_bytes"] / 2**20 == pytest.approx(414, rel=0.001)
    assert mi355x["head_padding"]["heads_per_rank"] == 12 and mi355x["head_padding"]["padded_heads"] == 16


@pytest.fixture(scope="module")
def mini_config(binary, work_dir):
    """The mini preset's config.json as make-model writes it (written with one layer, then given its 8)."""
    mini = os.path.join(work_dir, "mini-config")
    subprocess.run([binary, "make-model", "--preset", "mini", "--dtype", "bf16", "--override",
                    '{"num_hidden_layers": 1, "first_k_dense_replace": 1}', mini], check=True, capture_output=True)
    config = json.load(open(os.path.join(mini, "config.json")))
    config.update({"num_hidden_layers": 8, "first_k_dense_replace": 1})
    path = os.path.join(work_dir, "mini.json")
    json.dump(config, open(path, "w"))
    return path


def test_a_config_make_model_wrote(binary, mini_config):
    """The mini preset's published shape, read from the config.json make-model writes."""
    mini_plan = plan(binary, "--model", mini_config, "--hardware", "cpu-dev-2core", "--devices", "1")
    assert mini_plan["total_params"] == pytest.approx(455e6, rel=0.002)
    assert mini_plan["active_params"] == pytest.approx(103e6, rel=0.01)


@pytest.mark.parametrize("preset, dtype, want",
                         [("tiny", "int4", "int4:32"), ("tiny", "int8", "int8"), ("kimi-k3-tiny", "mxfp4", "mxfp4")])
def test_quantised_configs_read_in_their_native_format(binary, work_dir, preset, dtype, want):
    directory = os.path.join(work_dir, f"{preset}-{dtype}")
    subprocess.run([binary, "make-model", "--preset", preset, "--dtype", dtype, directory], check=True,
                   capture_output=True)
    assert plan(binary, "--model", directory, "--hardware", "b200", "--devices", "1")["weights"] == want


def test_a_tp_size_that_does_not_divide_the_heads_is_an_error(binary):
    bad = subprocess.run([binary, "plan", "--model", "kimi-k3", "--hardware", "b200", "--tp", "7"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "do not divide" in bad.stderr


def catalog(binary, name):
    out = subprocess.run([binary, "plan", "--dump-catalog"], check=True, capture_output=True, text=True).stdout
    return next(entry for entry in json.loads(out) if entry["name"] == name)


def test_a_decode_step_is_its_terms(binary, mi355x):
    """fixed + collectives + activations + max(weights + cache, compute), the largest term named, one
    stream's speed its inverse."""
    step = mi355x["predicted"]["decode_step_s"]
    assert step["total"] == pytest.approx(step["fixed"] + step["collectives"] + step["activations"] +
                                          max(step["weights"] + step["cache"], step["compute"]), rel=1e-12)
    terms = {k: step[k] for k in ("weights", "cache", "compute", "collectives", "activations", "fixed")}
    assert step["binding"] == max(terms, key=terms.get)
    assert mi355x["predicted"]["single_stream_plain_tok_s"] == pytest.approx(1 / step["total"], rel=1e-12)


def test_decode_step_against_an_independent_count(binary):
    """DeepSeek-V3 on 8 x H100, one stream at 1024 + 200 tokens of context, recomputed here from the
    plan's parameter counts and the catalog's figures."""
    out = plan(binary, "--model", "deepseek-v3", "--hardware", "h100", "--devices", "8")
    hw, step = catalog(binary, "h100"), out["predicted"]["decode_step_s"]
    bandwidth = hw["bandwidth_gb_s"] * 1e9 * hw["bandwidth_efficiency"]
    moe_layers, experts, k = out["layers"]["moe"], 256, 8
    expert_bytes = out["params"]["routed_experts"] / (moe_layers * experts) * (1 + 4 / 128**2)  # fp8 + block scales
    dense_bytes = out["active_weight_bytes_per_token"] - moe_layers * k * expert_bytes
    assert step["weights"] == pytest.approx(dense_bytes / (8 * bandwidth) + moe_layers * k * expert_bytes / (8 * bandwidth),
                                            rel=1e-9)
    assert step["cache"] == pytest.approx((1024 + 200) * out["kv_bytes_per_token"] / bandwidth, rel=1e-9)
    message = out["params"]["embedding"] / 129280 * 2  # one token's hidden state in bf16
    all_reduce = hw["collective_latency_us"] * 1e-6 + message * 2 * 7 / 8 / (hw["interconnect_gb_s"] * 1e9)
    assert step["collectives"] == pytest.approx((2 * 61 + 1) * all_reduce, rel=1e-9)
    kernels = 61 * 11 + 58 * 10 + 3 * 4 + 6  # MLA and MoE or dense MLP a layer, and the step's own
    assert step["fixed"] == pytest.approx(kernels * hw["kernel_overhead_us"] * 1e-6, rel=1e-9)
    # bf16: 12 passes over the hidden state a layer; per MoE layer and routed expert (top 8), the
    # gate/up and activation outputs at 2048 / 8 columns a rank, each written and read, and the
    # expert's output at 7168, written and read.
    hidden = 7168
    activation_bytes = 2 * (61 * 12 * hidden + 58 * 8 * (2 * 2 * 2048 / 8 + 2 * 2048 / 8 + 2 * hidden))
    assert step["activations"] == pytest.approx(activation_bytes / bandwidth, rel=1e-9)


def test_speculative_decoding(binary):
    base = ["--model", "kimi-k3", "--hardware", "mi355x", "--devices", "8", "--max-concurrency", "64"]
    plain = plan(binary, *base)["predicted"]
    dspark = plan(binary, *base, "--speculative", "dspark")["predicted"]
    weak = plan(binary, *base, "--speculative", "dspark:1.2")["predicted"]
    assert dspark["single_stream_plain_tok_s"] == pytest.approx(plain["single_stream_tok_s"], rel=1e-12)
    # 3.85 tokens a step for a step that reads more experts than one token's: faster, by less than 3.85x.
    assert plain["single_stream_tok_s"] * 1.5 < dspark["single_stream_tok_s"] < plain["single_stream_tok_s"] * 3.85
    assert weak["single_stream_tok_s"] < plain["single_stream_tok_s"]  # 8 positions verified for 1.2 kept
    mtp = plan(binary, *base, "--speculative", "mtp")["predicted"]
    assert plain["single_stream_tok_s"] < mtp["single_stream_tok_s"] < plain["single_stream_tok_s"] * 1.875
    # One stream's speed is the accepted tokens over the verify step (8 positions) and the draft,
    # both printed: the verify step reads the experts 8 tokens touch, more than one token's.
    spec = dspark["speculative"]
    verify, one = spec["verify_step_s"], plain["decode_step_s"]
    assert dspark["single_stream_tok_s"] == pytest.approx(3.85 / (verify["total"] + spec["draft_s"]), rel=1e-12)
    assert verify["weights"] > one["weights"] and verify["fixed"] == one["fixed"] and spec["draft_s"] > 0
    assert verify["total"] == pytest.approx(verify["fixed"] + verify["collectives"] + verify["activations"] +
                                            max(verify["weights"] + verify["cache"], verify["compute"]), rel=1e-12)


def test_an_eagle_draft_costs_a_layer_and_the_lm_head_per_token(binary):
    """Kimi K2 on 8 x MI325X, one stream: an EAGLE draft of 3 tokens against prompt lookup of 3
    tokens with the same acceptance (the same verify step, no draft): the difference is 3 forwards
    of one dense layer at K2's width (hidden 7168, MLP 18432) and its LM head (163,840 x 7168),
    bf16, read at the catalog's bandwidth, and 21 kernels each (an MLA and a dense MLP layer's and
    a step's)."""
    base = ["--model", "kimi-k2", "--hardware", "mi325x", "--devices", "8", "--max-concurrency", "1"]
    eagle = plan(binary, *base, "--speculative", "eagle:3.5")["predicted"]
    ngram = plan(binary, *base, "--speculative", "ngram:3.5", "--num-draft-tokens", "3")["predicted"]
    assert eagle["speculative"]["draft_tokens"] == ngram["speculative"]["draft_tokens"] == 3
    hw = catalog(binary, "mi325x")
    hidden, mlp, vocab = 7168, 18432, 163840
    params = 4 * hidden**2 + 3 * hidden * mlp + vocab * hidden
    forward = params * 2 / (8 * hw["bandwidth_gb_s"] * 1e9 * hw["bandwidth_efficiency"]) + 21 * hw["kernel_overhead_us"] * 1e-6
    draft_s = 3.5 / eagle["single_stream_tok_s"] - 3.5 / ngram["single_stream_tok_s"]
    assert draft_s == pytest.approx(3 * forward, rel=1e-9)


def test_an_mtp_draft_costs_a_layer_and_its_head_per_token(binary):
    """DeepSeek-V3 on 8 x MI355X, one stream, MTP drafting 2 tokens: per draft token a target
    layer's share of the plain step, and the module's eh_proj (2 x 7168 x 7168) with the shared LM
    head (129,280 x 7168), bf16, read at the catalog's bandwidth, and 9 kernels (two input norms,
    eh_proj and a step's six)."""
    base = ["--model", "deepseek-v3", "--hardware", "mi355x", "--devices", "8", "--max-concurrency", "1"]
    mtp = plan(binary, *base, "--speculative", "mtp", "--num-draft-tokens", "2")["predicted"]
    plain = plan(binary, *base)["predicted"]
    hw = catalog(binary, "mi355x")
    hidden, vocab = 7168, 129280
    head = (2 * hidden**2 + vocab * hidden) * 2 / (8 * hw["bandwidth_gb_s"] * 1e9 * hw["bandwidth_efficiency"])
    head += 9 * hw["kernel_overhead_us"] * 1e-6
    layer = plain["decode_step_s"]["total"] / 61
    assert mtp["speculative"]["draft_s"] == pytest.approx(2 * (layer + head), rel=1e-9)


@pytest.mark.parametrize("args, message", [(["--speculative", "ngram"], "needs a mean acceptance length"),
                                           (["--speculative", "eagle"], "needs a mean acceptance length"),
                                           (["--speculative", "dspark:9"], "must be 1 to 8"),
                                           (["--speculative", "dspark:x"], "is not a mean acceptance"),
                                           (["--speculative", "medusa"], "unknown --speculative"),
                                           (["--speculative", "dspark", "--num-draft-tokens", "2"], "must be 1 to 3"),
                                           (["--speculative", "mtp", "--num-draft-tokens", "-1"], "--num-draft-tokens must be"),
                                           (["--speculative", "mtp", "--num-draft-tokens", "0"], "--num-draft-tokens must be"),
                                           (["--num-draft-tokens", "3"], "--num-draft-tokens needs --speculative")])
def test_bad_speculative_values_are_refused(binary, args, message):
    bad = subprocess.run([binary, "plan", *args], capture_output=True, text=True)
    assert bad.returncode == 1 and message in bad.stderr


def test_the_cache_dtype_sets_the_latent_bytes(binary):
    """--kv-cache-dtype fp8 (as vLLM, SGLang and ATOM deploy) stores a latent value in one byte, fp32 in
    four: the bytes a token, the tokens the free memory holds and a decode step's cache read follow
    (DeepSeek-V3: its cache is all latent); Kimi K3's KDA state does not."""
    base = ["--model", "deepseek-v3", "--hardware", "mi355x", "--devices", "8"]
    out = {dtype: plan(binary, *base, "--kv-cache-dtype", dtype) for dtype in ("bf16", "fp8", "fp32")}
    latent = out["bf16"]["kv_bytes_per_token"] // 2
    assert latent == out["bf16"]["layers"]["mla"] * (512 + 64)
    for dtype, size in (("fp8", 1), ("fp32", 4)):
        assert out[dtype]["kv_cache_dtype"] == dtype
        assert out[dtype]["kv_bytes_per_token"] == latent * size
        assert out[dtype]["max_kv_tokens"] == pytest.approx(out["bf16"]["max_kv_tokens"] * 2 / size, rel=1e-6)
        step, bf16_step = out[dtype]["predicted"]["decode_step_s"], out["bf16"]["predicted"]["decode_step_s"]
        assert step["cache"] == pytest.approx(bf16_step["cache"] * size / 2, rel=1e-12)
        assert step["weights"] == bf16_step["weights"]
    k3 = ["--model", "kimi-k3", "--hardware", "mi355x", "--devices", "8"]
    state = {dtype: plan(binary, *k3, "--kv-cache-dtype", dtype)["state_bytes_per_sequence"] for dtype in ("bf16", "fp8")}
    assert state["fp8"] == state["bf16"] > 0
    bad = subprocess.run([binary, "plan", *base, "--kv-cache-dtype", "int4"], capture_output=True, text=True)
    assert bad.returncode == 1 and "--kv-cache-dtype must be bf16, fp8 or fp32" in bad.stderr


def test_time_to_first_token(binary):
    """12 heads a rank: the padded kernel and the generic one; 16 a rank: no choice to make."""
    k3 = plan(binary, "--model", "kimi-k3", "--hardware", "mi355x", "--prompt-len", "172000")["predicted"]
    short = plan(binary, "--model", "kimi-k3", "--hardware", "mi355x", "--prompt-len", "8192")["predicted"]
    assert k3["ttft_generic_s"] > k3["ttft_s"]
    assert k3["ttft_s"] / 172000 > short["ttft_s"] / 8192  # a token's attention grows with the prompt
    deepseek = plan(binary, "--model", "deepseek-v3", "--hardware", "h100", "--prompt-len", "4096")["predicted"]
    assert "ttft_generic_s" not in deepseek and deepseek["ttft_s"] > 0


def test_throughput_curve(binary):
    full = plan(binary, "--model", "kimi-k3", "--hardware", "mi355x")
    capped = plan(binary, "--model", "kimi-k3", "--hardware", "mi355x", "--max-concurrency", "100")["predicted"]
    assert [p["concurrency"] for p in capped["curve"]] == [1, 2, 4, 8, 16, 32, 64, 100]
    assert capped["peak_concurrency"] <= 100
    # The sweep ends where the cache is full of 1,024 + 400-token sequences, as the plan counts it.
    at_1424 = plan(binary, "--model", "kimi-k3", "--hardware", "mi355x", "--context", "1424")
    assert full["predicted"]["curve"][-1]["concurrency"] == at_1424["max_concurrency"]
    assert full["predicted"]["peak_total_tok_s"] >= capped["peak_total_tok_s"]
    assert full["predicted"]["tok_s_per_dollar_hour"] == pytest.approx(
        full["predicted"]["peak_total_tok_s"] / full["price_per_hour"], rel=1e-12)


def test_a_hardware_file_overrides_the_figures_it_names(binary, work_dir):
    path = os.path.join(work_dir, "b200-no-launch-cost.json")
    json.dump([{"name": "b200", "kernel_overhead_us": 0, "inter_node_latency_us": 100}], open(path, "w"))
    base = ["--model", "kimi-k3", "--hardware", "b200", "--devices", "16"]
    given = plan(binary, *base, "--hardware-file", path)["predicted"]["decode_step_s"]
    builtin = plan(binary, *base)["predicted"]["decode_step_s"]
    assert given["fixed"] == 0 and builtin["fixed"] > 0
    assert given["weights"] == builtin["weights"] and given["collectives"] > builtin["collectives"]


def test_prefill_attention_runs_at_the_attention_efficiency(binary, work_dir):
    """The TTFT's attention term is its FLOPs at attention_efficiency of the bf16 peak: DeepSeek-V3's
    causal MLA over a 32,768-token prompt in 8,192-token chunks, counted here, on 8 x H100."""
    def ttft(efficiency):
        path = os.path.join(work_dir, f"h100-attention-{efficiency}.json")
        json.dump([{"name": "h100", "attention_efficiency": efficiency}], open(path, "w"))
        return plan(binary, "--model", "deepseek-v3", "--hardware", "h100", "--devices", "8", "--prompt-len", "32768",
                    "--hardware-file", path)["predicted"]["ttft_s"]
    chunk, layers, heads, qk_head_dim, v_head_dim = 8192, 61, 128, 192, 128
    pairs = sum(chunk * (start + chunk / 2) for start in range(0, 32768, chunk))  # causal (query, key) pairs
    flops = layers * heads * 2 * (qk_head_dim + v_head_dim) * pairs
    attention_s = flops / (8 * 989e12)  # the heads over 8 ranks at the full bf16 peak
    assert ttft(0.5) - ttft(1.0) == pytest.approx(attention_s, rel=1e-9)
    for bad in (0, 1.5):
        path = os.path.join(work_dir, "h100-bad-attention.json")
        json.dump([{"name": "h100", "attention_efficiency": bad}], open(path, "w"))
        out = subprocess.run([binary, "plan", "--model", "deepseek-v3", "--hardware", "h100", "--hardware-file", path],
                             capture_output=True, text=True)
        assert out.returncode == 1 and "attention_efficiency must be in (0, 1]" in out.stderr


def test_routed_experts_compute_at_the_expert_flops_efficiency(binary, work_dir):
    """A prefill chunk's routed-expert FLOPs run at expert_flops_efficiency of the units they run
    on: DeepSeek-V3's 8,192-token prompt (one chunk, compute-bound) on 8 x H100, its FP8 experts
    (58 MoE layers x 8 of 3 x 7168 x 2048) on the FP8 peak, counted here."""
    def ttft(efficiency):
        path = os.path.join(work_dir, f"h100-experts-{efficiency}.json")
        json.dump([{"name": "h100", "expert_flops_efficiency": efficiency}], open(path, "w"))
        return plan(binary, "--model", "deepseek-v3", "--hardware", "h100", "--devices", "8", "--prompt-len", "8192",
                    "--hardware-file", path)["predicted"]["ttft_s"]
    flops = 8192 * 2 * 58 * 8 * 3 * 7168 * 2048
    assert ttft(0.5) - ttft(1.0) == pytest.approx(flops / (8 * 1979e12), rel=1e-9)
    path = os.path.join(work_dir, "h100-bad-experts.json")
    json.dump([{"name": "h100", "expert_flops_efficiency": 0}], open(path, "w"))
    out = subprocess.run([binary, "plan", "--model", "deepseek-v3", "--hardware", "h100", "--hardware-file", path],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "expert_flops_efficiency and attention_efficiency must be in (0, 1]" in out.stderr


def test_this_cpu_is_probed(binary, mini_config):
    out = plan(binary, "--model", mini_config, "--hardware", "this-cpu", "--devices", "1")
    assert out["hardware"] == "this-cpu" and out["predicted"]["single_stream_tok_s"] > 0
    assert out["predicted"]["decode_step_s"]["collectives"] == 0
    assert out["predicted"]["decode_step_s"]["activations"] == 0  # in cache at a CPU's batches
