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

// Each symmetric type's block as int8 codes and fp32 scales, one a group of 32 or 16
// elements: ggml's value is float(code) * scale, the scale the product ggml forms first.

// Q4_0 {d; qs[16]}: element j in qs[j]'s low nibble, j + 16 in its high one, offset 8.
void q4_0(const uint8_t* b, int8_t* q, float* scale) {
  scale[0] = f16_at(b);
  for (int j = 0; j < 16; ++j) {
    q[j] = int8_t((b[2 + j] & 0xF) - 8);
    q[j + 16] = int8_t((b[2 + j] >> 4) - 8);
  }
}

// Q5_0 {d; qh (32 fifth bits, little-endian); qs[16]}, offset 16.
void q5_0(const uint8_t* b, int8_t* q, float* scale) {
  scale[0] = f16_at(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    q[j] = int8_t(((qs[j] & 0xF) | int(((qh >> j) << 4) & 0x10)) - 16);
    q[j + 16] = int8_t(((qs[j] >> 4) | int((qh >> (j + 12)) & 0x10)) - 16);
  }
}

// Q6_0 {d; qh[8]; qs[16]} (ik_llama.cpp): offset 32; element j < 16 the low nibble of qs[j] and
// bits 0-1 of h = qh[j % 8] >> 4 * (j / 8) above it, element j + 16 the high nibble and bits 2-3.
void q6_0(const uint8_t* b, int8_t* q, float* scale) {
  scale[0] = f16_at(b);
  const uint8_t* qh = b + 2;
  const uint8_t* qs = b + 10;
  for (int j = 0; j < 16; ++j) {
    const int h = qh[j % 8] >> 4 * (j / 8);
    q[j] = int8_t(((qs[j] & 0xF) | ((h << 4) & 0x30)) - 32);
    q[j + 16] = int8_t(((qs[j] >> 4) | ((h << 2) & 0x30)) - 32);
  }
}

void q8_0(const uint8_t* b, int8_t* q, float* scale) {
  scale[0] = f16_at(b);
  std::memcpy(q, b + 2, QK);
}

void iq4_nl(const uint8_t* b, int8_t* q, float* scale) {
  scale[0] = f16_at(b);
  for (int j = 0; j < 16; ++j) {
    q[j] = kIq4Levels[b[2 + j] & 0xF];
    q[j + 16] = kIq4Levels[b[2 + j] >> 4];
  }
}

// IQ4_XS {d; scales_h (uint16); scales_l[4]; qs[128]}: 8 groups of 32, 6-bit scales offset 32.
void iq4_xs(const uint8_t* b, int8_t* q, float* scale) {
  const float d = f16_at(b);
  uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, q += 32, qs += 16) {
    const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4);
    scale[ib] = d * float(ls - 32);
    for (int j = 0; j < 16; ++j) {
      q[j] = kIq4Levels[qs[j] & 0xF];
      q[j + 16] = kIq4Levels[qs[j] >> 4];
    }
  }
}

// Q3_K {hmask[32]; qs[64]; scales[12] (16 six-bit scales, offset 32); d}: 16 groups of 16, a
// 2-bit value and a high bit; a clear high bit subtracts 4. Order: two halves of 128, each four
// shifts of its 32 bytes, each 16 + 16 elements with their own scales.
void q3_k(const uint8_t* b, int8_t* q, float* scale) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
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
  for (int is = 0; is < 16; ++is) scale[is] = d * float(scales[is] - 32);
  uint8_t m = 1;
  for (int n = 0; n < QK_K; n += 128, qs += 32)
    for (int shift = 0; shift < 8; shift += 2, m = uint8_t(m << 1))
      for (int l = 0; l < 32; ++l) *q++ = int8_t(int((qs[l] >> shift) & 3) - ((hmask[l] & m) ? 0 : 4));
}

// Q6_K {ql[128]; qh[64]; scales[16] (int8); d}: 16 groups of 16, 6-bit values offset by 32.
void q6_k(const uint8_t* b, int8_t* q, float* scale) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  for (int is = 0; is < 16; ++is) scale[is] = d * float(sc[is]);
  for (int n = 0; n < QK_K; n += 128, q += 128, ql += 64, qh += 32)
    for (int l = 0; l < 32; ++l) {
      q[l] = int8_t(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      q[l + 32] = int8_t(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      q[l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      q[l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
}

// The asymmetric types (a scale and an offset, or a super-block min) straight to fp32.

// Q4_1 {d; m; qs[16]}: x * d + m.
void q4_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(b[4 + j] & 0xF) * d + m;
    y[j + 16] = float(b[4 + j] >> 4) * d + m;
  }
}

// Q5_1 {d; m; qh; qs[16]}.
void q5_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    y[j] = float((qs[j] & 0xF) | int(((qh >> j) << 4) & 0x10)) * d + m;
    y[j + 16] = float((qs[j] >> 4) | int((qh >> (j + 12)) & 0x10)) * d + m;
  }
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

using Int8Decoder = void (*)(const uint8_t*, int8_t*, float*);

Int8Decoder int8_decoder(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return q4_0;
    case GgmlType::Q5_0: return q5_0;
    case GgmlType::Q6_0: return q6_0;
    case GgmlType::Q8_0: return q8_0;
    case GgmlType::IQ4_NL: return iq4_nl;
    case GgmlType::IQ4_XS: return iq4_xs;
    case GgmlType::Q3_K: return q3_k;
    case GgmlType::Q6_K: return q6_k;
    default: return nullptr;
  }
}

