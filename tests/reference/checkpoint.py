"""Independent reader for Hugging Face safetensors checkpoints, with dequantisation to
float64 of every weight format mlaserve loads. Written from the format specs, sharing no
code with mlaserve."""
import json
import mmap
import os
import struct

import numpy as np

NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "u1"}


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} of one file, the bytes memoryviews of its mapping."""
    with open(path, "rb") as f:
        blob = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(bytes(blob[8:8 + header_len]))
    base = 8 + header_len
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = (entry["dtype"], tuple(entry["shape"]), blob[base + begin: base + end])
    return out


def read_checkpoint(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(model_dir, "model.safetensors"))
    tensors = {}
    for shard in sorted(set(json.load(open(index))["weight_map"].values())):
        tensors.update(read_safetensors(os.path.join(model_dir, shard)))
    return tensors


def fp8_e4m3_values():
    """All 256 E4M3 (fn) codes as float64: bias 7, subnormals, 0x7f/0xff NaN."""
    values = np.zeros(256)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent, mantissa = (code >> 3) & 0xF, code & 0x7
        if exponent == 0xF and mantissa == 0x7:
            values[code] = np.nan
        elif exponent == 0:
            values[code] = sign * (mantissa / 8.0) * 2.0 ** -6
        else:
            values[code] = sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)
    return values


def to_float(dtype, shape, raw):
    if dtype == "BF16":
        bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64).reshape(shape)
    if dtype == "F8_E4M3":
        return fp8_e4m3_values()[np.frombuffer(raw, np.uint8)].reshape(shape)
    return np.frombuffer(raw, NUMPY_DTYPES[dtype]).astype(np.float64).reshape(shape)


def quantize_q8(x, flip_ties=False):
    """Each row of x rounded to int8 in blocks of 32 and back (see Weights.apply). flip_ties:
    values within NEAR_TIE of a .5 tie round the other way, as mlaserve's fp32 activations
    (a few 1e-7 from these) may make them."""
    blocks = np.asarray(x, np.float32).reshape(*x.shape[:-1], -1, 32)
    amax = np.abs(blocks).max(-1, keepdims=True)
    inverse = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), np.float32(0)).astype(np.float32)
    scaled = blocks * inverse
    q = np.rint(scaled)
    if flip_ties:
        near = np.abs(np.abs(scaled - np.floor(scaled)) - 0.5) < NEAR_TIE
        q = np.where(near, np.where(q == np.floor(scaled), q + 1, q - 1), q)
    return (q * (amax.astype(np.float64) / 127)).reshape(x.shape)


ACTIVATIONS = ("int8", "int8, ties flipped", "exact")
# An activation x * 127 / max|x| this close to a .5 tie may round either way in mlaserve: its
# fp32 activations differ from the reference's by up to ~1e-5 relative after a few layers,
# i.e. up to ~1.3e-3 of a step at the block's largest value.
NEAR_TIE = 2e-3


def bf16_round(x):
    """float32 values rounded to the nearest bf16, ties to even, as float32."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)


def quantize_int4_groups(weight):
    """mlaserve --requantize q4: each row's groups of 32 to INT4 with the scale max|w| / 7
    rounded to bf16 (1 for an all-zero group), q = clip(round-half-even(w / scale), -8, 7) in
    float32; returns q * scale."""
    groups = np.asarray(weight, np.float32).reshape(weight.shape[0], -1, 32)
    amax = np.abs(groups).max(-1, keepdims=True)
    scale = bf16_round(np.where(amax > 0, amax / np.float32(7), np.float32(1)))
    q = np.clip(np.rint(groups / scale), -8, 7)
    return (q * scale.astype(np.float64)).reshape(weight.shape)


