"""Exports a BF16 DeepSeek-V3 checkpoint in the quantized formats the big models ship in:

  fp8    every linear layer but the router and the LM head: F8_E4M3 codes and an F32
         weight_scale_inv per 128 x 128 block (max |w| / 448), as DeepSeek-V3 ships;
  int4   the routed experts: compressed-tensors pack-quantized, symmetric groups of 32 (scale
         max |w| / 7 in BF16, codes q + 8 eight to an int32), as Kimi K2 Thinking ships;
  mxfp4  the routed experts: compressed-tensors mxfp4-pack-quantized (E2M1 codes, an E8M0
         scale per 32: 2^(floor(log2 max |w|) - 2), the OCP MX rule), as Kimi K3 ships.

  /usr/bin/python3 tools/train/export.py --format fp8|int4|mxfp4 SOURCE_DIR OUT_DIR"""
import argparse
import os
import re
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_checkpoint  # noqa: E402
import mxfp4  # noqa: E402

ROUTED_EXPERT = re.compile(r"\.mlp\.experts\.\d+\.(gate|up|down)_proj$")


def e4m3_table():
    """The 127 non-negative finite E4M3 values, by code (0x00..0x7e)."""
    values = []
    for code in range(0x7F):
        exponent, mantissa = code >> 3, code & 7
        values.append(mantissa / 8 * 2.0 ** -6 if exponent == 0 else (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    return np.array(values)


E4M3 = e4m3_table()


def to_e4m3(x):
    """Nearest E4M3 code of each value (ties to the even code), saturating at 448."""
    magnitude = np.minimum(np.abs(x), 448.0)
    upper = np.clip(np.searchsorted(E4M3, magnitude), 1, len(E4M3) - 1)
    lower = upper - 1
    below, above = magnitude - E4M3[lower], E4M3[upper] - magnitude
    codes = np.where((below < above) | ((below == above) & (lower % 2 == 0)), lower, upper)
    return (codes | np.where((x < 0) & (codes > 0), 0x80, 0)).astype(np.uint8)


def fp8(weight):
    rows, cols = weight.shape
    block_rows, block_cols = -(-rows // 128), -(-cols // 128)
    scales = np.zeros((block_rows, block_cols), np.float32)
    codes = np.zeros((rows, cols), np.uint8)
    for i in range(block_rows):
        for j in range(block_cols):
            block = weight[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            scale = np.float32(np.abs(block).max() / 448.0 or 1.0)
            scales[i, j] = scale
            codes[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = to_e4m3(block / np.float64(scale))
    return codes, scales


def bf16_round(x):
    return torch.from_numpy(np.asarray(x, np.float32)).to(torch.bfloat16)


def int4(weight, group=32):
    rows, cols = weight.shape
    groups = weight.reshape(rows, cols // group, group)
    scales = bf16_round(np.where(np.abs(groups).max(-1) > 0, np.abs(groups).max(-1) / 7.0, 1.0))
    q = np.clip(np.rint(groups / scales.float().numpy()[..., None]), -8, 7).astype(np.int64) + 8
    nibbles = q.reshape(rows, cols // 8, 8)
    words = (nibbles << (4 * np.arange(8))).sum(-1).astype(np.uint32).view(np.int32)
    return words, scales


def quantization_config(fmt):
    if fmt == "fp8":
        return {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
    weights = {"num_bits": 4, "symmetric": True, "strategy": "group", "group_size": 32, "dynamic": False}
    weights.update({"type": "int"} if fmt == "int4" else {"type": "float", "scale_dtype": "torch.uint8"})
    group = {"targets": ["Linear"], "weights": weights}
    ignore = ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|down)_proj.*",
              "re:.*mlp\\.gate$"]
    fmt_name = "pack-quantized" if fmt == "int4" else "mxfp4-pack-quantized"
    return {"quant_method": "compressed-tensors", "format": fmt_name, "quantization_status": "compressed",
            "config_groups": {"group_0": dict(group, format=fmt_name)}, "ignore": ignore}


def quantized(fmt, name, tensor):
    """{checkpoint name: value} for one tensor of the BF16 checkpoint."""
    prefix = name[: -len(".weight")] if name.endswith(".weight") else None
    weight = tensor.float().numpy() if prefix else None
    if fmt == "fp8" and prefix and tensor.dim() == 2 and ("_proj" in prefix) and not prefix.endswith("mlp.gate"):
        codes, scales = fp8(weight)
        return {name: ("F8_E4M3", list(codes.shape), codes.tobytes()), prefix + ".weight_scale_inv": torch.from_numpy(scales)}
    if fmt in ("int4", "mxfp4") and prefix and ROUTED_EXPERT.search(prefix):
        if fmt == "int4":
            words, scales = int4(weight)
            return {prefix + ".weight_packed": torch.from_numpy(words), prefix + ".weight_scale": scales,
                    prefix + ".weight_shape": torch.tensor(list(weight.shape), dtype=torch.int32)}
        packed, scales = mxfp4.quantize(weight)
        return {prefix + ".weight_packed": torch.from_numpy(packed), prefix + ".weight_scale": torch.from_numpy(scales)}
    return {name: tensor}


def export(fmt, source, out):
    config = hf_checkpoint.read_json(os.path.join(source, "config.json"))
    tensors = hf_checkpoint.read_safetensors(os.path.join(source, "model.safetensors"))
    result = {}
    for name, tensor in tensors.items():
        result.update(quantized(fmt, name, tensor))
    config["quantization_config"] = quantization_config(fmt)
    os.makedirs(out, exist_ok=True)
    hf_checkpoint.write_safetensors(os.path.join(out, "model.safetensors"), result)
    hf_checkpoint.write_json(os.path.join(out, "config.json"), config)
    for extra in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(source, extra)):
            shutil.copy(os.path.join(source, extra), os.path.join(out, extra))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", choices=("fp8", "int4", "mxfp4"), required=True)
    parser.add_argument("source")
    parser.add_argument("out")
    args = parser.parse_args()
    export(args.format, args.source, args.out)


if __name__ == "__main__":
    main()
