"""Float64 reference forward pass of KimiLinearForCausalLM, written from the semantics in the
Kimi Linear issue and flash-linear-attention's naive recurrent KDA (not from mlaserve):
logits [tokens, vocab] of one causal sequence."""
import json
import os

import numpy as np

from checkpoint import Weights
from deepseek_v3_ref import mlp, rms_norm, route, silu


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def l2norm(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def short_conv(w, name, y):
    """Causal depthwise conv (weights [C, 1, K], tap K-1 = current token), then SiLU."""
    weight = w.get(name)[:, 0, :]
    kernel, t = weight.shape[1], y.shape[0]
    padded = np.concatenate([np.zeros((kernel - 1, y.shape[1])), y])
    return silu(sum(weight[:, j] * padded[j:j + t] for j in range(kernel)))


def kda(w, cfg, p, x):
    lin = cfg["linear_attn_config"]
    heads, dim = lin["num_heads"], lin["head_dim"]
    t = x.shape[0]
    q = short_conv(w, p + "q_conv1d.weight", x @ w.linear(p + "q_proj").T).reshape(t, heads, dim)
    k = short_conv(w, p + "k_conv1d.weight", x @ w.linear(p + "k_proj").T).reshape(t, heads, dim)
    v = short_conv(w, p + "v_conv1d.weight", x @ w.linear(p + "v_proj").T).reshape(t, heads, dim)
    f = (x @ w.linear(p + "f_a_proj").T) @ w.linear(p + "f_b_proj").T + w.get(p + "dt_bias")
    a_log = w.get(p + "A_log").reshape(-1)[:heads]
    g = -np.exp(a_log)[None, :, None] * softplus(f.reshape(t, heads, dim))
    beta = sigmoid(x @ w.linear(p + "b_proj").T)  # [T, H]
    q, k = l2norm(q) * dim ** -0.5, l2norm(k)
    state = np.zeros((heads, dim, dim))  # S[h][key channel, value channel]
    o = np.zeros((t, heads, dim))
    for i in range(t):
        for h in range(heads):
            state[h] *= np.exp(g[i, h])[:, None]
            state[h] += np.outer(k[i, h], beta[i, h] * (v[i, h] - state[h].T @ k[i, h]))
            o[i, h] = state[h].T @ q[i, h]
    gate = (x @ w.linear(p + "g_a_proj").T) @ w.linear(p + "g_b_proj").T
    o = rms_norm(o, w.get(p + "o_norm.weight"), cfg.get("rms_norm_eps", 1e-6)) * sigmoid(gate.reshape(t, heads, dim))
    return o.reshape(t, heads * dim) @ w.linear(p + "o_proj").T


def mla_nope(w, cfg, p, x):
    """MLA whose 64-wide 'rope' slices are not rotated (mla_use_nope); latent norms eps 1e-6."""
    t, heads = x.shape[0], cfg["num_attention_heads"]
    nope, rope, vdim, rank = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    if cfg.get("q_lora_rank") is None:
        q = x @ w.linear(p + "q_proj").T
    else:
        q = rms_norm(x @ w.linear(p + "q_a_proj").T, w.get(p + "q_a_layernorm.weight"), 1e-6) @ w.linear(p + "q_b_proj").T
    q = q.reshape(t, heads, nope + rope).transpose(1, 0, 2)
    latent = x @ w.linear(p + "kv_a_proj_with_mqa").T
    kv = rms_norm(latent[:, :rank], w.get(p + "kv_a_layernorm.weight"), 1e-6) @ w.linear(p + "kv_b_proj").T
    kv = kv.reshape(t, heads, nope + vdim).transpose(1, 0, 2)
    key = np.concatenate([kv[..., :nope], np.broadcast_to(latent[None, :, rank:], (heads, t, rope))], axis=-1)
    scores = q @ key.transpose(0, 2, 1) * (nope + rope) ** -0.5
    scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = (probs @ kv[..., nope:]).transpose(1, 0, 2).reshape(t, heads * vdim)
    return out @ w.linear(p + "o_proj").T


def block_sparse_moe(w, cfg, p, x):
    routing = {"n_group": 1, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
               "num_experts_per_tok": cfg["num_experts_per_token"], "norm_topk_prob": cfg.get("moe_renormalize", True),
               "routed_scaling_factor": cfg.get("routed_scaling_factor", 1.0)}
    logits = x @ w.get(p + "gate.weight").T
    bias = w.get(p + "gate.e_score_correction_bias")
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        ids, weights = route(routing, logits[t], bias)
        for e, weight in zip(ids, weights):
            e_p = f"{p}experts.{e}."
            hidden = silu(x[t] @ w.linear(e_p + "w1").T) * (x[t] @ w.linear(e_p + "w3").T)
            out[t] += weight * (hidden @ w.linear(e_p + "w2").T)
    if cfg.get("num_shared_experts", 0):
        out += mlp(w, p + "shared_experts.", x)
    return out


def forward(model_dir, ids):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w = Weights(model_dir)
    eps = cfg.get("rms_norm_eps", 1e-6)
    full_attn = set(cfg["linear_attn_config"]["full_attn_layers"])  # 1-based
    h = w.get("model.embed_tokens.weight")[ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w.get(p + "input_layernorm.weight"), eps)
        h = h + (mla_nope(w, cfg, p + "self_attn.", x) if i + 1 in full_attn else kda(w, cfg, p + "self_attn.", x))
        x = rms_norm(h, w.get(p + "post_attention_layernorm.weight"), eps)
        dense = i < cfg.get("first_k_dense_replace", 0)
        h = h + (mlp(w, p + "mlp.", x) if dense else block_sparse_moe(w, cfg, p + "block_sparse_moe.", x))
    return rms_norm(h, w.get("model.norm.weight"), eps) @ w.linear("lm_head").T
