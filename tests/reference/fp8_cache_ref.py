"""The FP8 latent cache's values, from the format's definition (docs/correctness.md): what a
cached row reads back as after `--kv-cache-dtype fp8` stores it.

A row is kv_lora_rank normalised latent values and the rope key. The latent is cut into blocks
of 128 values; each block is divided by a power of two, the smallest that brings its largest
magnitude to 448 or below, and rounded to the nearest FP8 E4M3 value (ties to the even code).
The rope key is rounded to bf16 (nearest, ties to even).
"""
import numpy as np

from checkpoint import bf16_round, fp8_e4m3_values

BLOCK = 128


def round_e4m3(x):
    """x (|x| <= 448) to the nearest E4M3 value, ties to the even code (the rule of
    tools/train/export.py's to_e4m3, which imports torch with it)."""
    table = fp8_e4m3_values()[:0x7F]  # the non-negative finite values, in code order
    magnitude = np.minimum(np.abs(x), 448.0)
    upper = np.clip(np.searchsorted(table, magnitude), 1, len(table) - 1)
    lower = upper - 1
    to_lower, to_upper = magnitude - table[lower], table[upper] - magnitude
    code = np.where(to_lower < to_upper, lower, np.where(to_upper < to_lower, upper, np.where(lower % 2 == 0, lower, upper)))
    return np.sign(x) * table[code]


def block_scales(latent):
    """[rows, blocks]: each block's power-of-two scale."""
    rows, rank = latent.shape
    blocks = -(-rank // BLOCK)
    amax = np.zeros((rows, blocks))
    for b in range(blocks):
        amax[:, b] = np.abs(latent[:, b * BLOCK:(b + 1) * BLOCK]).max(-1)
    with np.errstate(divide="ignore"):
        exponent = np.ceil(np.log2(amax / 448.0))
    return np.where(amax > 0, 2.0 ** exponent, 1.0)


def fp8_latent(latent):
    """The normalised latent [rows, kv_lora_rank] as an FP8 cache reads it back."""
    scales = np.repeat(block_scales(latent), BLOCK, axis=1)[:, :latent.shape[1]]
    return round_e4m3(latent / scales) * scales


def cached(latent, k_pe, dtype):
    """(latent, rope key) as a cache of `dtype` (exact | bf16 | fp8) reads them back; values stored
    in fp32 first, as mlaserve computes them."""
    if dtype == "exact":
        return latent, k_pe
    latent, k_pe = latent.astype(np.float32).astype(np.float64), k_pe.astype(np.float32).astype(np.float64)
    k_pe = bf16_round(k_pe).astype(np.float64)
    return (fp8_latent(latent) if dtype == "fp8" else bf16_round(latent).astype(np.float64)), k_pe