const char* const kTypeNames[] = {
    "F32",    "F16",      "Q4_0",     "Q4_1",     "Q4_2",  "Q4_3",  "Q5_0",       "Q5_1",       "Q8_0",       "Q8_1",
    "Q2_K",   "Q3_K",     "Q4_K",     "Q5_K",     "Q6_K",  "Q8_K",  "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",    "IQ1_S",
    "IQ4_NL", "IQ3_S",    "IQ2_S",    "IQ4_XS",   "I8",    "I16",   "I32",        "I64",        "F64",        "IQ1_M",
    "BF16",   "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t type) {
  static const GgmlTypeTraits f32{"F32", 1, 4}, f16{"F16", 1, 2}, bf16{"BF16", 1, 2}, q4_0{"Q4_0", QK, 18},
      q4_1{"Q4_1", QK, 20}, q5_0{"Q5_0", QK, 22}, q5_1{"Q5_1", QK, 24}, q8_0{"Q8_0", QK, 34}, q2_k{"Q2_K", QK_K, 84},
      q3_k{"Q3_K", QK_K, 110}, q4_k{"Q4_K", QK_K, 144}, q5_k{"Q5_K", QK_K, 176}, q6_k{"Q6_K", QK_K, 210},
      iq4_nl{"IQ4_NL", QK, 18}, iq4_xs{"IQ4_XS", QK_K, 136}, q6_0{"Q6_0", QK, 26};
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
    case GgmlType::Q6_0: return &q6_0;
  }
  return nullptr;
}

std::string ggml_type_name(uint32_t type) {
  if (type < std::size(kTypeNames)) return kTypeNames[type];
  if (type == uint32_t(GgmlType::Q6_0)) return "Q6_0";
  return "id " + std::to_string(type) + (type >= 100 ? " (ik_llama.cpp's own types start at 100)" : "");
}

size_t ggml_row_bytes(GgmlType type, int64_t elements) {
  const GgmlTypeTraits* traits = ggml_type_traits(uint32_t(type));
  return size_t(elements / traits->block_size) * traits->block_bytes;
}

bool is_ggml_quantized(GgmlType type) {
  return type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16;
}

int64_t ggml_int8_group(GgmlType type) {
  if (!int8_decoder(type)) return 0;
  return type == GgmlType::Q3_K || type == GgmlType::Q6_K ? 16 : 32;
}

void ggml_to_int8(GgmlType type, const uint8_t* blocks, int64_t elements, int8_t* codes, float* scales) {
  const GgmlTypeTraits* traits = ggml_type_traits(uint32_t(type));
  const Int8Decoder decode = int8_decoder(type);
  MLA_CHECK(decode && elements % traits->block_size == 0, "ggml_to_int8: {} elements of {}", elements,
            ggml_type_name(uint32_t(type)));
  const int64_t block_scales = traits->block_size / ggml_int8_group(type);
  for (int64_t b = 0; b < elements / traits->block_size; ++b)
    decode(blocks + size_t(b) * traits->block_bytes, codes + b * traits->block_size, scales + b * block_scales);
}

void dequantize_ggml(GgmlType type, const uint8_t* blocks, int64_t elements, float* out) {
  const GgmlTypeTraits* traits = ggml_type_traits(uint32_t(type));
  MLA_CHECK(traits && elements % traits->block_size == 0, "dequantize_ggml: {} elements of {}", elements,
            ggml_type_name(uint32_t(type)));
  if (const int64_t group = ggml_int8_group(type)) {  // float(code) * scale, a block at a time
    int8_t codes[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < elements; i += traits->block_size) {
      ggml_to_int8(type, blocks + size_t(i / traits->block_size) * traits->block_bytes, traits->block_size, codes,
                   scales);
      for (int64_t j = 0; j < traits->block_size; ++j) out[i + j] = float(codes[j]) * scales[j / group];
    }
    return;
  }
  for (int64_t i = 0; i < elements; i += traits->block_size) {
    const uint8_t* b = blocks + size_t(i / traits->block_size) * traits->block_bytes;
    float* y = out + i;
    switch (type) {
      case GgmlType::F32: std::memcpy(y, b, 4); break;
      case GgmlType::F16: *y = f16_at(b); break;
      case GgmlType::BF16: *y = bf16_to_f32(uint16_t(b[0] | b[1] << 8)); break;
      case GgmlType::Q4_1: q4_1(b, y); break;
      case GgmlType::Q5_1: q5_1(b, y); break;
      case GgmlType::Q2_K: q2_k(b, y); break;
      case GgmlType::Q4_K: q45_k(b, false, y); break;
      case GgmlType::Q5_K: q45_k(b, true, y); break;
      default: fail("dequantize_ggml: no decoder for {}", traits->name);
    }
  }
}

}  // namespace mlaserve
