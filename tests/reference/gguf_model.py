"""Writes a DeepSeek-V3-family checkpoint (config.json and safetensors, as make-model writes it)
as a deepseek2 GGUF the way llama.cpp's convert_hf_to_gguf.py and llama-quantize lay it out,
each projection quantized by this project's reference quantizers (ggml_quants.py), and the
checkpoint's "dequantized twin": the same config with every tensor replaced by the values the
GGUF holds, for the float64 oracle. Sharing no code with mlaserve.

Layouts: "mla" (llama.cpp's current one: kv_b_proj split into attn_k_b, transposed, and
attn_v_b; key_length_mla), "kv_b" (older files and ik_llama.cpp's: one attn_kv_b)."""
import json
import os
import shutil
import struct

import numpy as np

import ggml_quants as gq
import gguf_writer as gw
from checkpoint import read_checkpoint

LAYER_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_a_proj": "attn_q_a", "self_attn.q_a_layernorm": "attn_q_a_norm",
               "self_attn.q_b_proj": "attn_q_b", "self_attn.q_proj": "attn_q",
               "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa", "self_attn.kv_a_layernorm": "attn_kv_a_norm",
               "self_attn.kv_b_proj": "attn_kv_b", "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate",
               "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down", "mlp.gate": "ffn_gate_inp",
               "mlp.shared_experts.gate_proj": "ffn_gate_shexp", "mlp.shared_experts.up_proj": "ffn_up_shexp",
               "mlp.shared_experts.down_proj": "ffn_down_shexp", "eh_proj": "nextn.eh_proj", "enorm": "nextn.enorm",
               "hnorm": "nextn.hnorm", "shared_head.norm": "nextn.shared_head_norm",
               "shared_head.head": "nextn.shared_head_head", "embed_tokens": "nextn.embed_tokens"}


def as_f32(dtype, shape, raw):
    data = np.frombuffer(raw, {"F32": "<f4", "BF16": "<u2", "F16": "<f2"}[dtype])
    if dtype == "BF16":
        data = (data.astype(np.uint32) << 16).view(np.float32)
    return data.astype(np.float32).reshape(shape)


def add_metadata(writer, config, layout, file_type):
    a = "deepseek2."
    rope, rank = config["qk_rope_head_dim"], config["kv_lora_rank"]
    writer.add("general.architecture", "deepseek2")
    writer.add("general.name", "mlaserve test model")
    writer.add("general.file_type", file_type, gw.U32)
    nextn = config.get("num_nextn_predict_layers", 0)
    writer.add(a + "block_count", config["num_hidden_layers"] + nextn, gw.U32)
    if nextn:
        writer.add(a + "nextn_predict_layers", nextn, gw.U32)
    for key, value in [("context_length", config["max_position_embeddings"]), ("embedding_length", config["hidden_size"]),
                       ("feed_forward_length", config["intermediate_size"]),
                       ("attention.head_count", config["num_attention_heads"]),
                       ("leading_dense_block_count", config["first_k_dense_replace"]),
                       ("vocab_size", config["vocab_size"]), ("attention.kv_lora_rank", rank),
                       ("expert_feed_forward_length", config["moe_intermediate_size"]),
                       ("expert_count", config["n_routed_experts"]), ("expert_used_count", config["num_experts_per_tok"]),
                       ("expert_shared_count", config["n_shared_experts"]), ("rope.dimension_count", rope),
                       ("expert_group_count", config.get("n_group", 1)),
                       ("expert_group_used_count", config.get("topk_group", 1))]:
        writer.add(a + key, value, gw.U32)
    if config.get("q_lora_rank"):
        writer.add(a + "attention.q_lora_rank", config["q_lora_rank"], gw.U32)
    head_k, head_v = config["qk_nope_head_dim"] + rope, config["v_head_dim"]
    if layout == "mla":
        writer.add(a + "attention.head_count_kv", 1, gw.U32)
        writer.add(a + "attention.key_length", rank + rope, gw.U32)
        writer.add(a + "attention.value_length", rank, gw.U32)
        writer.add(a + "attention.key_length_mla", head_k, gw.U32)
        writer.add(a + "attention.value_length_mla", head_v, gw.U32)
    else:
        writer.add(a + "attention.head_count_kv", config["num_attention_heads"], gw.U32)
        writer.add(a + "attention.key_length", head_k, gw.U32)
        writer.add(a + "attention.value_length", head_v, gw.U32)
    writer.add(a + "rope.freq_base", float(config.get("rope_theta", 10000.0)), gw.F32)
    writer.add(a + "attention.layer_norm_rms_epsilon", float(config["rms_norm_eps"]), gw.F32)
    writer.add(a + "expert_weights_scale", float(config.get("routed_scaling_factor", 1.0)), gw.F32)
    writer.add(a + "expert_weights_norm", bool(config.get("norm_topk_prob", False)), gw.BOOL)
    writer.add(a + "expert_gating_func", 2 if config.get("scoring_func") == "sigmoid" else 1, gw.U32)
    scaling = config.get("rope_scaling")
    if scaling:
        writer.add(a + "rope.scaling.type", "yarn")
        writer.add(a + "rope.scaling.factor", float(scaling["factor"]), gw.F32)
        writer.add(a + "rope.scaling.original_context_length", scaling["original_max_position_embeddings"], gw.U32)
        writer.add(a + "rope.scaling.yarn_log_multiplier", 0.1 * scaling["mscale_all_dim"], gw.F32)


