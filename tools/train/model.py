"""DeepSeek-V3 in PyTorch for training mlaserve's own small models: MLA with q-LoRA (rope on
the last qk_rope_head_dim dims of each head, stored interleaved, as the Hugging Face
checkpoints store them), a dense first layer, then MoE layers with a shared expert and
sigmoid routing over groups (noaux_tc: the e_score_correction_bias chooses, the raw scores
weigh; the bias is trained by DeepSeek-V3's auxiliary-loss-free rule, not by gradients), and
the optional multi-token-prediction (MTP) layer. Parameter names are the checkpoint's."""
import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def linear(rows, cols, std=None):
    layer = nn.Linear(cols, rows, bias=False)
    nn.init.normal_(layer.weight, 0.0, std if std is not None else cols ** -0.5)
    return layer


def rope_tables(cfg, length):
    """cos, sin [length, qk_rope_head_dim] in the rotate_half layout."""
    dim, base = cfg["qk_rope_head_dim"], cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.outer(torch.arange(length, dtype=torch.float64), inv_freq)
    emb = torch.cat([angles, angles], -1)
    return emb.cos().float(), emb.sin().float()


def apply_rope(x, cos, sin):
    """x [..., T, d] stored interleaved: de-interleave, then rotate_half."""
    d = x.shape[-1]
    x = torch.cat([x[..., 0::2], x[..., 1::2]], -1)
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, cfg, residual_std):
        super().__init__()
        hidden, self.heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.nope, self.rope, self.vdim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.rank, eps = cfg["kv_lora_rank"], cfg["rms_norm_eps"]
        q_rank = cfg["q_lora_rank"]
        self.q_a_proj = linear(q_rank, hidden)
        self.q_a_layernorm = RMSNorm(q_rank, eps)
        self.q_b_proj = linear(self.heads * (self.nope + self.rope), q_rank)
        self.kv_a_proj_with_mqa = linear(self.rank + self.rope, hidden)
        self.kv_a_layernorm = RMSNorm(self.rank, eps)
        self.kv_b_proj = linear(self.heads * (self.nope + self.vdim), self.rank)
        self.o_proj = linear(hidden, self.heads * self.vdim, residual_std)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(b, t, self.heads, -1).transpose(1, 2)
        latent = self.kv_a_proj_with_mqa(x)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent[..., : self.rank]))
        kv = kv.view(b, t, self.heads, -1).transpose(1, 2)
        k_pe = apply_rope(latent[..., self.rank:].unsqueeze(1), cos, sin).expand(b, self.heads, t, self.rope)
        query = torch.cat([q[..., : self.nope], apply_rope(q[..., self.nope:], cos, sin)], -1)
        key = torch.cat([kv[..., : self.nope], k_pe], -1)
        scores = query @ key.transpose(-1, -2) * (self.nope + self.rope) ** -0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        out = (probs @ kv[..., self.nope:]).transpose(1, 2).reshape(b, t, self.heads * self.vdim)
        return self.o_proj(out)


