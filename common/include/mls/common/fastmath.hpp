#pragma once
/// Branch-free float32 math that compilers vectorize (no calls into libm inside the loop), and
/// the constants of the functions it serves. CUDA sources (compiled as C++17) include it for the
/// constants only: the functions use C++20's std::bit_cast and are host code.
#include <cmath>
#include <cstdint>
#if !defined(__CUDACC__)
#include <bit>
#endif

namespace mls {

/// GELU's tanh approximation 0.5 x (1 + tanh(kGeluK (x + kGeluC x^3))): kGeluK = sqrt(2 / pi),
/// kGeluC = 0.044715. The one spelling of these constants for the CPU and CUDA kernels.
inline constexpr double kGeluK = 0.7978845608028654;
inline constexpr double kGeluC = 0.044715;

/// 2^f for |f| <= 1/2 as a degree-5 polynomial (a minimax fit, relative error below 2e-7), its
/// coefficients from the highest degree down, for Horner's form: p = kExp2Poly[0], then
/// p = p f + kExp2Poly[k] for k = 1..5. exp(x) is 2^(x log2e) = 2^n 2^f with n = round(x log2e):
/// 5 multiply-adds, a rounding and a scaling, the cheapest exp of this project. The one spelling of
/// these coefficients: lab 4's hand-written exp2_16 (fused_cpu.cpp) and the generated code's
/// exp (CodegenOptions::fast_exp2, codegen_fastmath.cpp) both evaluate them.
inline constexpr float kExp2Poly[6] = {1.3264727e-3f, 9.6715130e-3f, 5.5507336e-2f,
                                       2.4022242e-1f, 6.9314700e-1f, 1.0f};

#if !defined(__CUDACC__)

/// fast_expf's argument range: exp(kExpMaxF) is FLT_MAX, exp(kExpMinF) is FLT_MIN.
inline constexpr float kExpMaxF = 88.7228394f;   // log(FLT_MAX)
inline constexpr float kExpMinF = -87.3365479f;  // log(FLT_MIN): smaller results flush to 0

/// The core of fast_expf for an x already in [kExpMinF, kExpMaxF] (not checked): no clamping
/// and no inf/NaN selects, about 14 vector instructions per 16 floats, for loops that bound
/// their arguments themselves (softmax's x - max <= 0, GELU's clamped -2u). Same result as
/// fast_expf there, bit for bit.
inline float fast_expf_core(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float n = std::floor(x * kLog2e + 0.5f);  // round(x / ln2), in [-126, 128]
  // Cody-Waite: r = x - n ln2 in two exact-ish steps (fma keeps them from being merged).
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  // y * 2^n by adding n to y's exponent field: exact, and no 2^n is formed (2^128 would
  // overflow, and an optimizer that reassociates products could form it). A shift, not a
  // multiply: the vector code has no cheap 32-bit multiply.
  const std::uint32_t ni = static_cast<std::uint32_t>(static_cast<std::int32_t>(n));
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(y) + (ni << 23));
}

/// exp(x) for float32, within 1 ulp of std::exp over the normal range (Cephes' polynomial after
/// reducing x = n ln2 + r, |r| <= ln2 / 2). Overflow gives +inf, results below FLT_MIN flush to
/// 0, NaN stays NaN. Safe under -fassociative-math: the reduction uses fma, the rounding floor.
inline float fast_expf(float x) {
  float xc = x < kExpMaxF ? x : kExpMaxF;
  xc = xc > kExpMinF ? xc : kExpMinF;
  float out = fast_expf_core(xc);
  out = x > kExpMaxF ? std::bit_cast<float>(0x7f800000) : out;  // +inf
  out = x < kExpMinF ? 0.0f : out;
  return x != x ? x : out;
}

/// tanh(x) for float32 without libm calls, so that loops over it vectorize: Cephes' tanhf, an
/// odd polynomial x + x z P(z), z = x^2, for |x| < 0.625, else 1 - 2 / (exp(2|x|) + 1) with
/// x's sign (fast_expf), both computed and one selected (no branch). Within 2 ulp of std::tanh;
/// +-inf give +-1, NaN stays NaN, -0 stays -0.
inline float fast_tanhf(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = std::fma(p * z, x, x);
  const float e = fast_expf(2.0f * ax);  // +inf for large |x|: 2 / inf = 0
  const float big = std::copysign(1.0f - 2.0f / (e + 1.0f), x);
  return ax < 0.625f ? small : big;
}

#endif  // !__CUDACC__

}  // namespace mls
