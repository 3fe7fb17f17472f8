"""Float64 reference of a DFlash / DSpark block draft (z-lab's DFlashDraftModel semantics, written
from its description, not from mlaserve), and a writer of random block-draft checkpoints.

The draft's context is the target's hidden states at target_layer_ids for positions 0..p-1,
concatenated -> fc -> hidden_norm; the block is [first token, mask x (block_size - 1)] at
positions p..p+block_size-1, embedded by the target. Every Qwen3-style layer's queries are the
block; its keys and values are k_proj / v_proj of the context followed by the block's own
(normed input), with per-head q_norm / k_norm and rotate-half RoPE at their positions, and no
attention mask. The last layer is normed and goes through the head; block position i > 0
predicts token p + i. A Markov head adds markov_w2 @ markov_w1[previous token] per position,
the block drafted greedily left to right."""
import json
import os
import struct

import numpy as np

from deepseek_v3_ref import rms_norm, silu


def rotate_half_rope(x, positions, theta):
    """x [tokens, heads, d] with features i and i + d/2 paired (Qwen3 / Llama)."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2) / d)
    angles = np.outer(positions, inv_freq)
    cos = np.cos(np.concatenate([angles, angles], -1))[:, None, :]
    sin = np.sin(np.concatenate([angles, angles], -1))[:, None, :]
    rotated = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


def layer(t, cfg, i, block, context, p):
    """One draft layer over the block [B, hidden] given the context [p, hidden]."""
    pre, eps = f"layers.{i}.", cfg["rms_norm_eps"]
    heads, kv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    n = block.shape[0]
    x = rms_norm(block, t[pre + "input_layernorm.weight"], eps)
    keys_in = np.concatenate([context, x])
    q = rms_norm((x @ t[pre + "self_attn.q_proj.weight"].T).reshape(n, heads, d), t[pre + "self_attn.q_norm.weight"], eps)
    k = rms_norm((keys_in @ t[pre + "self_attn.k_proj.weight"].T).reshape(-1, kv, d), t[pre + "self_attn.k_norm.weight"], eps)
    v = (keys_in @ t[pre + "self_attn.v_proj.weight"].T).reshape(-1, kv, d)
    q = rotate_half_rope(q, np.arange(p, p + n), cfg["rope_theta"])
    k = rotate_half_rope(k, np.arange(p + n), cfg["rope_theta"])
    out = np.zeros((n, heads, d))
    for h in range(heads):
        g = h // (heads // kv)
        scores = q[:, h] @ k[:, g].T / np.sqrt(d)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        out[:, h] = (probs / probs.sum(-1, keepdims=True)) @ v[:, g]
    block = block + out.reshape(n, heads * d) @ t[pre + "self_attn.o_proj.weight"].T
    x = rms_norm(block, t[pre + "post_attention_layernorm.weight"], eps)
    mlp = (silu(x @ t[pre + "mlp.gate_proj.weight"].T) * (x @ t[pre + "mlp.up_proj.weight"].T))
    return block + mlp @ t[pre + "mlp.down_proj.weight"].T


def block_states(cfg, t, embed, features, first_token):
    """The last layer's normed states [block_size, hidden] of the block after len(features) positions."""
    eps, p = cfg["rms_norm_eps"], features.shape[0]
    context = rms_norm(features @ t["fc.weight"].T, t["hidden_norm.weight"], eps)
    ids = [first_token] + [cfg["dflash_config"]["mask_token_id"]] * (cfg["block_size"] - 1)
    h = embed[ids]
    for i in range(cfg["num_hidden_layers"]):
        h = layer(t, cfg, i, h, context, p)
    return rms_norm(h, t["norm.weight"], eps)


def draft(t, head, states, first_token):
    """(logits [block_size - 1, vocab] with the Markov head's terms, greedy tokens), left to right."""
    logits, tokens, previous = [], [], first_token
    for row in states[1:] @ head.T:
        if "markov_w1" in t:
            row = row + t["markov_w2"] @ t["markov_w1"][previous]
        previous = int(row.argmax())
        logits.append(row)
        tokens.append(previous)
    return np.array(logits), tokens


def write_random(model_dir, cfg, seed, markov_rank, own_head):
    """A random block draft of config `cfg` (f32), with a Markov head of markov_rank (0: none)
    and its own lm_head if own_head."""
    rng = np.random.default_rng(seed)
    hidden, d, inter = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"]
    heads, kv, vocab = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    shapes = {"fc.weight": (hidden, len(cfg["dflash_config"]["target_layer_ids"]) * hidden),
              "hidden_norm.weight": (hidden,), "norm.weight": (hidden,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        shapes.update({p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
                       p + "self_attn.q_proj.weight": (heads * d, hidden), p + "self_attn.k_proj.weight": (kv * d, hidden),
                       p + "self_attn.v_proj.weight": (kv * d, hidden), p + "self_attn.o_proj.weight": (hidden, heads * d),
                       p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,),
                       p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
                       p + "mlp.down_proj.weight": (hidden, inter)})
    if markov_rank:
        shapes.update({"markov_w1": (vocab, markov_rank), "markov_w2": (vocab, markov_rank)})
    if own_head:
        shapes["lm_head.weight"] = (vocab, hidden)
    tensors = {name: (1.0 + 0.1 * rng.standard_normal(shape) if len(shape) == 1
                      else rng.standard_normal(shape) / np.sqrt(shape[1])).astype("<f4")
               for name, shape in shapes.items()}
    os.makedirs(model_dir, exist_ok=True)
    header, offset = {}, 0
    for name, value in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(value.shape), "data_offsets": [offset, offset + value.nbytes]}
        offset += value.nbytes
    blob = json.dumps(header).encode()
    with open(os.path.join(model_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob + b"".join(v.tobytes() for v in tensors.values()))
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(dict(cfg, architectures=["DFlashDraftModel"], model_type="qwen3"), f)
