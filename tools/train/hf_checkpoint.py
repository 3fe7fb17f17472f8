"""Writes models as Hugging Face checkpoints: config.json, safetensors (written here, from the
format's specification), generation_config.json, and the tokenizer files."""
import json
import os
import struct

import numpy as np
import torch

DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.uint8: "U8", torch.int32: "I32",
          torch.int8: "I8"}


def tensor_bytes(tensor):
    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.int16).numpy().tobytes()
    return tensor.contiguous().numpy().tobytes()


def write_safetensors(path, tensors):
    """tensors: {name: torch tensor (F32, BF16, U8, I8, I32) or (dtype name, shape, bytes)}."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        value = tensors[name]
        if isinstance(value, tuple):
            dtype, shape, data = value
        else:
            dtype, shape, data = DTYPES[value.dtype], list(value.shape), tensor_bytes(value)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    """{name: torch tensor} of F32 / BF16 / U8 / I8 / I32 tensors."""
    blob = open(path, "rb").read()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + size])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = np.frombuffer(blob[8 + size + begin: 8 + size + end], dtype={
            "F32": "<f4", "BF16": "<i2", "U8": "u1", "I8": "i1", "I32": "<i4"}[entry["dtype"]]).copy()
        tensor = torch.from_numpy(raw).reshape(entry["shape"])
        out[name] = tensor.view(torch.bfloat16) if entry["dtype"] == "BF16" else tensor
    return out


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_model(model_dir, config, tensors, generation=None):
    os.makedirs(model_dir, exist_ok=True)
    write_safetensors(os.path.join(model_dir, "model.safetensors"), tensors)
    write_json(os.path.join(model_dir, "config.json"), config)
    if generation is not None:
        write_json(os.path.join(model_dir, "generation_config.json"), generation)


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)
