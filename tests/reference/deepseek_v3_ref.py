"""Float64 reference forward pass of DeepseekV3ForCausalLM, written from the Hugging Face
modeling code's semantics (not from mlaserve): logits [tokens, vocab] of one causal sequence."""
import json
import math
import os

import numpy as np

from checkpoint import Weights
from fp8_cache_ref import cached


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x / (1.0 + np.exp(-x))


def yarn_mscale(scale, mscale):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_tables(cfg, positions):
    """cos, sin [tokens, rope_dim] (rotate_half layout), YaRN when rope_scaling is set."""
    dim, base = cfg["qk_rope_head_dim"], cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / base ** (np.arange(0, dim, 2) / dim)
    factor_scale = 1.0
    scaling = cfg.get("rope_scaling")
    if scaling:
        factor = scaling["factor"]
        original = scaling.get("original_max_position_embeddings", 4096)
        beta_fast, beta_slow = scaling.get("beta_fast", 32), scaling.get("beta_slow", 1)

        def correction_dim(rotations):
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low = max(math.floor(correction_dim(beta_fast)), 0)
        high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
        keep = 1.0 - ramp  # 1: extrapolate (original frequency)
        inv_freq = inv_freq / factor * (1 - keep) + inv_freq * keep
        factor_scale = yarn_mscale(factor, scaling.get("mscale", 1)) / yarn_mscale(
            factor, scaling.get("mscale_all_dim", 0))
    angles = np.outer(positions, inv_freq)
    emb = np.concatenate([angles, angles], axis=-1)
    return np.cos(emb) * factor_scale, np.sin(emb) * factor_scale


def apply_rope(x, cos, sin):
    """x [..., tokens, dim] stored interleaved: de-interleave, then rotate_half."""
    d = x.shape[-1]
    x = np.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1)
    rotated = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
    return x * cos + rotated * sin


QUERY_BLOCK = 1024


