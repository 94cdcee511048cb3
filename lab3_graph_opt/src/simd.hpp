// Lab 3's SIMD helpers shared by its fused elementwise evaluator (fused.cpp) and its conv2d_bias
// kernel (conv_bias.cpp): 64-byte vectors and the pick of a loop's AVX-512, AVX2 or baseline build.
#pragma once

#include <cstdint>

/// MLS_SIMD_DISPATCH: this compiler builds a loop's AVX-512 and AVX2 variants (GCC on x86-64, not
/// under AddressSanitizer), so the files including this header compile them and `pick_isa`
/// chooses among them; elsewhere they use their baseline build only. Defined here, once, for
/// every file that dispatches (a file that tested a macro of another file's never saw it, and
/// ran its baseline build everywhere).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MLS_SIMD_DISPATCH 1
#endif

namespace mls::graph_opt::simd {

/// 64-byte vectors (GCC/Clang vector extension): one AVX-512 register, two AVX2 ones.
template <class T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(64)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(64)));
};
template <class T>
using Vec = typename VecOf<T>::type;

/// The AVX-512 build of a loop where the CPU has AVX-512, else the AVX2 (+FMA) one, else the baseline.
template <class Fn>
Fn pick_isa(Fn avx512, Fn avx2, Fn baseline) {
  static const bool has512 = __builtin_cpu_supports("avx512f");
  static const bool has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has512 ? avx512 : has2 ? avx2 : baseline;
}

/// `Isa<kernel>::run(args...)`: the kernel (a function returning void) built for AVX-512 and for
/// AVX2 + FMA (it is inlined into a wrapper compiled for each, `flatten`), the best one for this
/// CPU picked once; the baseline build where MLS_SIMD_DISPATCH is not defined.
template <auto K>
struct Isa;
template <class... A, void (*K)(A...)>
struct Isa<K> {
#ifdef MLS_SIMD_DISPATCH
  __attribute__((target("avx512f"), flatten)) static void avx512(A... a) { K(a...); }
  __attribute__((target("avx2,fma"), flatten)) static void avx2(A... a) { K(a...); }
#endif
  static void run(A... a) {
#ifdef MLS_SIMD_DISPATCH
    static const auto fn = pick_isa<void (*)(A...)>(avx512, avx2, K);
    fn(a...);
#else
    K(a...);
#endif
  }
};

/// The name of what `pick_isa(avx512, avx2, baseline)` returned as `fn`: "avx512", "avx2" or "baseline".
template <class Fn>
const char* isa_name(Fn fn, Fn avx512, Fn avx2) {
  return fn == avx512 ? "avx512" : fn == avx2 ? "avx2" : "baseline";
}

}  // namespace mls::graph_opt::simd
