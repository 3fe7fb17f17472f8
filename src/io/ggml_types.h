// ggml's tensor types as GGUF files store them: each type's block (elements and bytes) and its
// dequantization to fp32, written from the block layouts of ggml-common.h / ggml-quants.c
// (llama.cpp): the values are the ones ggml's own dequantize_row_* computes, each product and
// difference rounded to fp32 in the order ggml writes it (no fused multiply-add).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mlaserve {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
  Q6_0 = 133,  // ik_llama.cpp's: its fallback where columns are not whole 256-blocks
};

struct GgmlTypeTraits {
  const char* name;    // as ggml names it ("q4_K" is spelled Q4_K here)
  int64_t block_size;  // elements a block holds
  size_t block_bytes;  // bytes a block takes
};

// The traits of a type mlaserve reads, or null for an id it does not (ggml has types such as
// IQ2_XXS that are refused by name: ggml_type_name gives it).
const GgmlTypeTraits* ggml_type_traits(uint32_t type);
std::string ggml_type_name(uint32_t type);  // "Q4_K", "IQ2_XXS", or "id 99" when unknown
// Bytes of `elements` elements of a read type (a whole number of blocks).
size_t ggml_row_bytes(GgmlType type, int64_t elements);
bool is_ggml_quantized(GgmlType type);  // not F32, F16 or BF16

// out[0 .. elements) = the values of `elements` elements (whole blocks) stored from `blocks`.
void dequantize_ggml(GgmlType type, const uint8_t* blocks, int64_t elements, float* out);

// The symmetric types, whose every value is an int8 code times an fp32 scale per group, the
// scale being the product ggml forms first: Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS (groups of 32), Q3_K
// and Q6_K (16). Their group, or 0 for the others (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K add an offset).
int64_t ggml_int8_group(GgmlType type);
// codes[i] and scales[i / group] of `elements` elements: float(codes[i]) * scales[i / group] is
// exactly dequantize_ggml's value.
void ggml_to_int8(GgmlType type, const uint8_t* blocks, int64_t elements, int8_t* codes, float* scales);

}  // namespace mlaserve