def attention(w, cfg, p, x):
    t, heads = x.shape[0], cfg["num_attention_heads"]
    nope, rope, vdim, rank = (cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                              cfg["v_head_dim"], cfg["kv_lora_rank"])
    eps = cfg.get("rms_norm_eps", 1e-6)
    if cfg.get("q_lora_rank") is None:
        q = w.apply(p + "q_proj", x)
    else:
        q_a = rms_norm(w.apply(p + "q_a_proj", x), w.get(p + "q_a_layernorm.weight"), eps)
        q = w.apply(p + "q_b_proj", q_a)
    q = q.reshape(t, heads, nope + rope).transpose(1, 0, 2)  # [H, T, qk]
    latent = w.apply(p + "kv_a_proj_with_mqa", x)
    compressed, k_pe = latent[:, :rank], latent[:, rank:]
    cos, sin = rope_tables(cfg, np.arange(t))
    normed, k_pe = cached(rms_norm(compressed, w.get(p + "kv_a_layernorm.weight"), eps), apply_rope(k_pe, cos, sin),
                          cfg.get("latent_cache", "exact"))
    kv = normed @ w.linear(p + "kv_b_proj").T
    kv = kv.reshape(t, heads, nope + vdim).transpose(1, 0, 2)  # [H, T, nope + v]
    q_pe = apply_rope(q[..., nope:], cos, sin)
    k_pe = k_pe[None]  # shared by heads
    query = np.concatenate([q[..., :nope], q_pe], axis=-1)
    key = np.concatenate([kv[..., :nope], np.broadcast_to(k_pe, (heads, t, rope))], axis=-1)
    scale = (nope + rope) ** -0.5
    scaling = cfg.get("rope_scaling")
    if scaling and scaling.get("mscale_all_dim", 0):
        scale *= yarn_mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2
    out = np.empty((heads, t, vdim))
    for first in range(0, t, QUERY_BLOCK):  # [H, block, t] scores at a time: long prompts fit in memory
        last = min(t, first + QUERY_BLOCK)
        scores = query[:, first:last] @ key[:, :last].transpose(0, 2, 1) * scale
        scores = np.where(np.arange(last)[None, :] <= np.arange(first, last)[:, None], scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        out[:, first:last] = probs @ kv[:, :last, nope:]
    return w.apply(p + "o_proj", out.transpose(1, 0, 2).reshape(t, heads * vdim))


def mlp(w, p, x):
    return w.apply(p + "down_proj", silu(w.apply(p + "gate_proj", x)) * w.apply(p + "up_proj", x))


def route(cfg, logits, bias):
    """Expert ids and weights of one token (MoEGate)."""
    n, groups = len(logits), cfg.get("n_group", 1)
    if cfg.get("scoring_func", "sigmoid") == "sigmoid":
        scores = 1.0 / (1.0 + np.exp(-logits))
    else:
        scores = np.exp(logits - logits.max())
        scores /= scores.sum()
    method = cfg.get("topk_method", "noaux_tc")
    choice = scores + bias if method == "noaux_tc" else scores.copy()
    if method != "greedy" and groups > 1:
        per_group = choice.reshape(groups, n // groups)
        if method == "noaux_tc":
            group_score = np.sort(per_group, axis=1)[:, -2:].sum(axis=1)
        else:
            group_score = per_group.max(axis=1)
        kept = np.argsort(-group_score, kind="stable")[: cfg["topk_group"]]
        mask = np.full(groups, True)
        mask[kept] = False
        choice = np.where(np.repeat(mask, n // groups), -np.inf, choice)
    ids = np.argsort(-choice, kind="stable")[: cfg["num_experts_per_tok"]]
    weights = scores[ids]
    if cfg["num_experts_per_tok"] > 1 and cfg.get("norm_topk_prob", True):
        weights = weights / (weights.sum() + 1e-20)
    return ids, weights * cfg.get("routed_scaling_factor", 1.0)


def moe(w, cfg, p, x):
    logits = x @ w.get(p + "gate.weight").T
    bias = w.get(p + "gate.e_score_correction_bias") if w.has(p + "gate.e_score_correction_bias") else 0.0
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        ids, weights = route(cfg, logits[t], bias)
        for e, weight in zip(ids, weights):
            out[t] += weight * mlp(w, f"{p}experts.{e}.", x[t:t + 1])[0]
    if cfg.get("n_shared_experts", 0):
        out += mlp(w, p + "shared_experts.", x)
    return out


def decoder_layer(w, cfg, i, h):
    p, eps = f"model.layers.{i}.", cfg.get("rms_norm_eps", 1e-6)
    h = h + attention(w, cfg, p + "self_attn.", rms_norm(h, w.get(p + "input_layernorm.weight"), eps))
    x = rms_norm(h, w.get(p + "post_attention_layernorm.weight"), eps)
    return h + (mlp(w, p + "mlp.", x) if i < cfg.get("first_k_dense_replace", 0) else moe(w, cfg, p + "mlp.", x))


def load(model_dir, activations="int8", requantize_q4=False):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    block = (cfg.get("quantization_config") or {}).get("weight_block_size", [128, 128])
    return cfg, Weights(model_dir, tuple(block), activations, requantize_q4)


def head(w, cfg):
    return w.get("model.embed_tokens.weight") if cfg.get("tie_word_embeddings") else w.linear("lm_head")


def layer_states(cfg, w, ids):
    """The residual stream after every decoder layer [layers][tokens, hidden] (before the final norm)."""
    states, h = [], w.get("model.embed_tokens.weight")[ids]
    for i in range(cfg["num_hidden_layers"]):
        h = decoder_layer(w, cfg, i, h)
        states.append(h)
    return states


def final_hidden(cfg, w, ids):
    """The final normed hidden state of every position [tokens, hidden]."""
    return rms_norm(layer_states(cfg, w, ids)[-1], w.get("model.norm.weight"), cfg.get("rms_norm_eps", 1e-6))


def mtp(cfg, w, hidden, next_ids):
    """DeepSeek-V3's MTP layer (layer num_hidden_layers) over rows 0.. of one sequence: row j takes
    the state hidden[j] and token next_ids[j] (token j + 1). Returns (output states, logits)."""
    i, eps = cfg["num_hidden_layers"], cfg.get("rms_norm_eps", 1e-6)
    p = f"model.layers.{i}."
    embedded = rms_norm(w.get("model.embed_tokens.weight")[next_ids], w.get(p + "enorm.weight"), eps)
    x = w.apply(p + "eh_proj", np.concatenate([embedded, rms_norm(hidden, w.get(p + "hnorm.weight"), eps)], -1))
    states = rms_norm(decoder_layer(w, cfg, i, x), w.get(p + "shared_head.norm.weight"), eps)
    return states, states @ head(w, cfg).T


def forward(model_dir, ids, activations="int8", requantize_q4=False, latent_cache="exact"):
    """Logits [tokens, vocab]; latent_cache: the cache's values as `exact`, `bf16` or `fp8` stores
    them (fp8_cache_ref)."""
    cfg, w = load(model_dir, activations, requantize_q4)
    cfg["latent_cache"] = latent_cache
    final = final_hidden(cfg, w, ids)
    return final @ head(w, cfg).T if cfg.get("tie_word_embeddings") else w.apply("lm_head", final)