class Weights:
    def __init__(self, model_dir, fp8_block=(128, 128), activations="int8", requantize_q4=False):
        """activations: what 4-bit weights meet. "int8": x rounded as mlaserve's default;
        "int8, ties flipped": the same with its near-ties rounded the other way (quantize_q8);
        "exact": x unrounded (mlaserve --act-quant off). requantize_q4: BF16 linear weights as
        mlaserve --requantize q4 loads them (all but the embedding, routers and kv_b_proj)."""
        assert activations in ACTIVATIONS, activations
        self.tensors = read_checkpoint(model_dir)
        self.fp8_block = fp8_block
        self.int8_activations = activations != "exact"
        self.flip_ties = activations == "int8, ties flipped"
        self.requantize_q4 = requantize_q4

    def requantized(self, prefix):
        name = prefix + ".weight"
        if not self.requantize_q4 or name not in self.tensors or self.tensors[name][0] != "BF16":
            return False
        excluded = prefix.endswith("embed_tokens") or prefix.endswith("mlp.gate") or prefix.endswith("kv_b_proj")
        return not excluded and self.tensors[name][1][-1] % 32 == 0

    def has(self, name):
        return name in self.tensors

    def get(self, name):
        return to_float(*self.tensors[name])

    def is_4bit(self, prefix):
        return self.has(prefix + ".weight_packed") or self.requantized(prefix)

    def apply(self, prefix, x):
        """x @ W.T for the linear layer at prefix. A 4-bit weight (INT4 in groups of whole 32s,
        MXFP4) meets x as mlaserve feeds it: rounded to int8 per 32 columns of each row, scale
        max|x| / 127, half to even, in float32 (the kernels' integer dot products)."""
        weight = self.linear(prefix)
        if self.int8_activations and self.is_4bit(prefix) and weight.shape[1] % 32 == 0 and self.group_size(prefix) % 32 == 0:
            x = quantize_q8(x, self.flip_ties)
        return x @ weight.T

    def group_size(self, prefix):
        if self.has(prefix + ".weight_scale") and self.tensors[prefix + ".weight_packed"][0] != "U8":
            _, packed_shape, _ = self.tensors[prefix + ".weight_packed"]
            _, scale_shape, _ = self.tensors[prefix + ".weight_scale"]
            return packed_shape[1] * 8 // scale_shape[1]
        return 32

    def linear(self, prefix):
        """Dequantised [out, in] weight of a linear layer, whatever its stored format."""
        if self.requantized(prefix):
            return quantize_int4_groups(self.get(prefix + ".weight"))
        if self.has(prefix + ".weight_packed") and self.tensors[prefix + ".weight_packed"][0] == "U8":
            # compressed-tensors MXFP4: E2M1 nibbles (low nibble = even column, bit 3 = sign),
            # one E8M0 scale 2^(s - 127) per 32 columns
            dtype, shape, raw = self.tensors[prefix + ".weight_packed"]
            packed = np.frombuffer(raw, np.uint8).reshape(shape)
            codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(shape[0], -1)
            magnitude = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])[codes & 7]
            values = np.where(codes & 8, -magnitude, magnitude)
            exponents = np.frombuffer(self.tensors[prefix + ".weight_scale"][2], np.uint8).reshape(shape[0], -1)
            return values * np.repeat(2.0 ** (exponents.astype(np.float64) - 127), 32, axis=1)
        if self.has(prefix + ".weight_packed"):  # compressed-tensors INT4, offset-coded nibbles
            dtype, shape, raw = self.tensors[prefix + ".weight_packed"]
            words = np.frombuffer(raw, "<u4").reshape(shape)
            nibbles = (words[:, :, None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF
            q = nibbles.reshape(shape[0], -1).astype(np.float64) - 8.0
            scale = self.get(prefix + ".weight_scale")
            group = q.shape[1] // scale.shape[1]
            return q * np.repeat(scale, group, axis=1)
        weight = self.get(prefix + ".weight")
        if self.tensors[prefix + ".weight"][0] == "I8":  # compressed-tensors int-quantized
            scale = self.get(prefix + ".weight_scale")
            return weight * np.repeat(scale, weight.shape[1] // scale.shape[1], axis=1)
        if self.tensors[prefix + ".weight"][0] == "F8_E4M3":  # one scale per block
            scale = self.get(prefix + ".weight_scale_inv")
            rows, cols = self.fp8_block
            expanded = np.repeat(np.repeat(scale, rows, axis=0), cols, axis=1)
            return weight * expanded[: weight.shape[0], : weight.shape[1]]
        return weight
