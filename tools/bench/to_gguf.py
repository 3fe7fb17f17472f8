#!/usr/bin/python3
"""Writes a BF16 DeepSeek-V3-family checkpoint (config.json and safetensors, as make-model writes
them) as a GGUF that ik_llama.cpp loads, the same weights in its native MLA layout: one attn_kv_b
per layer (ik derives its absorbed k_b / v_b from it at load, for any head shape), experts
stacked per layer, norms, router and score bias in f32, the rest BF16. The vocabulary is a
placeholder of the checkpoint's size (byte tokens and fillers): llama-bench times random tokens.

    GGUF_PY=IK_SRC/gguf-py /usr/bin/python3 tools/bench/to_gguf.py MODEL_DIR OUT.gguf"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.environ.get("GGUF_PY", ""))
import gguf  # noqa: E402  (ik_llama.cpp's gguf-py, from GGUF_PY)


class Checkpoint:
    """The tensors of a directory's safetensors files, read as raw bytes (BF16 as uint16)."""

    DTYPES = {"BF16": np.uint16, "F32": np.float32, "F16": np.float16}

    def __init__(self, directory):
        self.where = {}
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".safetensors"):
                continue
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                size = struct.unpack("<Q", f.read(8))[0]
                header = json.loads(f.read(size))
            for tensor, info in header.items():
                if tensor != "__metadata__":
                    self.where[tensor] = (path, 8 + size, info)

    def __contains__(self, name):
        return name in self.where

    def shape(self, name):
        return self.where[name][2]["shape"]

    def read(self, name):
        path, data_start, info = self.where[name]
        begin, end = info["data_offsets"]
        with open(path, "rb") as f:
            f.seek(data_start + begin)
            raw = f.read(end - begin)
        if info["dtype"] not in self.DTYPES:
            sys.exit(f"{name}: {info['dtype']} weights; give a BF16 checkpoint (make-model --dtype bf16)")
        return np.frombuffer(raw, dtype=self.DTYPES[info["dtype"]]).reshape(info["shape"])


def bf16_to_f32(array):
    return (array.astype(np.uint32) << 16).view(np.float32) if array.dtype == np.uint16 else array.astype(np.float32)


