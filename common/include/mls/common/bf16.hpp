#pragma once
/// bfloat16 as its 16-bit pattern on the host: the upper half of a float32 (8 exponent bits, 7
/// mantissa bits). Used by lab 4's tensor-core GEMM (inputs) and lab 6's ZeRO (bf16 parameters and
/// gradients).
#include <cstdint>
#include <cstring>

namespace mls {

/// fp32 -> bf16 with round-to-nearest-even (NaN stays a quiet NaN; infinities stay infinite).
inline std::uint16_t to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

/// bf16 -> fp32 (exact).
inline float from_bf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

/// Rounds x to the nearest bf16 value, as a float.
inline float round_bf16(float x) { return from_bf16(to_bf16(x)); }

}  // namespace mls
