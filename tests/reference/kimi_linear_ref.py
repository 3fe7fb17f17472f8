"""Float64 reference forward pass of KimiLinearForCausalLM and of Kimi K3's text model
(kimi_k3: KDA lower-bound gate, full-rank gates, MLA output gate, LatentMoE, SiTU, attention
residuals, MXFP4 experts), written from the semantics in the Kimi Linear / K3 issue and
flash-linear-attention's naive recurrent KDA (not from mlaserve): logits [tokens, vocab]."""
import json
import os

import numpy as np

from checkpoint import Weights
from deepseek_v3_ref import rms_norm, route, silu


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def glu(cfg, gate, up):
    """SiLU-GLU, or K3's SiTU: beta tanh(g / beta) sigmoid(g) * beta_lin tanh(u / beta_lin)."""
    if cfg.get("hidden_act", "silu") == "situ":
        beta, beta_lin = cfg.get("activation_situ_beta", 4.0), cfg.get("activation_situ_linear_beta", 25.0)
        return beta * np.tanh(gate / beta) * sigmoid(gate) * beta_lin * np.tanh(up / beta_lin)
    return silu(gate) * up


def mlp(w, cfg, p, x, names=("gate_proj", "up_proj", "down_proj")):
    gate, up, down = (p + n for n in names)
    return w.apply(down, glu(cfg, w.apply(gate, x), w.apply(up, x)))


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
    q = short_conv(w, p + "q_conv1d.weight", w.apply(p + "q_proj", x)).reshape(t, heads, dim)
    k = short_conv(w, p + "k_conv1d.weight", w.apply(p + "k_proj", x)).reshape(t, heads, dim)
    v = short_conv(w, p + "v_conv1d.weight", w.apply(p + "v_proj", x)).reshape(t, heads, dim)
    f = w.apply(p + "f_b_proj", w.apply(p + "f_a_proj", x)) + w.get(p + "dt_bias")
    a_log = w.get(p + "A_log").reshape(-1)[:heads]  # K3 stores 128 entries
    rate = np.exp(a_log)[None, :, None]
    if lin.get("gate_lower_bound") is not None:  # K3: a bounded sigmoid, not -rate * softplus
        g = lin["gate_lower_bound"] * sigmoid(rate * f.reshape(t, heads, dim))
    else:
        g = -rate * softplus(f.reshape(t, heads, dim))
    beta = sigmoid(w.apply(p + "b_proj", x))  # [T, H]
    q, k = l2norm(q) * dim ** -0.5, l2norm(k)
    state = np.zeros((heads, dim, dim))  # S[h][key channel, value channel]
    o = np.zeros((t, heads, dim))
    for i in range(t):
        for h in range(heads):
            state[h] *= np.exp(g[i, h])[:, None]
            state[h] += np.outer(k[i, h], beta[i, h] * (v[i, h] - state[h].T @ k[i, h]))
            o[i, h] = state[h].T @ q[i, h]
    if lin.get("use_full_rank_gate"):
        gate = w.apply(p + "g_proj", x)
    else:
        gate = w.apply(p + "g_b_proj", w.apply(p + "g_a_proj", x))
    o = rms_norm(o, w.get(p + "o_norm.weight"), cfg.get("rms_norm_eps", 1e-6)) * sigmoid(gate.reshape(t, heads, dim))
    return w.apply(p + "o_proj", o.reshape(t, heads * dim))


def mla_nope(w, cfg, p, x):
    """MLA whose 64-wide 'rope' slices are not rotated (mla_use_nope); latent norms eps 1e-6."""
    t, heads = x.shape[0], cfg["num_attention_heads"]
    nope, rope, vdim, rank = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    if cfg.get("q_lora_rank") is None:
        q = w.apply(p + "q_proj", x)
    else:
        q = w.apply(p + "q_b_proj", rms_norm(w.apply(p + "q_a_proj", x), w.get(p + "q_a_layernorm.weight"), 1e-6))
    q = q.reshape(t, heads, nope + rope).transpose(1, 0, 2)
    latent = w.apply(p + "kv_a_proj_with_mqa", x)
    kv = rms_norm(latent[:, :rank], w.get(p + "kv_a_layernorm.weight"), 1e-6) @ w.linear(p + "kv_b_proj").T
    kv = kv.reshape(t, heads, nope + vdim).transpose(1, 0, 2)
    key = np.concatenate([kv[..., :nope], np.broadcast_to(latent[None, :, rank:], (heads, t, rope))], axis=-1)
    scores = q @ key.transpose(0, 2, 1) * (nope + rope) ** -0.5
    scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = (probs @ kv[..., nope:]).transpose(1, 0, 2).reshape(t, heads * vdim)
    if cfg.get("mla_use_output_gate"):
        out = out * sigmoid(w.apply(p + "g_proj", x))
    return w.apply(p + "o_proj", out)


