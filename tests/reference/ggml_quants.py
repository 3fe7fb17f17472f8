"""ggml's tensor types, written from their block definitions (llama.cpp ggml-common.h, the
dequantize_row_* loops of ggml-quants.c), sharing no code with mlaserve: each type's block
size and bytes, its dequantization to float32 in NumPy (every product and difference rounded
to float32 in the order ggml computes it), simple reference quantizers that write valid blocks,
and random blocks with extreme scales for bit-exact tests."""
import numpy as np

QK, QK_K = 32, 256
# name: (ggml type id, elements a block, bytes a block)
TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, QK, 18), "Q4_1": (3, QK, 20), "Q5_0": (6, QK, 22),
         "Q5_1": (7, QK, 24), "Q8_0": (8, QK, 34), "Q2_K": (10, QK_K, 84), "Q3_K": (11, QK_K, 110),
         "Q4_K": (12, QK_K, 144), "Q5_K": (13, QK_K, 176), "Q6_K": (14, QK_K, 210), "IQ4_NL": (20, QK, 18),
         "IQ4_XS": (23, QK_K, 136), "BF16": (30, 1, 2), "Q6_0": (133, QK, 26)}  # Q6_0: ik_llama.cpp's
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)
F32 = np.float32


def _f16(blocks, at):
    return blocks[:, at:at + 2].copy().view("<f2").astype(F32)  # [n, 1]


def _nibbles(qs):
    """[n, 16] bytes -> [n, 32]: the low nibbles, then the high ones."""
    return np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int32)


def _q4_0(b):
    return (_nibbles(b[:, 2:18]) - 8).astype(F32) * _f16(b, 0)


def _q4_1(b):
    return _nibbles(b[:, 4:20]).astype(F32) * _f16(b, 0) + _f16(b, 2)


def _fifth_bits(qh_bytes):
    bits = np.unpackbits(qh_bytes, axis=1, bitorder="little").astype(np.int32)  # [n, 32], bit j of the uint32
    return bits << 4


def _q5_0(b):
    return (_nibbles(b[:, 6:22]) + _fifth_bits(b[:, 2:6]) - 16).astype(F32) * _f16(b, 0)


def _q5_1(b):
    return (_nibbles(b[:, 8:24]) + _fifth_bits(b[:, 4:8])).astype(F32) * _f16(b, 0) + _f16(b, 2)


def _q6_0(b):
    """ik_llama.cpp's {d; qh[8]; qs[16]}: element j < 16 gets bits 0-1 of qh[j % 8] >> 4 (j // 8)
    above its low nibble, element j + 16 bits 2-3 above the high nibble; offset 32."""
    qh, qs = b[:, 2:10].astype(np.int32), b[:, 10:26].astype(np.int32)
    h = np.concatenate([qh >> 0, qh >> 4], axis=1)  # [n, 16]: j % 8 within, j // 8 picks the shift
    low = (qs & 0xF) | ((h << 4) & 0x30)
    high = (qs >> 4) | ((h << 2) & 0x30)
    return (np.concatenate([low, high], axis=1) - 32).astype(F32) * _f16(b, 0)


def _q8_0(b):
    return b[:, 2:34].view(np.int8).astype(F32) * _f16(b, 0)


def _two_bit_planes(qs):
    """[n, 64] bytes -> [n, 256] 2-bit values in Q2_K / Q3_K order: per 128-element half, four
    shifts, each the half's 32 bytes."""
    halves = [qs[:, 32 * h:32 * h + 32] for h in range(2)]
    return np.concatenate([(half >> s) & 3 for half in halves for s in (0, 2, 4, 6)], axis=1).astype(np.int32)


def _q2_k(b):
    d, dmin = _f16(b, 80), _f16(b, 82)
    scales = np.repeat(b[:, 0:16], 16, axis=1)  # one per 16 elements, in order
    dl = d * (scales & 0xF).astype(F32)
    ml = dmin * (scales >> 4).astype(F32)
    return dl * _two_bit_planes(b[:, 16:80]).astype(F32) - ml


