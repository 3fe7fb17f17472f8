"""Writes a Kimi K3-shaped checkpoint in miniature exactly as the published one is laid out,
independently of `mlaserve make-model`: the config.json keys of moonshotai/Kimi-K3 (the text
model's in text_config, its quantization_config there too), the tensor names, dtypes and
shapes of its index (language_model.model.output_attn_res_{norm,proj}, A_log [128] F32,
conv weights [C, 1, K] F32, o_norm F32, norms BF16, ...), MXFP4 routed experts quantized the
OCP MX way (shared exponent floor(log2 max|w|) - 2, nearest E2M1, saturating at 6), a vision
tower and projector outside language_model., and shards with a model.safetensors.index.json.
docs/kimi.md lists each name with its source."""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "train"))
import mxfp4  # noqa: E402  (the OCP MX rules, NumPy only)

TEXT_CONFIG = {
    "model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"],
    "vocab_size": 512, "hidden_size": 192, "intermediate_size": 384, "moe_intermediate_size": 64,
    "num_hidden_layers": 5, "num_attention_heads": 6, "num_key_value_heads": 6,
    "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
    "mla_use_nope": True, "mla_use_output_gate": True, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "num_experts": 16, "num_experts_per_token": 4, "num_shared_experts": 2, "num_expert_group": 1, "topk_group": 1,
    "topk_method": "noaux_tc", "use_grouped_topk": True, "moe_renormalize": True,
    "moe_router_activation_func": "sigmoid", "routed_scaling_factor": 1.0, "routed_expert_hidden_size": 96,
    "latent_moe_use_norm": True, "hidden_act": "situ", "activation_situ_beta": 4.0,
    "activation_situ_linear_beta": 25.0, "attn_res_block_size": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "max_position_embeddings": 4096, "num_nextn_predict_layers": 0, "tie_word_embeddings": False,
    "bos_token_id": 163584, "eos_token_id": 163586, "pad_token_id": 163839,
    # 1-based, as published: the last two layers are both MLA (K3: ..., 92, 93)
    "linear_attn_config": {"full_attn_layers": [4, 5], "kda_layers": [1, 2, 3], "num_heads": 6, "head_dim": 32,
                           "short_conv_kernel_size": 4, "use_full_rank_gate": True, "gate_lower_bound": -5.0},
    "quantization_config": {
        "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized", "quantization_status": "compressed",
        "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "targets": ["Linear"],
                                      "input_activations": None, "output_activations": None,
                                      "weights": {"num_bits": 4, "type": "float", "symmetric": True, "group_size": 32,
                                                  "strategy": "group", "dynamic": False,
                                                  "scale_dtype": "torch.uint8"}}},
        "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                   "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"]},
}


def config():
    return {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
            "bos_token_id": 163584, "eos_token_id": 163586, "pad_token_id": 163839,
            "media_placeholder_token_id": 163605, "tie_word_embeddings": False, "text_config": TEXT_CONFIG,
            "vision_config": {"vt_hidden_size": 32, "vt_num_hidden_layers": 1, "text_hidden_size": 192}}


def bf16_bytes(x):
    bits = np.asarray(x, np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # nearest, ties to even
    return rounded.astype("<u2").tobytes()


class Writer:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.tensors = []  # (name, dtype, shape, bytes)

    def add(self, name, dtype, array):
        array = np.asarray(array)
        data = bf16_bytes(array) if dtype == "BF16" else array.astype({"F32": "<f4", "U8": "u1"}[dtype]).tobytes()
        self.tensors.append((name, dtype, list(array.shape), data))

    def normal(self, shape, mean=0.0, std=1.0):
        return self.rng.normal(mean, std, shape)

    def linear(self, name, rows, cols, quantized=False):
        weight = self.normal((rows, cols), std=cols ** -0.5)
        if name.endswith(("o_proj", "down_proj", ".w2", "routed_expert_up_proj")):
            weight /= np.sqrt(2 * TEXT_CONFIG["num_hidden_layers"])  # residual branches start small
        if not quantized:
            return self.add(name + ".weight", "BF16", weight)
        packed, scales = mxfp4.quantize(weight)
        self.add(name + ".weight_packed", "U8", packed)
        self.add(name + ".weight_scale", "U8", scales)

    def norm(self, name, size, dtype="BF16"):
        self.add(name, dtype, self.normal((size,), 1.0, 0.1))


def kda(w, p, cfg):
    lin, hidden = cfg["linear_attn_config"], cfg["hidden_size"]
    width, dim = lin["num_heads"] * lin["head_dim"], lin["head_dim"]
    for name in ("q", "k", "v"):
        w.linear(f"{p}.{name}_proj", width, hidden)
        w.add(f"{p}.{name}_conv1d.weight", "F32", w.normal((width, 1, lin["short_conv_kernel_size"]), 0, 0.5))
    w.add(p + ".A_log", "F32", w.normal((128,), 1.0, 0.8))
    w.linear(p + ".f_a_proj", dim, hidden)
    w.linear(p + ".f_b_proj", width, dim)
    w.add(p + ".dt_bias", "F32", w.normal((width,), -1.0, 0.5))
    w.linear(p + ".b_proj", lin["num_heads"], hidden)
    w.linear(p + ".g_proj", width, hidden)
    w.norm(p + ".o_norm.weight", dim, "F32")
    w.linear(p + ".o_proj", hidden, width)


def mla(w, p, cfg):
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    qk, rank = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"], cfg["kv_lora_rank"]
    w.linear(p + ".q_a_proj", cfg["q_lora_rank"], hidden)
    w.norm(p + ".q_a_layernorm.weight", cfg["q_lora_rank"])
    w.linear(p + ".q_b_proj", heads * qk, cfg["q_lora_rank"])
    w.linear(p + ".kv_a_proj_with_mqa", rank + cfg["qk_rope_head_dim"], hidden)
    w.norm(p + ".kv_a_layernorm.weight", rank)
    w.linear(p + ".kv_b_proj", heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), rank)
    w.linear(p + ".g_proj", heads * cfg["v_head_dim"], hidden)
    w.linear(p + ".o_proj", hidden, heads * cfg["v_head_dim"])


