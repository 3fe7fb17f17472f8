"""The default target model: its config, training on the corpus, and its checkpoint names."""
import torch

from model import DeepseekV3, Moe

# A DeepSeek-V3 in miniature (9.7 M parameters, 3.9 M active a token): MLA with q-LoRA, a dense
# first layer, then 5 MoE layers of 16 routed experts in 4 groups (keep 2, top 4) and a shared
# expert, sigmoid routing with the bias chosen by DeepSeek-V3's auxiliary-loss-free rule.
CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 4096,
    "hidden_size": 256, "intermediate_size": 768, "moe_intermediate_size": 96, "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 128, "kv_lora_rank": 64,
    "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "n_routed_experts": 16, "n_group": 4,
    "topk_group": 2, "num_experts_per_tok": 4, "n_shared_experts": 1, "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": True, "first_k_dense_replace": 1,
    "moe_layer_freq": 1, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None,
    "max_position_embeddings": 1024, "tie_word_embeddings": False, "attention_bias": False,
    "num_nextn_predict_layers": 0, "torch_dtype": "bfloat16"}


def hf_name(name):
    """The checkpoint's name of a parameter or buffer of DeepseekV3 (without the MTP layer)."""
    return name if name.startswith("lm_head.") else "model." + name


def state_tensors(model, dtype=torch.bfloat16):
    """{checkpoint name: tensor}: weights in `dtype`, the routers' biases in F32."""
    out = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("mtp."):
            continue
        keep_f32 = name.endswith("e_score_correction_bias")
        out[hf_name(name)] = tensor.detach().float() if keep_f32 else tensor.detach().to(dtype)
    return out


def load_state(model, tensors):
    """Fills `model` from checkpoint tensors (any float dtype)."""
    state = model.state_dict()
    for name in state:
        if not name.startswith("mtp."):
            state[name] = tensors[hf_name(name)].float()
    model.load_state_dict(state)


def update_biases(model, rate):
    for moe in model.moe_layers():
        moe.update_bias(rate)


def new_model(seed, config=CONFIG):
    torch.manual_seed(seed)
    return DeepseekV3(config)


def expert_balance(model):
    """The most loaded expert's share of the tokens over the mean share, per MoE layer (1: even)."""
    return [float(m.load.max() / m.load.mean()) if m.load.sum() > 0 else 0.0 for m in model.moe_layers()
            if isinstance(m, Moe)]