def block_sparse_moe(w, cfg, p, x):
    routing = {"n_group": 1, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
               "num_experts_per_tok": cfg["num_experts_per_token"], "norm_topk_prob": cfg.get("moe_renormalize", True),
               "routed_scaling_factor": cfg.get("routed_scaling_factor", 1.0)}
    logits = x @ w.get(p + "gate.weight").T  # the router reads x even with LatentMoE
    bias = w.get(p + "gate.e_score_correction_bias")
    latent = cfg.get("routed_expert_hidden_size") is not None
    expert_in = w.apply(p + "routed_expert_down_proj", x) if latent else x
    routed = np.zeros_like(expert_in)
    for t in range(x.shape[0]):
        ids, weights = route(routing, logits[t], bias)
        for e, weight in zip(ids, weights):
            routed[t] += weight * mlp(w, cfg, f"{p}experts.{e}.", expert_in[t:t + 1], ("w1", "w3", "w2"))[0]
    if latent:
        if cfg.get("latent_moe_use_norm"):
            routed = rms_norm(routed, w.get(p + "routed_expert_norm.weight"), cfg.get("rms_norm_eps", 1e-6))
        routed = w.apply(p + "routed_expert_up_proj", routed)
    if cfg.get("num_shared_experts", 0):
        routed += mlp(w, cfg, p + "shared_experts.", x)
    return routed


def attn_res(w, cfg, name, candidates):
    """Softmax over the candidates of <RMSNorm(c) (no weight), res_norm * res_proj>, mixing them."""
    query = w.get(name + "_res_norm.weight") * w.get(name + "_res_proj.weight")[0]
    eps = cfg.get("rms_norm_eps", 1e-6)
    stacked = np.stack(candidates)  # [C, T, hidden]
    scores = (stacked / np.sqrt((stacked ** 2).mean(-1, keepdims=True) + eps)) @ query  # [C, T]
    weights = np.exp(scores - scores.max(0))
    weights /= weights.sum(0)
    return (weights[..., None] * stacked).sum(0)


def text_config(model_dir):
    """config.json's text model keys (Kimi K3 keeps them in text_config)."""
    outer = json.load(open(os.path.join(model_dir, "config.json")))
    return outer["text_config"] if outer.get("model_type") == "kimi_k3" else outer


def layer_states(model_dir, ids, activations="int8"):
    """(cfg, weights, weight-name root, states): the state after every decoder layer [layers][tokens,
    hidden], before the final norm. With attention residuals, layer i's is the mix layer i + 1's
    mixer reads, the last layer's the output mix (what K3's DSpark drafter takes)."""
    outer = json.load(open(os.path.join(model_dir, "config.json")))
    k3 = outer.get("model_type") == "kimi_k3"
    cfg, root = text_config(model_dir), "language_model." if k3 else ""
    w = Weights(model_dir, activations=activations)
    eps = cfg.get("rms_norm_eps", 1e-6)
    full_attn = set(cfg["linear_attn_config"]["full_attn_layers"])  # 1-based
    block = cfg.get("attn_res_block_size")
    h = w.get(root + "model.embed_tokens.weight")[ids]
    bank, partial = [h], None  # attention residuals: block sums, and the current block's
    states = []
    for i in range(cfg["num_hidden_layers"]):
        p = f"{root}model.layers.{i}."
        mixer_in = attn_res(w, cfg, p + "self_attention", bank + ([partial] if partial is not None else [])) if block else h
        if block and i > 0:
            states.append(mixer_in)
        x = rms_norm(mixer_in, w.get(p + "input_layernorm.weight"), eps)
        out = mla_nope(w, cfg, p + "self_attn.", x) if i + 1 in full_attn else kda(w, cfg, p + "self_attn.", x)
        partial = out if partial is None else partial + out
        h = h + out
        ffn_in = attn_res(w, cfg, p + "mlp", bank + [partial]) if block else h
        x = rms_norm(ffn_in, w.get(p + "post_attention_layernorm.weight"), eps)
        dense = i < cfg.get("first_k_dense_replace", 0)
        out = mlp(w, cfg, p + "mlp.", x) if dense else block_sparse_moe(w, cfg, p + "block_sparse_moe.", x)
        partial, h = partial + out, h + out
        if block and (i + 1) % block == 0:
            bank, partial = bank + [partial], None
        if not block:
            states.append(h)
    if block:
        states.append(attn_res(w, cfg, root + "model.output_attn", bank + ([partial] if partial is not None else [])))
    return cfg, w, root, states


def forward(model_dir, ids, activations="int8"):
    cfg, w, root, states = layer_states(model_dir, ids, activations)
    return rms_norm(states[-1], w.get(root + "model.norm.weight"), cfg.get("rms_norm_eps", 1e-6)) @ w.linear(root + "lm_head").T
