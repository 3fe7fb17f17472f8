#include "io/ggml_types.h"

#include <cstring>

#include "base/dtype.h"
#include "base/error.h"

namespace mlaserve {
namespace {

constexpr int64_t QK = 32, QK_K = 256;

// IQ4_NL's and IQ4_XS's 16 non-uniform levels (ggml-common.h kvalues_iq4nl).
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

float f16_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(bits);
}

// Q4_0 {d; qs[16]}, Q4_1 {d; m; qs[16]}: element j in qs[j]'s low nibble, j + 16 in its high one.
void q4_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = float((b[2 + j] & 0xF) - 8) * d;
    y[j + 16] = float((b[2 + j] >> 4) - 8) * d;
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(b[4 + j] & 0xF) * d + m;
    y[j + 16] = float(b[4 + j] >> 4) * d + m;
  }
}

// Q5_0 {d; qh (32 fifth bits, little-endian); qs[16]}, Q5_1 {d; m; qh; qs[16]}.
void q5(const uint8_t* b, bool with_min, float* y) {
  const float d = f16_at(b), m = with_min ? f16_at(b + 2) : 0.0f;
  const uint8_t* p = b + (with_min ? 4 : 2);
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  const uint8_t* qs = p + 4;
  for (int j = 0; j < 16; ++j) {
    const int x0 = (qs[j] & 0xF) | int(((qh >> j) << 4) & 0x10);
    const int x1 = (qs[j] >> 4) | int((qh >> (j + 12)) & 0x10);
    if (with_min) {
      y[j] = float(x0) * d + m;
      y[j + 16] = float(x1) * d + m;
    } else {
      y[j] = float(x0 - 16) * d;
      y[j + 16] = float(x1 - 16) * d;
    }
  }
}

void q8_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < QK; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

// Q2_K {scales[16] (low nibble scale, high nibble min); qs[64]; d; dmin}: 16 groups of 16, each
// 2-bit value x giving d * scale * x - dmin * min.
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  int is = 0;
  for (int n = 0; n < QK_K; n += 128, q += 32)
    for (int shift = 0; shift < 8; shift += 2)
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l + 16 * half] >> shift) & 3) - ml;
      }
}

// Q3_K {hmask[32]; qs[64]; scales[12] (16 six-bit scales, offset 32); d}: a 2-bit value and a
// high bit; a clear high bit subtracts 4.
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* q = b + 32;
  const float d = f16_at(b + 108);
  uint32_t aux[4];
  std::memcpy(aux, b + 96, 12);
  const uint32_t tmp = aux[2], low4 = 0x0f0f0f0f, low2 = 0x03030303;
  aux[2] = ((aux[0] >> 4) & low4) | (((tmp >> 4) & low2) << 4);
  aux[3] = ((aux[1] >> 4) & low4) | (((tmp >> 6) & low2) << 4);
  aux[0] = (aux[0] & low4) | ((tmp & low2) << 4);
  aux[1] = (aux[1] & low4) | (((tmp >> 2) & low2) << 4);
  int8_t scales[16];
  std::memcpy(scales, aux, 16);
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < QK_K; n += 128, q += 32)
    for (int shift = 0; shift < 8; shift += 2, m = uint8_t(m << 1))
      for (int half = 0; half < 2; ++half) {
        const float dl = d * float(scales[is++] - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l)
          *y++ = dl * float(int((q[l] >> shift) & 3) - ((hmask[l] & m) ? 0 : 4));
      }
}

// Q4_K's and Q5_K's 12 bytes of eight 6-bit scales and eight 6-bit mins (get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_K {d; dmin; scales[12]; qs[128]} and Q5_K {d; dmin; scales[12]; qh[32]; qs[128]}: 8 groups
// of 32, value x giving d * scale * x - dmin * min; a 64-element step takes 32 bytes' low
// nibbles then their high nibbles (Q5_K: plus 16 from the step's two bits of qh).
void q45_k(const uint8_t* b, bool five_bit, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + (five_bit ? 48 : 16);
  for (int j = 0, is = 0; j < QK_K; j += 64, q += 32, is += 2)
    for (int half = 0; half < 2; ++half) {
      uint8_t sc, mn;
      scale_min_k4(is + half, scales, sc, mn);
      const float dl = d * float(sc), ml = dmin * float(mn);
      const uint8_t high_bit = uint8_t(1u << (is + half));
      for (int l = 0; l < 32; ++l) {
        int x = half ? q[l] >> 4 : q[l] & 0xF;
        if (five_bit && (qh[l] & high_bit)) x += 16;
        *y++ = dl * float(x) - ml;
      }
    }
}

// Q6_K {ql[128]; qh[64]; scales[16] (int8); d}: 16 groups of 16, 6-bit values offset by 32.
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * float(sc[is]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
}

void iq4_nl(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(kIq4Levels[b[2 + j] & 0xF]);
    y[j + 16] = d * float(kIq4Levels[b[2 + j] >> 4]);
  }
}

