// The generated code's own exp (CodegenOptions::fast_exp): mls::fast_expf's algorithm
// (mls/common/fastmath.hpp) in GCC vector extensions, so that a vectorized loop computing exp stays
// vectorized without -ffast-math (expf is a libm call per lane).
#include "codegen_internal.hpp"

namespace mls::kernels::te::codegen_detail {

const Dialect& cpp_fast_exp_dialect() {
  static const Dialect d = [] {
    Dialect x = cpp_dialect();
    x.exp = "mls_expf";
    return x;
  }();
  return d;
}

const char* fast_exp_prelude() {
  return R"(// ---- exp as a polynomial (CodegenOptions::fast_exp) -----------------------------------------
// mls::fast_expf's algorithm: x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (Cody-Waite:
// ln2 in two parts, the first exact in n * hi), Cephes' polynomial for exp(r), then the result
// scaled by 2^n. Within 2 ulp of expf over the normal range; +inf above log(FLT_MAX), 0 (AVX-512:
// a denormal, then 0) below log(FLT_MIN), NaN kept. Plain float arithmetic on vectors, so it stays in SIMD registers; with
// AVX-512 the 16-lane version scales with vscalefps (overflow and underflow for free).
#if defined(__AVX512F__)
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's _mm512_undefined_ps() reads itself on purpose ("__m512 __Y = __Y"): not our variable.
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#endif
typedef std::int32_t mls_i32x4 __attribute__((vector_size(16)));
typedef std::int32_t mls_i32x8 __attribute__((vector_size(32)));
typedef std::int32_t mls_i32x16 __attribute__((vector_size(64)));
template <class V>
struct mls_int_vec;
template <>
struct mls_int_vec<mls_f32x4> { typedef mls_i32x4 type; };
template <>
struct mls_int_vec<mls_f32x8> { typedef mls_i32x8 type; };
template <>
struct mls_int_vec<mls_f32x16> { typedef mls_i32x16 type; };
// exp(r) for |r| <= ln2 / 2 (Cephes' coefficients; r and 1 added last, exactly).
template <class V>
static inline V mls_exp_reduced(V r) {
    V p = mls_splat<V>(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * (r * r) + r + 1.0f;
}
template <class V>
[[maybe_unused]] static inline V mls_vexp_fast(V x) {
    typedef typename mls_int_vec<V>::type I;
    const V hi = mls_splat<V>(88.7228394f), lo = mls_splat<V>(-87.3365479f);
    // n = round(x / ln2) by the 1.5 * 2^23 trick: the sum's low mantissa bits hold n.
    const V s = x * 1.44269504088896341f + 12582912.0f;
    const V n = s - 12582912.0f;
    V r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    V out = (V)((I)mls_exp_reduced(r) + ((I)s << 23));
    out = x > hi ? mls_splat<V>(__builtin_inff()) : out;  // out of range (the lanes there are garbage)
    out = x < lo ? mls_splat<V>(0.0f) : out;
    return x != x ? x : out;
}
#if defined(__AVX512F__)
template <>
[[maybe_unused]] inline mls_f32x16 mls_vexp_fast(mls_f32x16 x) {
    // x clamped to [-104, 89] (vmaxps/vminps return their second operand for a NaN: x's lane), then
    // vscalefps: 2^n past the float range gives a denormal, 0 or +inf by itself.
    const __m512 xc = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), (__m512)x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    return (mls_f32x16)_mm512_scalef_ps((__m512)mls_exp_reduced((mls_f32x16)r), n);
}
#endif
// The same on one float (scalar code, a vectorized loop's tail).
[[maybe_unused]] static inline float mls_expf(float x) { return mls_vexp_fast(mls_splat<mls_f32x4>(x))[0]; }

)";
}

}  // namespace mls::kernels::te::codegen_detail
