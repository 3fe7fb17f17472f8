"""mlaserve logits vs the float64 NumPy reference, for every supported feature combination.

Usage: test_logits_vs_reference.py MLASERVE WORK_DIR
Every case writes a random tiny model with `mlaserve make-model`, runs `mlaserve logits` on
random token ids, and compares. Error measure: max |mlaserve - reference| / max |reference|
over all logits. Bound 1e-3 for every dtype: both sides dequantise the same stored values
exactly (BF16, FP8 x block scale and INT4 x bf16 scale are exact in fp32), so the only
difference is mlaserve's fp32 arithmetic, whose error over these depths is ~1e-6 relative.
4-bit weights meet int8 activations in mlaserve (kernels/quant_dot.h); the reference rounds
its activations the same way (checkpoint.Weights.apply), which it matches to ~3e-7 unless an
activation lies within float rounding of a .5 tie: the two sides may then round it apart by
one step, which moved the logits by 1.1e-3 in one Kimi Linear case. Bound 3e-3 for those;
not emulating the rounding errs by 5e-3 (Kimi Linear INT4) to 0.24 (Kimi K3 MXFP4).
"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_v3_ref  # noqa: E402

TOLERANCE = {"f32": 1e-3, "bf16": 1e-3, "fp8": 1e-3, "int8": 1e-3, "int4": 3e-3, "mxfp4": 3e-3}
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
    "int8 per-channel (W8A8 checkpoint)": ("int8", {}, []),
}


def run_case(binary, work, index, name, dtype, override, flags):
    model = os.path.join(work, f"case{index}")
    make = [binary, "make-model", "--preset", "tiny", "--dtype", dtype, "--seed", str(100 + index),
            "--override", json.dumps(override), model]
    if "sharded" in name:
        make += ["--shard-mb", "20"]
    if "group 64" in name:
        make += ["--group-size", "64"]
    subprocess.run(make, check=True, capture_output=True)
    rng = np.random.default_rng(index)
    ids = rng.integers(0, 32000, size=24)
    out = os.path.join(model, "logits.npy")
    subprocess.run([binary, "logits", "--model", model, "--ids", ",".join(map(str, ids)), "--out", out] + flags,
                   check=True, capture_output=True)
    got = np.load(out).astype(np.float64)
    want = deepseek_v3_ref.forward(model, ids)
    error = np.abs(got - want).max() / np.abs(want).max()
    nan_free = np.isfinite(got).all()
    same_argmax = (got.argmax(-1) == want.argmax(-1)).mean()
    return error, nan_free, same_argmax


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    failed = []
    for index, (name, (dtype, override, flags)) in enumerate(CASES.items()):
        error, nan_free, same_argmax = run_case(binary, work, index, name, dtype, override, flags)
        ok = nan_free and error <= TOLERANCE[dtype]
        print(f"{'ok  ' if ok else 'FAIL'} {name}: max rel error {error:.2e}, argmax agreement {same_argmax:.0%}")
        if not ok:
            failed.append(name)
    if failed:
        print("failed combinations: " + "; ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