// IQ4_XS {d; scales_h (uint16); scales_l[4]; qs[128]}: 8 groups of 32 with 6-bit scales offset 32.
void iq4_xs(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
    const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4);
    const float dl = d * float(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * float(kIq4Levels[qs[j] & 0xF]);
      y[j + 16] = dl * float(kIq4Levels[qs[j] >> 4]);
    }
  }
}

const char* const kTypeNames[] = {
    "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",     "Q8_0",     "Q8_1",     "Q2_K",
    "Q3_K",    "Q4_K",   "Q5_K",    "Q6_K",  "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
    "IQ2_S",   "IQ4_XS", "I8",      "I16",   "I32",    "I64",   "F64",   "IQ1_M",    "BF16",     "Q4_0_4_4", "Q4_0_4_8",
    "Q4_0_8_8", "TQ1_0", "TQ2_0",   "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t type) {
  static const GgmlTypeTraits f32{"F32", 1, 4}, f16{"F16", 1, 2}, bf16{"BF16", 1, 2}, q4_0{"Q4_0", QK, 18},
      q4_1{"Q4_1", QK, 20}, q5_0{"Q5_0", QK, 22}, q5_1{"Q5_1", QK, 24}, q8_0{"Q8_0", QK, 34},
      q2_k{"Q2_K", QK_K, 84}, q3_k{"Q3_K", QK_K, 110}, q4_k{"Q4_K", QK_K, 144}, q5_k{"Q5_K", QK_K, 176},
      q6_k{"Q6_K", QK_K, 210}, iq4_nl{"IQ4_NL", QK, 18}, iq4_xs{"IQ4_XS", QK_K, 136};
  switch (GgmlType(type)) {
    case GgmlType::F32: return &f32;
    case GgmlType::F16: return &f16;
    case GgmlType::BF16: return &bf16;
    case GgmlType::Q4_0: return &q4_0;
    case GgmlType::Q4_1: return &q4_1;
    case GgmlType::Q5_0: return &q5_0;
    case GgmlType::Q5_1: return &q5_1;
    case GgmlType::Q8_0: return &q8_0;
    case GgmlType::Q2_K: return &q2_k;
    case GgmlType::Q3_K: return &q3_k;
    case GgmlType::Q4_K: return &q4_k;
    case GgmlType::Q5_K: return &q5_k;
    case GgmlType::Q6_K: return &q6_k;
    case GgmlType::IQ4_NL: return &iq4_nl;
    case GgmlType::IQ4_XS: return &iq4_xs;
  }
  return nullptr;
}

std::string ggml_type_name(uint32_t type) {
  if (type < std::size(kTypeNames)) return kTypeNames[type];
  return "type " + std::to_string(type);
}

size_t ggml_row_bytes(GgmlType type, int64_t elements) {
  const GgmlTypeTraits* traits = ggml_type_traits(uint32_t(type));
  return size_t(elements / traits->block_size) * traits->block_bytes;
}

bool is_ggml_quantized(GgmlType type) {
  return type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16;
}

void dequantize_ggml(GgmlType type, const uint8_t* blocks, int64_t elements, float* out) {
  const GgmlTypeTraits* traits = ggml_type_traits(uint32_t(type));
  MLA_CHECK(traits && elements % traits->block_size == 0, "dequantize_ggml: {} elements of {}", elements,
            ggml_type_name(uint32_t(type)));
  for (int64_t i = 0; i < elements; ++i) {
    if (type == GgmlType::F32) std::memcpy(out + i, blocks + 4 * i, 4);
    if (type == GgmlType::F16) out[i] = f16_at(blocks + 2 * i);
    if (type == GgmlType::BF16) out[i] = bf16_to_f32(uint16_t(blocks[2 * i] | blocks[2 * i + 1] << 8));
    if (!is_ggml_quantized(type)) continue;
    if (i % traits->block_size) continue;
    const uint8_t* b = blocks + size_t(i / traits->block_size) * traits->block_bytes;
    float* y = out + i;
    switch (type) {
      case GgmlType::Q4_0: q4_0(b, y); break;
      case GgmlType::Q4_1: q4_1(b, y); break;
      case GgmlType::Q5_0: q5(b, false, y); break;
      case GgmlType::Q5_1: q5(b, true, y); break;
      case GgmlType::Q8_0: q8_0(b, y); break;
      case GgmlType::Q2_K: q2_k(b, y); break;
      case GgmlType::Q3_K: q3_k(b, y); break;
      case GgmlType::Q4_K: q45_k(b, false, y); break;
      case GgmlType::Q5_K: q45_k(b, true, y); break;
      case GgmlType::Q6_K: q6_k(b, y); break;
      case GgmlType::IQ4_NL: iq4_nl(b, y); break;
      case GgmlType::IQ4_XS: iq4_xs(b, y); break;
      default: break;
    }
  }
}

}  // namespace mlaserve