class Mlp(nn.Module):
    def __init__(self, hidden, width, residual_std):
        super().__init__()
        self.gate_proj, self.up_proj = linear(width, hidden), linear(width, hidden)
        self.down_proj = linear(hidden, width, residual_std)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    """MoEGate: sigmoid scores; the bias picks (per group: the sum of its top 2), scores weigh."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg, n = cfg, cfg["n_routed_experts"]
        self.weight = nn.Parameter(torch.randn(n, cfg["hidden_size"]) * cfg["hidden_size"] ** -0.5)
        self.register_buffer("e_score_correction_bias", torch.zeros(n))

    def forward(self, x):
        """(expert ids [N, k], weights [N, k]) of x [N, hidden]."""
        cfg, n = self.cfg, self.weight.shape[0]
        scores = torch.sigmoid(F.linear(x, self.weight))
        with torch.no_grad():
            choice = scores + self.e_score_correction_bias
            groups = cfg["n_group"]
            if groups > 1:
                per_group = choice.view(-1, groups, n // groups)
                group_score = per_group.topk(2, -1).values.sum(-1)
                kept = group_score.topk(cfg["topk_group"], -1).indices
                mask = torch.ones_like(group_score, dtype=torch.bool).scatter_(1, kept, False)
                choice = choice.masked_fill(mask.repeat_interleave(n // groups, 1), float("-inf"))
            ids = choice.topk(cfg["num_experts_per_tok"], -1).indices
        weights = scores.gather(1, ids)
        if cfg["num_experts_per_tok"] > 1 and cfg.get("norm_topk_prob", True):
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return ids, weights * cfg["routed_scaling_factor"]


class Moe(nn.Module):
    def __init__(self, cfg, residual_std):
        super().__init__()
        hidden, width = cfg["hidden_size"], cfg["moe_intermediate_size"]
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList(Mlp(hidden, width, residual_std) for _ in range(cfg["n_routed_experts"]))
        self.shared_experts = Mlp(hidden, cfg["n_shared_experts"] * width, residual_std)
        self.register_buffer("load", torch.zeros(cfg["n_routed_experts"]), persistent=False)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        ids, weights = self.gate(x)
        out = self.shared_experts(x)
        flat_ids = ids.reshape(-1)
        order = flat_ids.argsort()
        counts = torch.bincount(flat_ids, minlength=len(self.experts))
        if self.training:
            self.load += counts.float()
        tokens = order // ids.shape[1]
        start = 0
        for e, count in enumerate(counts.tolist()):
            if count:
                rows = tokens[start:start + count]
                weight = weights.reshape(-1)[order[start:start + count]].unsqueeze(1)
                out = out.index_add(0, rows, weight * self.experts[e](x[rows]))
            start += count
        return out.view(shape)

    @torch.no_grad()
    def update_bias(self, rate):
        """DeepSeek-V3's auxiliary-loss-free balancing: raise the bias of underloaded experts."""
        self.gate.e_score_correction_bias += rate * torch.sign(self.load.mean() - self.load)
        self.load.zero_()


class DecoderLayer(nn.Module):
    def __init__(self, cfg, index, residual_std):
        super().__init__()
        eps = cfg["rms_norm_eps"]
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps), RMSNorm(cfg["hidden_size"], eps)
        self.self_attn = Attention(cfg, residual_std)
        dense = index < cfg["first_k_dense_replace"]
        self.mlp = Mlp(cfg["hidden_size"], cfg["intermediate_size"], residual_std) if dense else Moe(cfg, residual_std)

    def forward(self, h, cos, sin):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class Mtp(nn.Module):
    """DeepSeek-V3's MTP layer: from the last hidden state at i and the embedding of token i + 1,
    a decoder layer predicts token i + 2 (embedding and head shared with the model)."""

    def __init__(self, cfg, residual_std):
        super().__init__()
        hidden, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.enorm, self.hnorm = RMSNorm(hidden, eps), RMSNorm(hidden, eps)
        self.eh_proj = linear(hidden, 2 * hidden)
        self.layer = DecoderLayer(cfg, cfg["num_hidden_layers"], residual_std)
        self.norm = RMSNorm(hidden, eps)  # shared_head.norm

    def forward(self, hidden, next_embeddings, cos, sin):
        h = self.eh_proj(torch.cat([self.enorm(next_embeddings), self.hnorm(hidden)], -1))
        return self.norm(self.layer(h, cos, sin))


class DeepseekV3(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        residual_std = cfg["hidden_size"] ** -0.5 / math.sqrt(2 * cfg["num_hidden_layers"])
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        nn.init.normal_(self.embed_tokens.weight, 0.0, 1.0)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, residual_std) for i in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.lm_head = linear(cfg["vocab_size"], cfg["hidden_size"])
        self.mtp = Mtp(cfg, residual_std) if cfg.get("num_nextn_predict_layers", 0) else None

    def hidden_states(self, ids):
        """Every layer's output [L + 1][B, T, hidden] (the embeddings first) and the final normed."""
        cos, sin = rope_tables(self.cfg, ids.shape[1])
        states = [self.embed_tokens(ids)]
        for layer in self.layers:
            states.append(layer(states[-1], cos, sin))
        return states, self.norm(states[-1])

    def forward(self, ids):
        return self.lm_head(self.hidden_states(ids)[1])

    def moe_layers(self):
        layers = [layer.mlp for layer in self.layers]
        if self.mtp is not None:
            layers.append(self.mtp.layer.mlp)
        return [m for m in layers if isinstance(m, Moe)]
