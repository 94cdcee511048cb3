#pragma once
/// The GEMMs of one transformer layer, as lab 6 trains it: the list mls_lab4_bench_sgemm's sgemm_tf
/// benchmarks and `mls-tune sgemm --transformer` both use (one list, so their figures name the same
/// problems). Lab 6's `small` GPT: 768 tokens (12 sequences of 64), C = 128. A linear layer
/// y = x·Wᵀ + b with x (M, K) and W (N, K) runs three GEMMs: the forward (no transpose, B
/// transposed), the input gradient dx = dy·W (none transposed) and the weight gradient dW = dyᵀ·x
/// (A transposed), each adding to C (beta 1: the bias is in C before the forward, gradients
/// accumulate). Compact leading dimensions.
#include <string>
#include <vector>

namespace mls::kernels {

/// One GEMM of the layer: C (m x n) += op(A) (m x k) op(B) (k x n).
struct TransformerGemm {
  std::string op;  ///< "fwd", "dx" or "dW"
  std::string layer;  ///< "qkv", "proj", "fc" or "fcproj"
  bool trans_a = false, trans_b = false;
  long m = 0, n = 0, k = 0;
  /// "fwd:768x384x128" (the benchmarks' and the ratio lines' name, with "/t:<threads>" or "_t<threads>" after it).
  std::string key() const { return op + ":" + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k); }
};

/// The 12 GEMMs: for the layers qkv (W 384 x 128), proj (128 x 128), fc (512 x 128) and fcproj
/// (128 x 512), in that order, the forward, the input gradient and the weight gradient.
inline std::vector<TransformerGemm> transformer_gemms() {
  const long tokens = 768;  // 12 x 64
  struct Layer {
    const char* name;
    long n, k;  // W is n x k
  };
  const Layer layers[] = {{"qkv", 384, 128}, {"proj", 128, 128}, {"fc", 512, 128}, {"fcproj", 128, 512}};
  std::vector<TransformerGemm> out;
  for (const auto& l : layers) {
    out.push_back({"fwd", l.name, false, true, tokens, l.n, l.k});  // y = x·Wᵀ
    out.push_back({"dx", l.name, false, false, tokens, l.k, l.n});  // dx = dy·W
    out.push_back({"dW", l.name, true, false, l.n, l.k, tokens});   // dW = dyᵀ·x
  }
  return out;
}

}  // namespace mls::kernels
