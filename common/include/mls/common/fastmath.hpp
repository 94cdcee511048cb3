#pragma once
/// Branch-free float32 math that compilers vectorize (no calls into libm inside the loop).
#include <bit>
#include <cmath>
#include <cstdint>

namespace mls {

/// exp(x) for float32, within 1 ulp of std::exp over the normal range (Cephes' polynomial after
/// reducing x = n ln2 + r, |r| <= ln2 / 2). Overflow gives +inf, results below FLT_MIN flush to
/// 0, NaN stays NaN. Safe under -fassociative-math: the reduction uses fma, the rounding floor.
inline float fast_expf(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kMax = 88.7228394f;     // log(FLT_MAX)
  constexpr float kMin = -87.3365479f;    // log(FLT_MIN): smaller results flush to 0
  float xc = x < kMax ? x : kMax;
  xc = xc > kMin ? xc : kMin;
  const float n = std::floor(xc * kLog2e + 0.5f);  // round(x / ln2), in [-126, 128]
  // Cody-Waite: r = x - n ln2 in two exact-ish steps (fma keeps them from being merged).
  float r = std::fma(n, -kLn2Hi, xc);
  r = std::fma(n, -kLn2Lo, r);
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  // y * 2^n by adding n to y's exponent field: exact, and no 2^n is formed (2^128 would
  // overflow, and an optimizer that reassociates products could form it).
  const std::int32_t ni = static_cast<std::int32_t>(n);
  float out = std::bit_cast<float>(std::bit_cast<std::int32_t>(y) + ni * (1 << 23));
  out = x > kMax ? std::bit_cast<float>(0x7f800000) : out;  // +inf
  out = x < kMin ? 0.0f : out;
  return x != x ? x : out;
}

}  // namespace mls