def add_metadata(writer, config):
    heads = config["num_attention_heads"]
    writer.add_name("mlaserve-" + config.get("model_type", "deepseek_v3"))
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config.get("max_position_embeddings", 4096))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)  # native MLA layout: one KV head per head
    writer.add_rope_freq_base(config.get("rope_theta", 10000.0))
    writer.add_layer_norm_rms_eps(config.get("rms_norm_eps", 1e-6))
    writer.add_expert_count(config["n_routed_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])
    if config.get("n_group", 1) > 1:
        writer.add_expert_group_count(config["n_group"])
        writer.add_expert_group_used_count(config["topk_group"])
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_leading_dense_block_count(config["first_k_dense_replace"])
    writer.add_vocab_size(config["vocab_size"])
    if config.get("q_lora_rank"):
        writer.add_q_lora_rank(config["q_lora_rank"])
    writer.add_kv_lora_rank(config["kv_lora_rank"])
    writer.add_key_length(config["qk_nope_head_dim"] + config["qk_rope_head_dim"])
    writer.add_value_length(config["v_head_dim"])
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    writer.add_expert_shared_count(config["n_shared_experts"])
    writer.add_expert_weights_scale(config.get("routed_scaling_factor", 1.0))
    writer.add_expert_weights_norm(config.get("norm_topk_prob", True))
    writer.add_rope_dimension_count(config["qk_rope_head_dim"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)


def add_placeholder_vocabulary(writer, size):
    """GPT-2 byte-level tokens for the 256 bytes after BOS and EOS, then fillers; one merge."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    unicode_of, extra = {}, 0
    for b in range(256):
        unicode_of[b] = chr(b) if b in printable else chr(256 + extra)
        extra += b not in printable
    tokens = ["<bos>", "<eos>"] + [unicode_of[b] for b in range(256)] + ["ab"]
    tokens += [f"<filler_{i}>" for i in range(size - len(tokens))]
    types = [gguf.TokenType.CONTROL] * 2 + [gguf.TokenType.NORMAL] * 257 + [gguf.TokenType.UNUSED] * (size - 259)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("deepseek-v3")
    writer.add_token_list(tokens[:size])
    writer.add_token_types(types[:size])
    writer.add_token_merges(["a b"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)


def layer_tensors(config, layer):
    """(GGUF name, list of HF names stacked in order, f32?) for one layer."""
    hf, blk = f"model.layers.{layer}.", f"blk.{layer}."
    attention = "self_attn."
    out = [(blk + "attn_norm.weight", [hf + "input_layernorm.weight"], True),
           (blk + "ffn_norm.weight", [hf + "post_attention_layernorm.weight"], True),
           (blk + "attn_kv_a_mqa.weight", [hf + attention + "kv_a_proj_with_mqa.weight"], False),
           (blk + "attn_kv_a_norm.weight", [hf + attention + "kv_a_layernorm.weight"], True),
           (blk + "attn_kv_b.weight", [hf + attention + "kv_b_proj.weight"], False),
           (blk + "attn_output.weight", [hf + attention + "o_proj.weight"], False)]
    if config.get("q_lora_rank"):
        out += [(blk + "attn_q_a.weight", [hf + attention + "q_a_proj.weight"], False),
                (blk + "attn_q_a_norm.weight", [hf + attention + "q_a_layernorm.weight"], True),
                (blk + "attn_q_b.weight", [hf + attention + "q_b_proj.weight"], False)]
    else:
        out.append((blk + "attn_q.weight", [hf + attention + "q_proj.weight"], False))
    mlp = hf + "mlp."
    if layer < config["first_k_dense_replace"]:
        return out + [(blk + f"ffn_{p}.weight", [mlp + f"{p}_proj.weight"], False) for p in ("gate", "up", "down")]
    experts = range(config["n_routed_experts"])
    out += [(blk + "ffn_gate_inp.weight", [mlp + "gate.weight"], True),
            (blk + "exp_probs_b.bias", [mlp + "gate.e_score_correction_bias"], True)]
    out += [(blk + f"ffn_{p}_exps.weight", [mlp + f"experts.{e}.{p}_proj.weight" for e in experts], False)
            for p in ("gate", "up", "down")]
    out += [(blk + f"ffn_{p}_shexp.weight", [mlp + f"shared_experts.{p}_proj.weight"], False)
            for p in ("gate", "up", "down")]
    return out


def tensor_plan(config):
    plan = [("token_embd.weight", ["model.embed_tokens.weight"], False)]
    for layer in range(config["num_hidden_layers"]):
        plan += layer_tensors(config, layer)
    plan += [("output_norm.weight", ["model.norm.weight"], True), ("output.weight", ["lm_head.weight"], False)]
    return plan


def load(checkpoint, sources, as_f32):
    parts = [checkpoint.read(name) for name in sources]
    array = np.stack(parts) if len(parts) > 1 else parts[0]
    return np.ascontiguousarray(bf16_to_f32(array) if as_f32 else array)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    directory, out = sys.argv[1], sys.argv[2]
    config = json.load(open(os.path.join(directory, "config.json")))
    if config.get("model_type") not in ("deepseek_v3", "kimi_k2"):
        sys.exit(f"{directory}: model_type {config.get('model_type')}; this writes DeepSeek-V3-family models only")
    checkpoint = Checkpoint(directory)
    plan = tensor_plan(config)
    missing = [name for _, sources, _ in plan for name in sources if name not in checkpoint]
    if missing:
        sys.exit(f"{directory}: missing {missing[0]} (and {len(missing) - 1} more)")
    writer = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.DEEPSEEK2])
    add_metadata(writer, config)
    add_placeholder_vocabulary(writer, config["vocab_size"])
    for name, sources, as_f32 in plan:  # tensor infos first, from the headers; then the data, one at a time
        shape = ([len(sources)] if len(sources) > 1 else []) + checkpoint.shape(sources[0])
        dtype = np.dtype(np.float32 if as_f32 else np.uint16)
        writer.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize,
                               raw_dtype=None if as_f32 else gguf.GGMLQuantizationType.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, sources, as_f32 in plan:
        writer.write_tensor_data(load(checkpoint, sources, as_f32))
    writer.close()
    print(f"wrote {out}: {len(plan)} tensors")


if __name__ == "__main__":
    main()
