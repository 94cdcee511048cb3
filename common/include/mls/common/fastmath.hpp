#pragma once
/// Branch-free float32 math that compilers vectorize (no calls into libm inside the loop).
#include <bit>
#include <cstdint>

namespace mls {

/// exp(x) for float32, within 2 ulp of std::exp over the whole range (Cephes' polynomial after
/// reducing x = n ln2 + r, |r| <= ln2 / 2). Overflow gives +inf, underflow 0, NaN stays NaN.
inline float fast_expf(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kMax = 88.7228394f;     // log(FLT_MAX)
  constexpr float kMin = -87.3365479f;    // log(FLT_MIN): smaller results flush to 0
  float xc = x < kMax ? x : kMax;
  xc = xc > kMin ? xc : kMin;
  const float n = (xc * kLog2e + kRound) - kRound;  // round(x / ln2), in [-126, 128]
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  // 2^n with n = 128 would overflow the exponent field: build 2^(n-1) and double it.
  const std::int32_t ni = static_cast<std::int32_t>(n);
  const std::int32_t hi = ni > 127 ? 1 : 0;
  const float scale = std::bit_cast<float>((ni - hi + 127) << 23);
  float out = y * scale * static_cast<float>(1 + hi);
  out = x > kMax ? std::bit_cast<float>(0x7f800000) : out;  // +inf
  out = x < kMin ? 0.0f : out;
  return x != x ? x : out;
}

}  // namespace mls
