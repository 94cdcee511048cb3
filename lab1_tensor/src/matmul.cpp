// Student file of lab 1: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Matrix multiplication: NumPy semantics on strided, batched, broadcast operands. float32 goes
// through the SGEMM kernel registry (mls/common/kernels.hpp), the seam where lab 4's faster
// kernels plug in. Student file: the bodies between the SOLUTION markers.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "mls/tensor/tensor.hpp"

#ifdef MLS_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace mls::inline tensor {
namespace {

/// The reference SGEMM: C = alpha * op(A) * op(B) + beta * C, row-major with leading
/// dimensions (see SgemmFn). Loop order i-k-j so the innermost loop walks B and C rows in order.
void sgemm_reference(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float* A, long lda,
                 const float* B, long ldb, float beta, float* C, long ldc) {
  // BEGIN SOLUTION
  parallel_for(0, M, std::max<long>(1, 4096 / std::max<long>(1, N * K / 64 + 1)), [&](std::int64_t i0, std::int64_t i1) {
    for (long i = static_cast<long>(i0); i < static_cast<long>(i1); ++i) {
      float* c = C + i * ldc;
      if (beta == 0.0f) {
        std::fill(c, c + N, 0.0f);
      } else if (beta != 1.0f) {
        for (long j = 0; j < N; ++j) c[j] *= beta;
      }
      for (long k = 0; k < K; ++k) {
        const float a = alpha * (trans_a ? A[k * lda + i] : A[i * lda + k]);
        if (!trans_b) {
          const float* b = B + k * ldb;
          for (long j = 0; j < N; ++j) c[j] += a * b[j];
        } else {
          for (long j = 0; j < N; ++j) c[j] += a * B[j * ldb + k];
        }
      }
    }
  });
  // END SOLUTION
}

#ifdef MLS_HAVE_OPENBLAS
/// Whether this OpenBLAS gives the same bits whatever its thread count. It splits M and N, never
/// K, and usually does (lab 3's parallel executor relies on it), but not always: Debian's 0.3.21
/// with its Haswell kernels (OPENBLAS_CORETYPE=Haswell) on an AMD Zen 5 computes the columns past
/// a thread's split point with another edge kernel, so 1 and 2 threads differ in the last bits.
/// Probed once, on a product whose N the threads split (257 x 131 x 263, as lab 3's test).
bool openblas_thread_count_invariant(int max_threads) {
  constexpr int M = 257, K = 131, N = 263;
  std::vector<float> a(static_cast<std::size_t>(M) * K), b(static_cast<std::size_t>(K) * N);
  std::uint32_t x = 12345;  // a small LCG: any varied values will do
  auto next = [&x] { x = x * 1664525u + 1013904223u; return static_cast<float>(x >> 8) / 16777216.0f - 0.5f; };
  for (auto& v : a) v = next();
  for (auto& v : b) v = next();
  auto run = [&](int threads) {
    std::vector<float> c(static_cast<std::size_t>(M) * N);
    openblas_set_num_threads(threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f,
                c.data(), N);
    return c;
  };
  const std::vector<float> one = run(1);
  for (int t = 2; t <= std::min(max_threads, 8); ++t) {
    if (run(t) != one) return false;
  }
  return true;
}

void sgemm_openblas(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float* A, long lda,
                    const float* B, long ldb, float beta, float* C, long ldc) {
  // OpenBLAS's own threads follow the caller's intra-op budget (all of num_threads() outside
  // mls::run_dag; a task's share inside it), so two tasks multiplying at once do not both start
  // num_threads() threads. Where its results depend on the thread count (probed once, above), it
  // runs on num_threads() threads whatever the budget instead: results stay independent of the
  // budget (what lab 3's parallel executor promises), at the price of more threads than cores
  // while two tasks multiply at once.
  static std::mutex set_mutex;
  static int threads = -1;
  static int invariant = -1;  // -1: not probed yet
  {
    std::lock_guard<std::mutex> lock(set_mutex);
    if (invariant < 0) {
      invariant = openblas_thread_count_invariant(num_threads()) ? 1 : 0;
      threads = -1;  // the probe changed OpenBLAS's count
    }
    const int want = invariant ? intra_op_threads() : num_threads();
    if (threads != want) {
      threads = want;
      openblas_set_num_threads(threads);
    }
  }
  if (M == 0 || N == 0) return;
  if (K == 0) {  // BLAS leaves C * beta; make beta == 0 never read C.
    for (long i = 0; i < M; ++i) {
      for (long j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}
#endif

}  // namespace

void register_matmul_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_sgemm({"lab1_reference", &sgemm_reference, 0, "lab 1 reference: i-k-j loops over threads"});
#ifdef MLS_HAVE_OPENBLAS
    register_sgemm({"openblas", &sgemm_openblas, 10, "OpenBLAS cblas_sgemm"});
#endif
  });
}