def moe(w, p, cfg):
    hidden, latent, width = cfg["hidden_size"], cfg["routed_expert_hidden_size"], cfg["moe_intermediate_size"]
    for e in range(cfg["num_experts"]):
        w.linear(f"{p}.experts.{e}.w1", width, latent, quantized=True)
        w.linear(f"{p}.experts.{e}.w2", latent, width, quantized=True)
        w.linear(f"{p}.experts.{e}.w3", width, latent, quantized=True)
    w.add(p + ".gate.e_score_correction_bias", "F32", w.normal((cfg["num_experts"],), 0, 0.1))
    w.linear(p + ".gate", cfg["num_experts"], hidden)
    w.linear(p + ".routed_expert_down_proj", latent, hidden)
    w.norm(p + ".routed_expert_norm.weight", latent)
    w.linear(p + ".routed_expert_up_proj", hidden, latent)
    shared = cfg["num_shared_experts"] * width
    w.linear(p + ".shared_experts.down_proj", hidden, shared)
    w.linear(p + ".shared_experts.gate_proj", shared, hidden)
    w.linear(p + ".shared_experts.up_proj", shared, hidden)


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(t[3] for t in tensors))


def write(out_dir, seed=0):
    """The checkpoint in 4 shards: layers, then the model-level tensors, then the vision part."""
    cfg = TEXT_CONFIG
    w = Writer(seed)
    shards = [[], [], [], []]
    full_attn = set(cfg["linear_attn_config"]["full_attn_layers"])
    for i in range(cfg["num_hidden_layers"]):
        p = f"language_model.model.layers.{i}"
        start = len(w.tensors)
        for name in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"):
            w.norm(f"{p}.{name}.weight", cfg["hidden_size"])
        for name in ("self_attention_res_proj", "mlp_res_proj"):
            w.add(f"{p}.{name}.weight", "BF16", w.normal((1, cfg["hidden_size"]), 0, cfg["hidden_size"] ** -0.5))
        (mla if i + 1 in full_attn else kda)(w, p + ".self_attn", cfg)
        if i < cfg["first_k_dense_replace"]:
            w.linear(p + ".mlp.down_proj", cfg["hidden_size"], cfg["intermediate_size"])
            w.linear(p + ".mlp.gate_proj", cfg["intermediate_size"], cfg["hidden_size"])
            w.linear(p + ".mlp.up_proj", cfg["intermediate_size"], cfg["hidden_size"])
        else:
            moe(w, p + ".block_sparse_moe", cfg)
        shards[min(i // 2, 1)] += w.tensors[start:]
    start = len(w.tensors)
    w.add("language_model.lm_head.weight", "BF16", w.normal((cfg["vocab_size"], cfg["hidden_size"]), 0, 0.05))
    w.add("language_model.model.embed_tokens.weight", "BF16", w.normal((cfg["vocab_size"], cfg["hidden_size"])))
    w.norm("language_model.model.norm.weight", cfg["hidden_size"])
    w.norm("language_model.model.output_attn_res_norm.weight", cfg["hidden_size"])
    w.add("language_model.model.output_attn_res_proj.weight", "BF16",
          w.normal((1, cfg["hidden_size"]), 0, cfg["hidden_size"] ** -0.5))
    shards[2] += w.tensors[start:]
    start = len(w.tensors)
    w.add("mm_projector.proj.0.weight", "BF16", w.normal((32, 32)))
    w.add("vision_tower.encoder.blocks.0.wqkv.weight", "BF16", w.normal((96, 32)))
    shards[3] += w.tensors[start:]
    os.makedirs(out_dir, exist_ok=True)
    weight_map = {}
    for index, tensors in enumerate(shards):
        name = f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(out_dir, name), tensors)
        weight_map.update({t[0]: name for t in tensors})
    total = sum(len(t[3]) for t in w.tensors)
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(out_dir, "model.safetensors.index.json"), "w"), indent=2)
    json.dump(config(), open(os.path.join(out_dir, "config.json"), "w"), indent=2)
