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
void sgemm_openblas(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float* A, long lda,
                    const float* B, long ldb, float beta, float* C, long ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // BLAS leaves C * beta; make beta == 0 never read C.
    for (long i = 0; i < M; ++i) {
      for (long j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    }
    return;
  }
  // OpenBLAS itself always runs on the calling thread (see sgemm_split): set once, and again
  // should a program have changed it (lab 4's benchmarks set their own count before each call).
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  const SgemmSplit sp = sgemm_split(M, N, K);
  parallel_for(0, sp.blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (long blk = static_cast<long>(b0); blk < static_cast<long>(b1); ++blk) {
      const long lo = blk * sp.step, len = std::min(sp.step, (sp.rows ? M : N) - lo);
      if (len <= 0) continue;
      // Rows [lo, lo + len) of C read rows of op(A); columns read columns of op(B).
      const float* a = sp.rows ? A + (trans_a ? lo : lo * lda) : A;
      const float* b = sp.rows ? B : B + (trans_b ? lo * ldb : lo);
      float* c = sp.rows ? C + lo * ldc : C + lo;
      cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                  static_cast<int>(sp.rows ? len : M), static_cast<int>(sp.rows ? N : len), static_cast<int>(K), alpha,
                  a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
    }
  });
}
#endif

}  // namespace

SgemmSplit sgemm_split(long M, long N, long K) {
  // The dimension with more work is split, in pieces of at least kMinPiece (whole micro-tiles), and
  // into at most num_threads() pieces, fewer when a piece would hold less than kMinWork
  // multiply-adds (OpenBLAS's own threshold for threading a GEMM).
  constexpr long kMinPiece = 16;
  constexpr double kMinWork = 65536.0 * 4;
  SgemmSplit sp;
  sp.rows = M >= N;
  const long dim = sp.rows ? M : N;
  const double work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  long blocks = std::min<long>(num_threads(), std::max<long>(1, dim / kMinPiece));
  blocks = std::max<long>(1, std::min<long>(blocks, static_cast<long>(work / kMinWork)));
  sp.step = std::max<long>(1, (dim + blocks - 1) / blocks);
  if (blocks > 1) sp.step = (sp.step + kMinPiece - 1) / kMinPiece * kMinPiece;  // whole micro-tiles
  sp.blocks = std::max<long>(1, (dim + sp.step - 1) / sp.step);
  return sp;
}

int openblas_threads() {
#ifdef MLS_HAVE_OPENBLAS
  return openblas_get_num_threads();
#else
  return 0;
#endif
}

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
