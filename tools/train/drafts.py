"""The draft models of the default target, each trained against the frozen target:

- MTP: DeepSeek-V3's next-token module (model.Mtp): from the target's final normed hidden state
  at position i and the embedding of token i + 1 it predicts token i + 2, sharing the target's
  embedding and head; stored in the target's checkpoint as layer num_hidden_layers.
- dense draft: a small all-dense DeepSeek-V3 with the target's tokenizer (tied embeddings).
- DFlash block draft (z-lab's DFlashDraftModel layout): Qwen3-style decoder layers whose queries
  are a block [last committed token, mask x (block_size - 1)] embedded by the target, and whose
  keys and values are also the target's hidden states at target_layer_ids for the committed
  positions (concatenated -> fc -> hidden_norm); within the block attention is bidirectional.
  The target's head turns the block's last layer (after norm) into logits for positions 1..
  block_size - 1. With a Markov head (DSpark), logits_i += markov_w2 . markov_w1[token i - 1].
All are distilled: their distributions are trained toward the target's (KL on the corpus)."""
import torch
import torch.nn.functional as F
from torch import nn

from model import Mlp, RMSNorm, linear


def rope(x, positions, theta):
    """rotate_half rope of x [..., T, d] at integer positions [T]."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.outer(positions.double(), inv_freq)
    cos, sin = torch.cat([angles, angles], -1).cos().float(), torch.cat([angles, angles], -1).sin().float()
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


class DFlashAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden, self.heads, self.kv_heads, self.dim = (cfg["hidden_size"], cfg["num_attention_heads"],
                                                       cfg["num_key_value_heads"], cfg["head_dim"])
        self.theta = cfg["rope_theta"]
        self.q_proj, self.o_proj = linear(self.heads * self.dim, hidden), linear(hidden, self.heads * self.dim)
        self.k_proj, self.v_proj = linear(self.kv_heads * self.dim, hidden), linear(self.kv_heads * self.dim, hidden)
        self.q_norm, self.k_norm = RMSNorm(self.dim, cfg["rms_norm_eps"]), RMSNorm(self.dim, cfg["rms_norm_eps"])

    def forward(self, block, context, block_positions, context_positions, mask):
        """block [N, S, H] queries; keys/values from context [N, C, H] then the block; mask
        [N, S, C + S] (True: may attend)."""
        n, s, _ = block.shape
        heads = lambda x, h: x.view(n, x.shape[1], h, self.dim).transpose(1, 2)  # noqa: E731
        q = rope(self.q_norm(heads(self.q_proj(block), self.heads)), block_positions, self.theta)
        keys = torch.cat([self.k_proj(context), self.k_proj(block)], 1)
        values = torch.cat([self.v_proj(context), self.v_proj(block)], 1)
        k = rope(self.k_norm(heads(keys, self.kv_heads)), torch.cat([context_positions, block_positions]), self.theta)
        v = heads(values, self.kv_heads)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)
        scores = (q @ k.transpose(-1, -2)) * self.dim ** -0.5
        probs = scores.masked_fill(~mask.unsqueeze(1), float("-inf")).softmax(-1)
        return self.o_proj((probs @ v).transpose(1, 2).reshape(n, s, self.heads * self.dim))


class DFlashLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(hidden, eps), RMSNorm(hidden, eps)
        self.self_attn = DFlashAttention(cfg)
        self.mlp = Mlp(hidden, cfg["intermediate_size"], hidden ** -0.5 / 2)

    def forward(self, block, context, block_positions, context_positions, mask):
        block = block + self.self_attn(self.input_layernorm(block), context, block_positions, context_positions, mask)
        return block + self.mlp(self.post_attention_layernorm(block))


class DFlashDraft(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg, hidden, eps = cfg, cfg["hidden_size"], cfg["rms_norm_eps"]
        layers = len(cfg["dflash_config"]["target_layer_ids"])
        self.fc = linear(hidden, layers * hidden)  # the target's states have the draft's width
        self.hidden_norm = RMSNorm(hidden, eps)
        self.layers = nn.ModuleList(DFlashLayer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(hidden, eps)
        rank = cfg["dflash_config"].get("markov_rank", 0)
        if rank:
            self.markov_w1 = nn.Parameter(torch.zeros(cfg["vocab_size"], rank))
            self.markov_w2 = nn.Parameter(torch.randn(cfg["vocab_size"], rank) * rank ** -0.5)

    def forward(self, block_embeddings, features, block_positions, context_positions, mask):
        """Last layer's normed states [N, S, H] of the blocks."""
        context = self.hidden_norm(self.fc(features))
        h = block_embeddings
        for layer in self.layers:
            h = layer(h, context, block_positions, context_positions, mask)
        return self.norm(h)

    def markov(self, previous_tokens):
        """The Markov head's logits [..., V] given each position's previous token."""
        return self.markov_w1[previous_tokens] @ self.markov_w2.T


def distillation_loss(draft_logits, target_logits):
    """KL(target || draft) per position, averaged."""
    return F.kl_div(draft_logits.log_softmax(-1), target_logits.log_softmax(-1), log_target=True,
                    reduction="batchmean")