def _q3_k_scales(raw):
    """[n, 12] -> [n, 16] six-bit scales minus 32: low 4 bits from bytes 0-7, high 2 from 8-11."""
    low = np.concatenate([raw[:, 0:8] & 0xF, raw[:, 0:8] >> 4], axis=1).astype(np.int32)
    high = np.concatenate([(raw[:, 8:12] >> s) & 3 for s in (0, 2, 4, 6)], axis=1).astype(np.int32)
    return (low | (high << 4)) - 32


def _q3_k(b):
    d = _f16(b, 108)
    hmask = b[:, 0:32]
    high = np.concatenate([(hmask >> bit) & 1 for bit in range(8)], axis=1).astype(np.int32)  # [n, 256]
    values = _two_bit_planes(b[:, 32:96]) - np.where(high == 1, 0, 4)
    dl = d * np.repeat(_q3_k_scales(b[:, 96:108]), 16, axis=1).astype(F32)
    return dl * values.astype(F32)


def _k4_scales_mins(raw):
    """Q4_K / Q5_K: [n, 12] -> eight 6-bit scales and eight 6-bit mins."""
    scales = np.zeros((raw.shape[0], 8), np.int32)
    mins = np.zeros((raw.shape[0], 8), np.int32)
    scales[:, :4] = raw[:, 0:4] & 63
    mins[:, :4] = raw[:, 4:8] & 63
    scales[:, 4:] = (raw[:, 8:12] & 0xF) | ((raw[:, 0:4] >> 6) << 4)
    mins[:, 4:] = (raw[:, 8:12] >> 4) | ((raw[:, 4:8] >> 6) << 4)
    return scales, mins


def _q45_k(b, five_bit):
    d, dmin = _f16(b, 0), _f16(b, 2)
    scales, mins = _k4_scales_mins(b[:, 4:16])
    qs = b[:, 48:176] if five_bit else b[:, 16:144]
    values = np.concatenate([part for s in range(4) for part in
                             (qs[:, 32 * s:32 * s + 32] & 0xF, qs[:, 32 * s:32 * s + 32] >> 4)], axis=1).astype(np.int32)
    if five_bit:
        qh = b[:, 16:48]
        values += np.concatenate([((qh >> bit) & 1) << 4 for bit in range(8)], axis=1).astype(np.int32)
    dl = np.repeat(d * scales.astype(F32), 32, axis=1)
    ml = np.repeat(dmin * mins.astype(F32), 32, axis=1)
    return dl * values.astype(F32) - ml


def _q6_k(b):
    d = _f16(b, 208)
    ql, qh, sc = b[:, 0:128], b[:, 128:192], b[:, 192:208].view(np.int8).astype(F32)
    out = []
    for h in range(2):
        low, high = ql[:, 64 * h:64 * h + 64], qh[:, 32 * h:32 * h + 32]
        parts = [(low[:, :32] & 0xF) | ((high & 3) << 4), (low[:, 32:] & 0xF) | (((high >> 2) & 3) << 4),
                 (low[:, :32] >> 4) | (((high >> 4) & 3) << 4), (low[:, 32:] >> 4) | (((high >> 6) & 3) << 4)]
        out += [p.astype(np.int32) - 32 for p in parts]
    values = np.concatenate(out, axis=1).astype(F32)
    return (d * np.repeat(sc, 16, axis=1)) * values


def _iq4_nl(b):
    return _f16(b, 0) * IQ4_LEVELS[_nibbles(b[:, 2:18])]


