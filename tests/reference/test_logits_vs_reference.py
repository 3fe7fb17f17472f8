"""mlaserve logits vs the float64 NumPy reference, for every supported feature combination.

Run by CTest through pytest (tests/conftest.py).
Every case writes a random tiny model with `mlaserve make-model`, runs `mlaserve logits` on
random token ids, and compares within the bounds of bounds.py: EXACT_BOUND wherever the maths
is exact, a per-case bound for INT4 weights' default int8 activations.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_v3_ref  # noqa: E402
from bounds import EXACT_BOUND, expected_logits, relative_error  # noqa: E402

# On AMX hosts the prompt's GEMMs take activations in 2 bf16 terms, each within 2^-16 of itself.
# Absorbed attention over a bf16 or fp8 cache multiplies in bf16 on AVX512_BF16 hosts (queries and
# softmax weights rounded, 2^-9 each): measured 5.0e-4 to 6.2e-3 on these cases (1e-6 on the
# avx2 build's fp32 products).
BF16_PRODUCTS = 1e-2
BOUND = {"bf16, activations in 2 bf16 terms": 1e-4,
         "f32, fp8 latent cache of three scale blocks, chunked prefill (chunk 7)": BF16_PRODUCTS,
         "f32, fp8 latent cache, decode path": BF16_PRODUCTS, "f32, bf16 latent cache, decode path": BF16_PRODUCTS}
YARN = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 64, "beta_fast": 32,
        "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 1.0}

# name: (dtype, config override, extra `logits` flags)
CASES = {
    "f32 default (q LoRA, groups 8/4, 1 dense layer)": ("f32", {}, []),
    "f32 q_lora_rank null (direct q_proj)": ("f32", {"q_lora_rank": None}, []),
    "f32 YaRN rope scaling": ("f32", {"rope_scaling": YARN}, []),
    "f32 no groups, no dense layer": ("f32", {"n_group": 1, "topk_group": 1, "first_k_dense_replace": 0}, []),
    "f32 groups 4/1, 2 dense layers": ("f32", {"n_group": 4, "topk_group": 1, "first_k_dense_replace": 2}, []),
    "f32 softmax greedy, no renorm, tied embeddings": (
        "f32", {"scoring_func": "softmax", "topk_method": "greedy", "norm_topk_prob": False,
                "tie_word_embeddings": True, "routed_scaling_factor": 1.0}, []),
    "f32 group_limited_greedy softmax": (
        "f32", {"scoring_func": "softmax", "topk_method": "group_limited_greedy"}, []),
    "f32 decode path (chunk 1, absorbed MLA)": ("f32", {"rope_scaling": YARN}, ["--chunk", "1"]),
    "f32 chunked prefill (chunk 7, expanded MLA over the cache)": ("f32", {}, ["--chunk", "7", "--mla-path", "expanded"]),
    # auto: chunks at 0, 7 and 14 expanded; the last 3 tokens after 21 cached absorbed
    "f32 chunked prefill (chunk 7, MLA form chosen per chunk)": ("f32", {}, ["--chunk", "7"]),
    "bf16 chunked prefill (chunk 7, MLA form chosen per chunk)": ("bf16", {}, ["--chunk", "7"]),
    "f32 sharded checkpoint": ("f32", {}, []),
    "bf16": ("bf16", {}, []),
    "bf16 decode path (chunk 1, absorbed MLA from panels of kv_b)": ("bf16", {}, ["--chunk", "1"]),
    "fp8 block-scaled": ("fp8", {}, []),
    # the prompt's GEMMs of 24 tokens on AMX hosts with activations in 2 bf16 terms (elsewhere
    # the exact fp32 GEMM); with 1 (bf16 activations) an expert choice flips and the logits move by 0.1
    "bf16, activations in 2 bf16 terms": ("bf16", {}, ["--bf16-terms", "2"]),
    "fp8 decode path": ("fp8", {"q_lora_rank": None}, ["--chunk", "1"]),
    "int4 routed experts": ("int4", {}, []),
    "int4 group 64, YaRN": ("int4", {"rope_scaling": YARN}, []),
    "int4 routed experts, --act-quant off": ("int4", {}, ["--act-quant", "off"]),
    "int4 routed experts, --act-quant off, decode path": ("int4", {}, ["--act-quant", "off", "--chunk", "1"]),
    # 100 tokens over 8 experts: experts of 64+ tokens take the packed GEMM over dequantized rows
    "int4 routed experts, --act-quant off, 100 tokens": (
        "int4", {"n_routed_experts": 8, "n_group": 1, "topk_group": 1}, ["--act-quant", "off"]),
    "int8 per-channel (W8A8 checkpoint)": ("int8", {}, []),
    "bf16 --requantize q4": ("bf16", {}, ["--requantize", "q4"]),
    "bf16 --requantize q4, decode path (kv_b kept bf16)": ("bf16", {}, ["--requantize", "q4", "--chunk", "1"]),
    # The latent cache in FP8 (and BF16): the reference reads back the values the format's
    # definition gives (fp8_cache_ref); prefill's expanded form computes on them in fp32, the
    # absorbed form in bf16 products (BOUND). Those run dense layers only (no routing), where an
    # expert choice within bf16 rounding of a tie would flip and move a logit by 0.2.
    "f32, fp8 latent cache": ("f32", {}, ["--kv-cache-dtype", "fp8"]),
    "f32, fp8 latent cache of three scale blocks, chunked prefill (chunk 7)": (
        "f32", {"kv_lora_rank": 320, "first_k_dense_replace": 4}, ["--kv-cache-dtype", "fp8", "--chunk", "7"]),
    "f32, fp8 latent cache, decode path": (
        "f32", {"rope_scaling": YARN, "first_k_dense_replace": 4}, ["--kv-cache-dtype", "fp8", "--chunk", "1"]),
    "f32, bf16 latent cache, decode path": ("f32", {"first_k_dense_replace": 4}, ["--kv-cache-dtype", "bf16", "--chunk", "1"]),
    # Past 4,096 keys (kMlaExpandedKeyTile) the expanded form attends a range of keys at a time
    # and merges their softmax terms: 4,500 tokens in chunks of 1,600, the last chunk's queries
    # (from position 3,200) over two ranges, the first ending inside the chunk.
    "f32 4500 tokens, chunks of 1600 expanded over key ranges": (
        "f32", {"max_position_embeddings": 8192}, ["--mla-path", "expanded", "--chunk", "1600"]),
}
LENGTH = {"int4 routed experts, --act-quant off, 100 tokens": 100, "f32 4500 tokens, chunks of 1600 expanded over key ranges": 4500}


def argmax_agrees(got, want, bound):
    """Every position's argmax is the reference's, unless the reference's top two lie within the
    bound of each other (a tie the allowed error may break either way)."""
    top_two = np.sort(want, -1)[:, -2:]
    near_tie = top_two[:, 1] - top_two[:, 0] <= 2 * bound * np.abs(want).max()
    return bool(np.all((got.argmax(-1) == want.argmax(-1)) | near_tie))


def test_activation_dump_matches_the_reference(binary, work_dir):
    """MLASERVE_DUMP's files are the model's intermediates: the embedding, every layer's residual
    stream and the final norm of an f32 model match the reference's within EXACT_BOUND."""
    model, dump = os.path.join(work_dir, "dump_model"), os.path.join(work_dir, "dump")
    subprocess.run([binary, "make-model", "--preset", "tiny", "--dtype", "f32", "--seed", "7", model],
                   check=True, capture_output=True)
    ids = np.random.default_rng(7).integers(0, 32000, size=16)
    subprocess.run([binary, "logits", "--model", model, "--ids", ",".join(map(str, ids)),
                    "--out", os.path.join(model, "logits.npy")],
                   check=True, capture_output=True, env=dict(os.environ, MLASERVE_DUMP=dump))
    cfg, w = deepseek_v3_ref.load(model, "exact")
    states = deepseek_v3_ref.layer_states(cfg, w, ids)
    want = {"0-embed-model": w.get("model.embed_tokens.weight")[ids],
            "0-final_norm-model": deepseek_v3_ref.final_hidden(cfg, w, ids)}
    want.update({f"0-layer_out-{i}": state for i, state in enumerate(states)})
    errors = {name: relative_error(np.load(os.path.join(dump, name + ".npy")).astype(np.float64), value)
              for name, value in want.items()}
    worst = max(errors, key=errors.get)
    assert errors[worst] <= EXACT_BOUND, f"worst {worst}: {errors[worst]:.2e}"