namespace {

/// How a 2-D matrix with (rows, cols, row stride, col stride) can be passed to a GEMM: as is
/// (trans = false, ld = row stride), transposed (trans = true, ld = col stride), or not at all.
struct GemmLayout {
  bool ok = false;
  bool trans = false;
  long ld = 0;
};

[[maybe_unused]] GemmLayout gemm_layout(std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs) {
  if (cs == 1 || cols == 1) {
    const std::int64_t ld = rows == 1 ? std::max<std::int64_t>(cols, 1) : rs;
    if (ld >= std::max<std::int64_t>(cols, 1)) return {true, false, static_cast<long>(ld)};
  }
  if (rs == 1 || rows == 1) {
    const std::int64_t ld = cols == 1 ? std::max<std::int64_t>(rows, 1) : cs;
    if (ld >= std::max<std::int64_t>(rows, 1)) return {true, true, static_cast<long>(ld)};
  }
  return {};
}

/// C[M, N] (dense) = A[M, K] * B[K, N] for any strides, in the element type T.
template <class T>
[[maybe_unused]] void gemm_generic(std::int64_t M, std::int64_t N, std::int64_t K, const T* A, std::int64_t ars,
                                   std::int64_t acs, const T* B, std::int64_t brs, std::int64_t bcs, T* C) {
  for (std::int64_t i = 0; i < M; ++i) {
    T* c = C + i * N;
    std::fill(c, c + N, T(0));
    for (std::int64_t k = 0; k < K; ++k) {
      const T a = A[i * ars + k * acs];
      for (std::int64_t j = 0; j < N; ++j) c[j] = static_cast<T>(c[j] + a * B[k * brs + j * bcs]);
    }
  }
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  MLS_CHECK(a_in.defined() && b_in.defined(), "matmul: tensor is undefined (default-constructed)");
  MLS_CHECK(a_in.ndim() >= 1 && b_in.ndim() >= 1, "matmul: operands must have at least 1 dimension, got shapes ",
            shape_str(a_in.shape()), " and ", shape_str(b_in.shape()));
  const DType t = promote(a_in.dtype(), b_in.dtype());
  MLS_CHECK(t != DType::Bool, "matmul: not defined for bool tensors");
  const std::int64_t K = a_in.shape().back();
  const std::int64_t Kb = b_in.ndim() == 1 ? b_in.shape()[0] : b_in.shape()[b_in.shape().size() - 2];
  MLS_CHECK(K == Kb, "matmul: shapes ", shape_str(a_in.shape()), " and ", shape_str(b_in.shape()),
            " are not aligned: ", K, " (last dim of a) != ", Kb, " (", b_in.ndim() == 1 ? "dim 0" : "second to last dim",
            " of b)");
  register_matmul_kernels();
  // BEGIN SOLUTION
  // 1-D operands become a row (left) or a column (right) and that dim is dropped at the end.
  Tensor a = a_in.ndim() == 1 ? a_in.unsqueeze(0) : a_in;
  Tensor b = b_in.ndim() == 1 ? b_in.unsqueeze(1) : b_in;
  a = a.to(t);
  b = b.to(t);
  const std::int64_t M = a.shape()[a.shape().size() - 2], N = b.shape().back();
  const Shape a_batch(a.shape().begin(), a.shape().end() - 2), b_batch(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(a_batch, b_batch, "matmul");
  const std::int64_t nbatch = checked_numel(batch, "matmul");

  // Matrices a GEMM cannot read directly (neither dim has stride 1) are compacted first.
  auto layout_of = [](const Tensor& x) {
    const auto nd = x.shape().size();
    return gemm_layout(x.shape()[nd - 2], x.shape()[nd - 1], x.strides()[nd - 2], x.strides()[nd - 1]);
  };
  if (t == DType::Float32 && !layout_of(a).ok) a = a.compact();
  if (t == DType::Float32 && !layout_of(b).ok) b = b.compact();

  Shape ea = batch, eb = batch, out_shape = batch;
  ea.insert(ea.end(), {M, K});
  eb.insert(eb.end(), {K, N});
  out_shape.insert(out_shape.end(), {M, N});
  const Tensor A = a.expand(ea), B = b.expand(eb);
  Tensor out = Tensor::empty(out_shape, t);
  const std::size_t nd = out_shape.size();
  std::vector<std::int64_t> idx(batch.size());

  for (std::int64_t bi = 0; bi < nbatch; ++bi) {
    unravel_index(bi, batch, idx);
    std::int64_t aoff = 0, boff = 0;
    for (std::size_t d = 0; d < batch.size(); ++d) {
      aoff += idx[d] * A.strides()[d];
      boff += idx[d] * B.strides()[d];
    }
    dispatch(t, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, bool>) {
        const T* pa = A.data<T>() + aoff;
        const T* pb = B.data<T>() + boff;
        T* pc = out.data<T>() + bi * M * N;
        if constexpr (std::is_same_v<T, float>) {
          const GemmLayout la = layout_of(A), lb = layout_of(B);
          sgemm_kernel().fn(la.trans, lb.trans, static_cast<long>(M), static_cast<long>(N), static_cast<long>(K), 1.0f,
                            pa, la.ld, pb, lb.ld, 0.0f, pc, static_cast<long>(N));
        } else {
          gemm_generic<T>(M, N, K, pa, A.strides()[nd - 2], A.strides()[nd - 1], pb, B.strides()[nd - 2],
                          B.strides()[nd - 1], pc);
        }
      }
    });
  }
  if (a_in.ndim() == 1) out = out.squeeze(-2);
  if (b_in.ndim() == 1) out = out.squeeze(-1);
  return out;
  // END SOLUTION
}

}  // namespace mls::tensor
