"""Block drafts as mlaserve runs them (model/dflash.h, through dflash_dump) against the float64
NumPy reference (dflash_ref), on random targets written by make-model (DeepSeek-V3, Kimi Linear,
and Kimi K3, whose handed-over state is the attention-residual mix the next layer reads) and
random block drafts written by dflash_ref.write_random: the target's hidden states at target_layer_ids, the last
normed states of two blocks drafted in one batch (different context lengths, one context
written in two pieces), and their logits and greedy tokens — with a Markov head and the target's
LM head, and without one but with a head of the draft's own — all within EXACT_BOUND.
Run by CTest through pytest (--binary mlaserve, --tool dflash_dump)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import deepseek_v3_ref as ref  # noqa: E402
import dflash_ref  # noqa: E402
import kimi_linear_ref  # noqa: E402
from bounds import EXACT_BOUND, relative_error  # noqa: E402
from checkpoint import read_checkpoint, to_float  # noqa: E402


def mask_token_id(target):
    """Kimi K3's block drafts mask with its <|MASK|> token; the other targets have none (any id)."""
    config = json.load(open(os.path.join(target, "tokenizer_config.json")))
    masks = [int(i) for i, t in config.get("added_tokens_decoder", {}).items() if t["content"] == "<|MASK|>"]
    return masks[0] if masks else 7


def draft_config(target_cfg, heads, kv_heads, layers, markov_rank, mask):
    return {"vocab_size": target_cfg["vocab_size"], "hidden_size": target_cfg["hidden_size"], "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": 16,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "block_size": 5,
            "dflash_config": {"block_size": 5, "mask_token_id": mask, "target_layer_ids": layers,
                              "markov_rank": markov_rank}}


def target_reference(preset, target, ids):
    """(config, per-layer states, embedding, head) of the target from its float64 reference."""
    if preset == "tiny":
        cfg, w = ref.load(target, "exact")
        return cfg, ref.layer_states(cfg, w, ids), w.get("model.embed_tokens.weight"), ref.head(w, cfg)
    cfg, w, root, states = kimi_linear_ref.layer_states(target, ids, "exact")
    return cfg, states, w.get(root + "model.embed_tokens.weight"), w.linear(root + "lm_head")


CASES = {  # name: (preset, dtype, seed, heads, kv_heads, target layers (-1: the last), markov_rank, own head)
    "f32 GQA Markov": ("tiny", "f32", 11, 4, 2, [0, -1], 8, False),
    "bf16 own head": ("tiny", "bf16", 12, 2, 2, [1], 0, True),
    "kimi linear": ("kimi-linear-tiny", "f32", 13, 4, 2, [0, 2, -1], 8, False),
    "kimi k3 attention residuals": ("kimi-k3-tiny", "bf16", 14, 4, 1, [0, 1, -1], 8, False),
}


@pytest.mark.parametrize("name", CASES)
def test_block_draft_matches_the_reference(binary, tool, work_dir, name):
    preset, dtype, seed, heads, kv_heads, layers, markov_rank, own_head = CASES[name]
    target = os.path.join(work_dir, name.replace(" ", "_") + "_target")
    draft = os.path.join(work_dir, name.replace(" ", "_") + "_draft")
    subprocess.run([binary, "make-model", "--preset", preset, "--dtype", dtype, "--seed", str(seed), target],
                   check=True, capture_output=True)
    ids = np.random.default_rng(seed).integers(0, 4000, size=12)
    cfg, states, embed, target_head = target_reference(preset, target, ids[:-1])
    layers = [cfg["num_hidden_layers"] - 1 if layer < 0 else layer for layer in layers]
    dcfg = draft_config(cfg, heads, kv_heads, layers, markov_rank, mask_token_id(target))
    assert preset != "kimi-k3-tiny" or dcfg["dflash_config"]["mask_token_id"] == cfg["vocab_size"] - 256 + 8
    dflash_ref.write_random(draft, dcfg, seed, markov_rank, own_head)
    subprocess.run([tool, target, draft, draft, ",".join(map(str, ids))], check=True, capture_output=True)
    got = {k: np.load(os.path.join(draft, k + ".npy")).astype(np.float64) for k in ("features", "states", "logits", "tokens")}
    features = np.concatenate([states[layer] for layer in layers], -1)
    assert relative_error(got["features"], features) <= EXACT_BOUND, f"target states at layers {layers}"
    t = {k: to_float(*v) for k, v in read_checkpoint(draft).items()}
    head = t["lm_head.weight"] if own_head else target_head
    n, block = len(ids), dcfg["block_size"]
    for b, (context, first) in enumerate([(n - 1, ids[n - 1]), (n - 4, ids[n - 4])]):
        want = dflash_ref.block_states(dcfg, t, embed, features[:context], first)
        error = relative_error(got["states"][b * block:(b + 1) * block], want)
        assert error <= EXACT_BOUND, f"block after {context} positions: last normed states, rel error {error:.1e}"
        logits, tokens = dflash_ref.draft(t, head, want, first)
        rows = slice(b * (block - 1), (b + 1) * (block - 1))
        assert relative_error(got["logits"][rows], logits) <= EXACT_BOUND, f"block after {context}: drafted logits"
        assert got["tokens"][rows].astype(int).tolist() == tokens, f"block after {context}: drafted tokens"