@pytest.mark.parametrize("name", CASES)
def test_logits_match_the_reference(binary, work_dir, name):
    dtype, override, flags = CASES[name]
    index = list(CASES).index(name)
    model = os.path.join(work_dir, f"case{index}")
    make = [binary, "make-model", "--preset", "tiny", "--dtype", dtype, "--seed", str(100 + index),
            "--override", json.dumps(override), model]
    if "sharded" in name:
        make += ["--shard-mb", "20"]
    if "group 64" in name:
        make += ["--group-size", "64"]
    subprocess.run(make, check=True, capture_output=True)
    ids = np.random.default_rng(index).integers(0, 32000, size=LENGTH.get(name, 24))
    out = os.path.join(model, "logits.npy")
    subprocess.run([binary, "logits", "--model", model, "--ids", ",".join(map(str, ids)), "--out", out] + flags,
                   check=True, capture_output=True)
    got = np.load(out).astype(np.float64)
    requantize_q4 = "--requantize" in flags
    int8_activations = (dtype == "int4" or requantize_q4) and "off" not in flags
    latent_cache = flags[flags.index("--kv-cache-dtype") + 1] if "--kv-cache-dtype" in flags else "exact"
    want, bound = expected_logits(deepseek_v3_ref.forward, model, ids, int8_activations, requantize_q4=requantize_q4,
                                  latent_cache=latent_cache)
    error, bound = relative_error(got, want), BOUND.get(name, bound)
    if latent_cache != "exact" and bound == EXACT_BOUND:  # the cache's rounding is what the bound resolves
        unrounded = relative_error(got, deepseek_v3_ref.forward(model, ids, "exact"))
        assert unrounded > 3 * bound, f"{unrounded:.2e} from the unrounded cache's logits: is the cache rounded?"
    assert np.isfinite(got).all()
    assert error <= bound, f"max rel error {error:.2e} (bound {bound:.0e})"
    assert argmax_agrees(got, want, bound), f"argmax agreement {(got.argmax(-1) == want.argmax(-1)).mean():.0%}"