def add_tokenizer(writer, model_dir, config):
    """tokenizer.json and tokenizer_config.json as llama.cpp's converter writes a gpt2 vocabulary:
    tokens by id (missing ids as unused [PAD<id>]), their types, merges, the pre-tokenizer's name,
    the special ids and the chat template."""
    tokenizer = json.load(open(os.path.join(model_dir, "tokenizer.json")))
    settings = json.load(open(os.path.join(model_dir, "tokenizer_config.json")))
    tokens = {i: f"[PAD{i}]" for i in range(config["vocab_size"])}
    types = {i: 5 for i in tokens}  # unused
    for text, i in tokenizer["model"]["vocab"].items():
        tokens[i], types[i] = text, 1  # normal
    for added in tokenizer.get("added_tokens", []):
        tokens[added["id"]], types[added["id"]] = added["content"], 3 if added["special"] else 4
    ids = {text: i for i, text in tokens.items()}
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    writer.add("tokenizer.ggml.model", "gpt2")
    writer.add("tokenizer.ggml.pre", "deepseek-v3")
    writer.add("tokenizer.ggml.tokens", [tokens[i] for i in range(len(tokens))], gw.ARRAY, gw.STRING)
    writer.add("tokenizer.ggml.token_type", [types[i] for i in range(len(tokens))], gw.ARRAY, gw.I32)
    writer.add("tokenizer.ggml.merges", merges, gw.ARRAY, gw.STRING)
    writer.add("tokenizer.ggml.bos_token_id", ids[settings["bos_token"]], gw.U32)
    writer.add("tokenizer.ggml.eos_token_id", ids[settings["eos_token"]], gw.U32)
    writer.add("tokenizer.ggml.add_bos_token", bool(settings.get("add_bos_token")), gw.BOOL)
    writer.add("tokenizer.chat_template", settings["chat_template"])


def gguf_names(hf_name, config):
    """(GGUF name, expert index or None) of a HF tensor name."""
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf_name in top:
        return top[hf_name], None
    parts = hf_name.split(".")
    layer, rest = parts[2], ".".join(parts[3:])
    if rest == "mlp.gate.e_score_correction_bias":
        return f"blk.{layer}.exp_probs_b.bias", None
    if rest.startswith("mlp.experts."):
        expert, projection = parts[5], parts[6]
        return f"blk.{layer}.ffn_{projection[:-5]}_exps.weight", int(expert)
    return f"blk.{layer}.{LAYER_NAMES[rest[:-len('.weight')]]}.weight", None


def choose_type(gguf_name, cols, type_name, mixed):
    """The stored type: F32 for norms, the router and biases; the asked type for projections and
    the embedding (Q4_K_M's mix: Q6_K for value projections, the head and half the down
    projections); Q8_0 (or F16) where the columns are not whole blocks of it, as llama-quantize
    falls back."""
    if gguf_name.endswith("norm.weight") or "ffn_gate_inp" in gguf_name or gguf_name.endswith(".bias"):
        return "F32"
    if mixed == "Q4_K_M":
        layer = int(gguf_name.split(".")[1]) if gguf_name.startswith("blk.") else 0
        six = ("attn_v_b" in gguf_name or "attn_kv_b" in gguf_name or gguf_name == "output.weight" or
               ("ffn_down" in gguf_name and layer % 2 == 0))
        type_name = "Q6_K" if six else "Q4_K"
    block = gq.TYPES[type_name][1]
    if cols % block:
        return "Q8_0" if cols % 32 == 0 else "F16"
    return type_name