def _iq4_xs(b):
    d = _f16(b, 0)
    scales_h = b[:, 2:4].copy().view("<u2").astype(np.int32)  # [n, 1]
    low = np.concatenate([b[:, 4 + i // 2:5 + i // 2] >> (4 * (i % 2)) & 0xF for i in range(8)], axis=1)
    ls = low.astype(np.int32) | (((scales_h >> (2 * np.arange(8))) & 3) << 4)
    dl = np.repeat(d * (ls - 32).astype(F32), 32, axis=1)
    levels = np.concatenate([IQ4_LEVELS[_nibbles(b[:, 8 + 16 * i:24 + 16 * i])] for i in range(8)], axis=1)
    return dl * levels


DEQUANTIZE = {"Q6_0": _q6_0, "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0, "Q2_K": _q2_k,
              "Q3_K": _q3_k, "Q4_K": lambda b: _q45_k(b, False), "Q5_K": lambda b: _q45_k(b, True), "Q6_K": _q6_k,
              "IQ4_NL": _iq4_nl, "IQ4_XS": _iq4_xs}


def dequantize(type_name, raw, count):
    """float32 values of `count` elements stored as `type_name` in `raw` (bytes)."""
    _, block, nbytes = TYPES[type_name]
    data = np.frombuffer(raw, np.uint8)
    if type_name == "F32":
        return data.view("<f4")[:count].copy()
    if type_name == "F16":
        return data.view("<f2")[:count].astype(F32)
    if type_name == "BF16":
        return (data.view("<u2")[:count].astype(np.uint32) << 16).view(F32)
    blocks = data[:count // block * nbytes].reshape(-1, nbytes)
    return DEQUANTIZE[type_name](blocks).reshape(-1)


# ---- writing blocks: simple round-to-nearest quantizers (valid blocks, not ggml's searches) ----

def _f16_bytes(values):
    return np.asarray(values, F32).astype("<f2").reshape(-1, 1).view(np.uint8)  # [n, 2]


def _pack_nibbles(values):
    """[n, 32] ints in 0..15 -> [n, 16] bytes: element j low nibble of byte j, j + 16 its high one."""
    v = values.astype(np.uint8)
    return v[:, :16] | (v[:, 16:] << 4)


def _safe(scale):
    return np.where(scale == 0, 1, scale).astype(F32)


def _rtn(x, scale, low, high):
    return np.clip(np.rint(x / _safe(scale)), low, high).astype(np.int32)


def _quantize_32(x, type_name):
    amax, lo, hi = np.abs(x).max(1, keepdims=True), x.min(1, keepdims=True), x.max(1, keepdims=True)
    if type_name == "Q8_0":
        d = amax / 127
        return np.concatenate([_f16_bytes(d), _rtn(x, d, -127, 127).astype(np.int8).view(np.uint8)], 1)
    if type_name == "Q6_0":
        d = amax / 31
        q = _rtn(x, d, -32, 31) + 32
        h = (q[:, :16] >> 4) | ((q[:, 16:] >> 4) << 2)  # element j's two high bits and j + 16's
        qh = (h[:, :8] | (h[:, 8:] << 4)).astype(np.uint8)
        return np.concatenate([_f16_bytes(d), qh, _pack_nibbles(q & 0xF)], 1)
    if type_name in ("Q4_0", "Q5_0"):
        bits = 4 if type_name == "Q4_0" else 5
        d = amax / (2 ** (bits - 1) - 1)
        q = _rtn(x, d, -2 ** (bits - 1), 2 ** (bits - 1) - 1) + 2 ** (bits - 1)
    elif type_name in ("Q4_1", "Q5_1"):
        bits = 4 if type_name == "Q4_1" else 5
        d = (hi - lo) / (2 ** bits - 1)
        q = _rtn(x - lo, d, 0, 2 ** bits - 1)
    else:  # IQ4_NL
        d = amax / 127
        return np.concatenate([_f16_bytes(d), _pack_nibbles(_nearest_level(x, d))], 1)
    head = [_f16_bytes(d)] + ([_f16_bytes(lo)] if type_name in ("Q4_1", "Q5_1") else [])
    if bits == 5:
        head.append(np.packbits((q >> 4) & 1, axis=1, bitorder="little"))
    return np.concatenate(head + [_pack_nibbles(q & 0xF)], 1)


def _nearest_level(x, d):
    return np.abs(x[..., None] / _safe(d)[..., None] - IQ4_LEVELS).argmin(-1)


def _sub_scales(x, group, bits, max_code):
    """Per group: an unsigned scale and min (asymmetric, x >= -min) quantized to `max_code` steps of
    a super-block d and dmin; returns d, dmin, codes of scales and mins, and the values' codes."""
    g = x.reshape(x.shape[0], -1, group)
    mins = np.maximum(-g.min(2), 0)
    scales = (g.max(2) + mins) / (2 ** bits - 1)
    d, dmin = scales.max(1, keepdims=True) / max_code, mins.max(1, keepdims=True) / max_code
    d, dmin = d.astype("<f2").astype(F32), dmin.astype("<f2").astype(F32)
    sc = _rtn(scales, d, 0, max_code)
    mn = _rtn(mins, dmin, 0, max_code)
    step, offset = d * sc.astype(F32), dmin * mn.astype(F32)
    q = np.clip(np.rint((g + offset[..., None]) / _safe(step)[..., None]), 0, 2 ** bits - 1).astype(np.int32)
    return d, dmin, sc, mn, q.reshape(x.shape[0], -1)


def _k4_scale_bytes(sc, mn):
    out = np.zeros((sc.shape[0], 12), np.uint8)
    out[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    out[:, 4:8] = (mn[:, :4] & 63) | ((mn[:, 4:] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:] & 0xF) | ((mn[:, 4:] & 0xF) << 4)
    return out


def _planes_to_bytes(q):
    """Inverse of _two_bit_planes: [n, 256] 2-bit values -> [n, 64] bytes."""
    out = np.zeros((q.shape[0], 64), np.uint8)
    for h in range(2):
        for i, s in enumerate((0, 2, 4, 6)):
            out[:, 32 * h:32 * h + 32] |= (q[:, 128 * h + 32 * i:128 * h + 32 * i + 32] << s).astype(np.uint8)
    return out


def _quantize_q2_k(x):
    d, dmin, sc, mn, q = _sub_scales(x, 16, 2, 15)
    return np.concatenate([(sc | (mn << 4)).astype(np.uint8), _planes_to_bytes(q), _f16_bytes(d), _f16_bytes(dmin)], 1)


def _quantize_q45_k(x, five_bit):
    d, dmin, sc, mn, q = _sub_scales(x, 32, 5 if five_bit else 4, 63)
    parts = [_f16_bytes(d), _f16_bytes(dmin), _k4_scale_bytes(sc, mn)]
    if five_bit:
        qh = np.zeros((x.shape[0], 32), np.uint8)
        for bit in range(8):
            qh |= (((q[:, 32 * bit:32 * bit + 32] >> 4) & 1) << bit).astype(np.uint8)
        parts.append(qh)
    low = q & 0xF
    parts.append(np.concatenate([low[:, 64 * s:64 * s + 32] | (low[:, 64 * s + 32:64 * s + 64] << 4)
                                 for s in range(4)], 1).astype(np.uint8))
    return np.concatenate(parts, 1)


def _signed_sub_scales(x, group, max_value, max_code):
    """Symmetric groups: d (f16-rounded) and signed scale codes with |code| <= max_code, and the
    values' codes in [-max_value - 1, max_value]."""
    g = x.reshape(x.shape[0], -1, group)
    scales = np.abs(g).max(2) / max_value
    d = (scales.max(1, keepdims=True) / max_code).astype("<f2").astype(F32)
    sc = _rtn(scales, d, -max_code, max_code)
    q = np.clip(np.rint(g / _safe(d * sc.astype(F32))[..., None]), -max_value - 1, max_value).astype(np.int32)
    return d, sc, q.reshape(x.shape[0], -1)


def _quantize_q3_k(x):
    d, sc, q = _signed_sub_scales(x, 16, 3, 31)
    codes = (sc + 32).astype(np.uint8)
    scales = np.zeros((x.shape[0], 12), np.uint8)
    scales[:, 0:8] = (codes[:, 0:8] & 0xF) | ((codes[:, 8:16] & 0xF) << 4)
    for i, s in enumerate((0, 2, 4, 6)):
        scales[:, 8:12] |= ((codes[:, 4 * i:4 * i + 4] >> 4) << s).astype(np.uint8)
    hmask = np.zeros((x.shape[0], 32), np.uint8)
    for bit in range(8):
        hmask |= ((q[:, 32 * bit:32 * bit + 32] >= 0) << bit).astype(np.uint8)
    return np.concatenate([hmask, _planes_to_bytes(q & 3), scales, _f16_bytes(d)], 1)


def _quantize_q6_k(x):
    d, sc, q = _signed_sub_scales(x, 16, 31, 127)
    q = (q + 32).astype(np.uint8)
    ql, qh = np.zeros((x.shape[0], 128), np.uint8), np.zeros((x.shape[0], 64), np.uint8)
    for h in range(2):
        p = [q[:, 128 * h + 32 * i:128 * h + 32 * i + 32] for i in range(4)]
        ql[:, 64 * h:64 * h + 32] = (p[0] & 0xF) | ((p[2] & 0xF) << 4)
        ql[:, 64 * h + 32:64 * h + 64] = (p[1] & 0xF) | ((p[3] & 0xF) << 4)
        qh[:, 32 * h:32 * h + 32] = (p[0] >> 4) | ((p[1] >> 4) << 2) | ((p[2] >> 4) << 4) | ((p[3] >> 4) << 6)
    return np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8), _f16_bytes(d)], 1)


def _quantize_iq4_xs(x):
    g = x.reshape(x.shape[0], 8, 32)
    scales = np.abs(g).max(2) / 127
    d = (scales.max(1, keepdims=True) / 31).astype("<f2").astype(F32)
    ls = _rtn(scales, d, -31, 31) + 32
    dl = d * (ls - 32).astype(F32)
    q = _nearest_level(g, np.broadcast_to(dl[..., None], g.shape)).reshape(x.shape[0], 256)
    scales_h = np.zeros((x.shape[0], 1), np.uint16)
    for ib in range(8):
        scales_h |= ((ls[:, ib:ib + 1] >> 4) << (2 * ib)).astype(np.uint16)
    scales_l = np.stack([(ls[:, 2 * i] & 0xF) | ((ls[:, 2 * i + 1] & 0xF) << 4) for i in range(4)], 1).astype(np.uint8)
    qs = np.concatenate([_pack_nibbles(q[:, 32 * i:32 * i + 32]) for i in range(8)], 1)
    return np.concatenate([_f16_bytes(d), scales_h.view(np.uint8), scales_l, qs], 1)


def quantize(type_name, x):
    """bytes of float32 values `x` (a multiple of the block size) stored as `type_name`."""
    x = np.ascontiguousarray(x, F32).reshape(-1)
    if type_name == "F32":
        return x.tobytes()
    if type_name == "F16":
        return x.astype("<f2").tobytes()
    if type_name == "BF16":
        bits = x.view(np.uint32).astype(np.uint64)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
    block = TYPES[type_name][1]
    x = x.reshape(-1, block)
    if block == QK:
        return _quantize_32(x, type_name).tobytes()
    writers = {"Q2_K": _quantize_q2_k, "Q3_K": _quantize_q3_k, "Q4_K": lambda v: _quantize_q45_k(v, False),
               "Q5_K": lambda v: _quantize_q45_k(v, True), "Q6_K": _quantize_q6_k, "IQ4_XS": _quantize_iq4_xs}
    return writers[type_name](x).tobytes()


# The fp16 fields of each quantized block (byte offsets), for random blocks with chosen scales.
SCALE_FIELDS = {"Q6_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q2_K": (80, 82),
                "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_NL": (0,), "IQ4_XS": (0,)}
EXTREME_F16 = np.array([0.0, -0.0, 65504.0, -65504.0, 6.1035156e-05, -6.1035156e-05, 5.9604645e-08, -5.9604645e-08,
                        1.0, -1.0, 0.5, 3.0517578e-05], F32)


def random_blocks(type_name, count, rng):
    """`count` blocks of random bytes whose fp16 scales are random normals and, in a third of the
    blocks, the extremes of fp16 (largest, smallest normal and subnormal, signed zeros)."""
    nbytes = TYPES[type_name][2]
    blocks = rng.integers(0, 256, (count, nbytes), dtype=np.uint8)
    for at in SCALE_FIELDS[type_name]:
        values = rng.standard_normal(count).astype(F32) * F32(0.05)
        extreme = rng.random(count) < 1 / 3
        values[extreme] = rng.choice(EXTREME_F16, int(extreme.sum()))
        blocks[:, at:at + 2] = _f16_bytes(values)
    return blocks.tobytes()