def convert(model_dir, out_path, twin_dir, type_name, layout="mla", mixed=None, mtp=True):
    """Writes out_path (GGUF) and twin_dir (safetensors of the values it holds; None: no twin);
    returns the {GGUF name: type} written. mtp=False leaves the MTP layers out (engines that lack them)."""
    config = json.load(open(os.path.join(model_dir, "config.json")))
    tensors = {name: as_f32(*entry) for name, entry in read_checkpoint(model_dir).items()}
    if not mtp:
        config["num_nextn_predict_layers"] = 0
        tensors = {name: values for name, values in tensors.items()
                   if not name.startswith("model.layers.") or int(name.split(".")[2]) < config["num_hidden_layers"]}
    writer, twin, types = gw.GgufWriter(), {}, {}
    add_metadata(writer, config, layout, 7 if type_name == "Q8_0" else 15)
    add_tokenizer(writer, model_dir, config)
    stacked = {}
    for hf_name, values in tensors.items():
        name, expert = gguf_names(hf_name, config)
        if expert is not None:
            stacked.setdefault(name, {})[expert] = (hf_name, values)
            continue
        if name.endswith("attn_kv_b.weight") and layout == "mla":
            add_split_kv_b(writer, twin, types, name, hf_name, values, config, type_name, mixed)
            continue
        add_tensor(writer, twin, types, name, [hf_name], values, type_name, mixed)
    for name, experts in stacked.items():
        order = [experts[e] for e in sorted(experts)]
        add_tensor(writer, twin, types, name, [hf for hf, _ in order], np.stack([v for _, v in order]), type_name, mixed)
    writer.write(out_path)
    if twin_dir:
        write_twin(model_dir, twin_dir, twin)
    return types


def add_tensor(writer, twin, types, name, hf_names, values, type_name, mixed):
    chosen = choose_type(name, values.shape[-1], type_name, mixed)
    raw = gq.quantize(chosen, values)
    writer.add_tensor(name, chosen, values.shape, raw)
    types[name] = chosen
    back = gq.dequantize(chosen, raw, values.size).reshape(values.shape)
    for i, hf in enumerate(hf_names):
        twin[hf] = back[i] if len(hf_names) > 1 else back


def add_split_kv_b(writer, twin, types, name, hf_name, kv_b, config, type_name, mixed):
    heads, nope, v = config["num_attention_heads"], config["qk_nope_head_dim"], config["v_head_dim"]
    per_head = kv_b.reshape(heads, nope + v, -1)
    k_b = np.ascontiguousarray(per_head[:, :nope, :].transpose(0, 2, 1))  # [heads, rank, nope]
    v_b = np.ascontiguousarray(per_head[:, nope:, :])                     # [heads, v, rank]
    parts = {}
    for part, values in (("attn_k_b", k_b), ("attn_v_b", v_b)):
        part_name = name.replace("attn_kv_b", part)
        chosen = choose_type(part_name, values.shape[-1], type_name, mixed)
        raw = gq.quantize(chosen, values)
        writer.add_tensor(part_name, chosen, values.shape, raw)
        types[part_name] = chosen
        parts[part] = gq.dequantize(chosen, raw, values.size).reshape(values.shape)
    twin[hf_name] = np.concatenate([parts["attn_k_b"].transpose(0, 2, 1), parts["attn_v_b"]], 1).reshape(kv_b.shape)


def write_twin(model_dir, twin_dir, tensors):
    os.makedirs(twin_dir, exist_ok=True)
    for name in os.listdir(model_dir):
        if not name.endswith(".safetensors") and not name.endswith(".index.json"):
            shutil.copy(os.path.join(model_dir, name), twin_dir)
    header, blobs, offset = {}, [], 0
    for name, values in tensors.items():
        raw = np.ascontiguousarray(values, np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(values.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(twin_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)
