// matmul: NumPy semantics (2-D, batched with broadcast batch dims, 1-D operands) on strided
// inputs, every dtype path, and every registered SGEMM kernel for float32.
// Tolerance of a K-term dot product: |error| <= (K + 2) * eps * sum_k |a_ik b_kj|.
#include <array>
#include <cstring>
#include <functional>

#include "generators.hpp"
#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"

using mls::DType;
using mls::Tensor;
using ref::Dims;
using ref::I64;
using ref::Ref;

namespace {

/// Restores the default kernel choice when a test ends, even on a failed REQUIRE.
struct KernelGuard {
  ~KernelGuard() { mls::set_sgemm_kernel(""); }
};

/// Runs `body` once per registered SGEMM kernel (float32 matmul goes through it).
void for_each_kernel(const std::function<void()>& body) {
  mls::register_matmul_kernels();
  const auto kernels = mls::sgemm_kernels();
  REQUIRE_FALSE(kernels.empty());
  KernelGuard guard;
  for (const auto& k : kernels) {
    INFO("kernel " << k.name);
    mls::set_sgemm_kernel(k.name);
    REQUIRE(mls::sgemm_kernel().name == k.name);
    body();
  }
}

/// Checks matmul(a, b) against the naive product.
void check_matmul(const Tensor& a, const Ref& ra, const Tensor& b, const Ref& rb) {
  const DType t = a.dtype() > b.dtype() ? a.dtype() : b.dtype();
  const Tensor got = mls::matmul(a, b);
  CHECK(got.dtype() == t);
  MLS_ORACLE(const auto [want, scale] = ref::matmul(ra, rb);)
  const I64 K = ra.shape.back();
  const double eps = ref::eps_of(t);
  CHECK_CLOSE(got, want, [&](I64 i) {
    return static_cast<double>(K + 2) * eps * scale.v[static_cast<std::size_t>(i)];
  });
}

/// A random 2-D operand of logical shape [rows, cols] in one of several layouts: dense,
/// strided/negative (built raw), a transposed view, or a stepped slice of a bigger matrix.
std::pair<Tensor, Ref> operand(I64 rows, I64 cols, DType t, mls::Rng& rng) {
  const Ref r = ref::random_ref({rows, cols}, t, rng, -2, 2);
  if (rows * cols == 0) return {ref::make(r, t), r};
  switch (rng.randint(0, 4)) {
    case 0: return {ref::make(r, t), r};
    case 1: return {ref::make_strided(r, t, rng, rng.randint(0, 2)), r};
    case 2: return {ref::make(ref::permute(r, {1, 0}), t).transpose(), r};  // column-major
    default: {  // every other row and column of a bigger matrix
      Ref big({2 * rows, 2 * cols});
      for (I64 i = 0; i < rows; ++i) {
        for (I64 j = 0; j < cols; ++j) big({2 * i, 2 * j}) = r({i, j});
      }
      return {ref::make(big, t).slice(0, 0, 2 * rows, 2).slice(1, 0, 2 * cols, 2), r};
    }
  }
}

/// Batch shapes that broadcast together: out, plus one for each operand.
std::pair<Dims, Dims> batch_pair(mls::Rng& rng) {
  const Dims out = ref::random_shape(rng, 0, 3, 3, 0);
  return {ref::broadcastable_to(out, rng), ref::broadcastable_to(out, rng)};
}

Dims cat(Dims a, std::initializer_list<I64> tail) {
  a.insert(a.end(), tail);
  return a;
}

}  // namespace

TEST_CASE("matmul 2-D float32 on strided operands, every kernel", "[lab1][matmul]") {
  for_each_kernel([] {
    mls::Rng rng(701, "mm2d");
    for (int trial = 0; trial < 120; ++trial) {
      const I64 M = rng.randint(1, 10), N = rng.randint(1, 10), K = rng.randint(1, 10);
      auto [a, ra] = operand(M, K, DType::Float32, rng);
      auto [b, rb] = operand(K, N, DType::Float32, rng);
      INFO("[" << M << ", " << K << "] strides " << ref::dims_str(a.strides()) << " x [" << K << ", " << N
               << "] strides " << ref::dims_str(b.strides()));
      check_matmul(a, ra, b, rb);
    }
    // Sizes past the small-matrix paths and odd leading dimensions.
    for (auto [M, N, K] : {std::tuple<I64, I64, I64>{33, 65, 17}, {64, 64, 64}, {1, 100, 70}, {100, 1, 70}, {7, 9, 300}}) {
      auto [a, ra] = operand(M, K, DType::Float32, rng);
      auto [b, rb] = operand(K, N, DType::Float32, rng);
      INFO("M " << M << " N " << N << " K " << K);
      check_matmul(a, ra, b, rb);
    }
  });
}

TEST_CASE("matmul batched with broadcast batch dims, every kernel", "[lab1][matmul]") {
  for_each_kernel([] {
    mls::Rng rng(702, "mmbatch");
    for (int trial = 0; trial < 80; ++trial) {
      const auto [ba, bb] = batch_pair(rng);
      const I64 M = rng.randint(1, 6), N = rng.randint(1, 6), K = rng.randint(1, 6);
      const Ref ra = ref::random_ref(cat(ba, {M, K}), DType::Float32, rng);
      const Ref rb = ref::random_ref(cat(bb, {K, N}), DType::Float32, rng);
      const Tensor a = gen::any_layout(ra, DType::Float32, rng), b = gen::any_layout(rb, DType::Float32, rng);
      INFO(ref::dims_str(ra.shape) << " strides " << ref::dims_str(a.strides()) << " x " << ref::dims_str(rb.shape)
                                   << " strides " << ref::dims_str(b.strides()));
      check_matmul(a, ra, b, rb);
    }
    // Expanded (stride 0) batch operands and transposed inner matrices.
    const Ref w = ref::random_ref({4, 3}, DType::Float32, rng);
    const Ref x = ref::random_ref({5, 2, 4}, DType::Float32, rng);
    const Tensor we = ref::make(w, DType::Float32).unsqueeze(0).expand({5, 4, 3});
    check_matmul(ref::make(x, DType::Float32), x, we, ref::expand(w, {5, 4, 3}));
    const Tensor xt = ref::make(ref::permute(x, {0, 2, 1}), DType::Float32).transpose(1, 2);
    check_matmul(xt, x, we, ref::expand(w, {5, 4, 3}));
    const Tensor p = ref::make(ref::permute(x, {1, 2, 0}), DType::Float32).permute({2, 0, 1});  // batch dim innermost
    check_matmul(p, x, ref::make(w, DType::Float32), w);
  });
}

TEST_CASE("matmul with 1-D operands drops that dimension", "[lab1][matmul]") {
  for_each_kernel([] {
    mls::Rng rng(703, "mm1d");
    const Ref v = ref::random_ref({5}, DType::Float32, rng), u = ref::random_ref({5}, DType::Float32, rng);
    const Ref m = ref::random_ref({5, 3}, DType::Float32, rng), n = ref::random_ref({4, 5}, DType::Float32, rng);
    const Ref bm = ref::random_ref({2, 3, 5, 4}, DType::Float32, rng), bn = ref::random_ref({2, 1, 4, 5}, DType::Float32, rng);
    const auto T = [](const Ref& r) { return ref::make(r, DType::Float32); };
    const Tensor dot = mls::matmul(T(v), T(u));
    CHECK(dot.ndim() == 0);
    check_matmul(T(v), v, T(u), u);    // [5] x [5] -> []
    check_matmul(T(v), v, T(m), m);    // [5] x [5, 3] -> [3]
    check_matmul(T(n), n, T(v), v);    // [4, 5] x [5] -> [4]
    check_matmul(T(v), v, T(bm), bm);  // [5] x [2, 3, 5, 4] -> [2, 3, 4]
    check_matmul(T(bn), bn, T(v), v);  // [2, 1, 4, 5] x [5] -> [2, 1, 4]
    CHECK(mls::matmul(T(v), T(bm)).shape() == Dims{2, 3, 4});
    CHECK(mls::matmul(T(bn), T(v)).shape() == Dims{2, 1, 4});
    // Strided vectors: a column of a matrix and a reversed view.
    const Tensor col = T(n).select(1, 2);  // stride 5
    const Ref w = ref::random_ref({4}, DType::Float32, rng);
    const Tensor rev = T(w).as_strided({4}, {-1}, 3);  // stride -1
    check_matmul(col, ref::select(n, 1, 2), rev, Ref({4}, {w.v[3], w.v[2], w.v[1], w.v[0]}));
    check_matmul(rev, ref::to_ref(rev), T(n), n);  // [4] x [4, 5]
  });
}

TEST_CASE("matmul with K = 0, M = 0, N = 0 and empty batches", "[lab1][matmul]") {
  for_each_kernel([] {
    const Tensor a = Tensor::ones({3, 0}), b = Tensor::ones({0, 4});
    const Tensor c = mls::matmul(a, b);
    MLS_OBSERVE_VALUES(c);
    CHECK(c.shape() == Dims{3, 4});
    CHECK(c.to_vector<float>() == std::vector<float>(12, 0.0f));  // an empty sum is 0
    MLS_OBSERVE_VALUES(mls::matmul(Tensor::ones({0, 3, 5}), Tensor::ones({5, 2})));
    MLS_OBSERVE_VALUES(mls::matmul(Tensor::ones({0}), Tensor::ones({0})));
    MLS_OBSERVE_VALUES(mls::matmul(Tensor::ones({2, 1, 3, 0}), Tensor::ones({4, 0, 2})));
    CHECK(mls::matmul(Tensor::ones({0, 5}), Tensor::ones({5, 4})).shape() == Dims{0, 4});
    CHECK(mls::matmul(Tensor::ones({3, 5}), Tensor::ones({5, 0})).shape() == Dims{3, 0});
    CHECK(mls::matmul(Tensor::ones({0, 3, 5}), Tensor::ones({5, 2})).shape() == Dims{0, 3, 2});
    CHECK(mls::matmul(Tensor::ones({0}), Tensor::ones({0})).item() == 0.0);
    CHECK(mls::matmul(Tensor::ones({2, 1, 3, 0}), Tensor::ones({4, 0, 2})).to_vector<float>() ==
          std::vector<float>(2 * 4 * 3 * 2, 0.0f));
  });
  CHECK(mls::matmul(Tensor::ones({3, 0}, DType::Int64), Tensor::ones({0, 2}, DType::Int64)).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>(6, 0));
  CHECK(mls::matmul(Tensor::ones({3, 0}, DType::Float64), Tensor::ones({0, 2}, DType::Float64)).to_vector<double>() ==
        std::vector<double>(6, 0.0));
}

TEST_CASE("matmul float64 and integer paths, mixed dtypes promote", "[lab1][matmul]") {
  mls::Rng rng(704, "mmtypes");
  const DType types[] = {DType::Float64, DType::Int32, DType::Int64, DType::Float32};
  for (int trial = 0; trial < 120; ++trial) {
    const DType ta = types[rng.randint(0, 4)], tb = types[rng.randint(0, 4)];
    const auto [ba, bb] = batch_pair(rng);
    const I64 M = rng.randint(1, 6), N = rng.randint(1, 6), K = rng.randint(0, 6);
    const Ref ra = ref::random_ref(cat(ba, {M, K}), ta, rng, -4, 4);
    const Ref rb = ref::random_ref(cat(bb, {K, N}), tb, rng, -4, 4);
    const Tensor a = gen::any_layout(ra, ta, rng), b = gen::any_layout(rb, tb, rng);
    INFO(ta << ref::dims_str(ra.shape) << " strides " << ref::dims_str(a.strides()) << " x " << tb
            << ref::dims_str(rb.shape) << " strides " << ref::dims_str(b.strides()));
    check_matmul(a, ra, b, rb);  // integer results are exact: eps_of(int) is 0
  }
  // A 2-D case through transposed and sliced integer views.
  auto [a, ra] = operand(7, 5, DType::Int64, rng);
  auto [b, rb] = operand(5, 6, DType::Int64, rng);
  check_matmul(a, ra, b, rb);
  CHECK(mls::matmul(Tensor::from({1, 2, 3, 4}, {2, 2}), Tensor::from({5, 6, 7, 8}, {2, 2})).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{19, 22, 43, 50});
  CHECK(mls::matmul(Tensor::ones({2, 2}, DType::Int32), Tensor::ones({2, 2}, DType::Float32)).dtype() == DType::Float32);
  CHECK(mls::matmul(Tensor::ones({2, 2}, DType::Int32), Tensor::ones({2, 2}, DType::Int64)).dtype() == DType::Int64);
}

TEST_CASE("matmul: default kernel choice, and kernels agree with each other", "[lab1][matmul]") {
  mls::register_matmul_kernels();
  mls::register_matmul_kernels();  // idempotent
  const auto kernels = mls::sgemm_kernels();
  int naive = 0;
  for (const auto& k : kernels) naive += k.name == "lab1_reference";
  CHECK(naive == 1);
  for (std::size_t i = 1; i < kernels.size(); ++i) CHECK(kernels[i - 1].priority >= kernels[i].priority);
  mls::Rng rng(705, "mmagree");
  const Ref ra = ref::random_ref({19, 23}, DType::Float32, rng), rb = ref::random_ref({23, 11}, DType::Float32, rng);
  const Tensor a = ref::make(ra, DType::Float32), b = ref::make(rb, DType::Float32);
  MLS_ORACLE(const auto [want, scale] = ref::matmul(ra, rb);)
  std::vector<Tensor> results;
  for_each_kernel([&] { results.push_back(mls::matmul(a, b)); });
  const double eps = ref::eps_of(DType::Float32);
  for (const Tensor& r : results) {
    CHECK_CLOSE(r, want, [&](I64 i) { return 2 * (23 + 2) * eps * scale.v[static_cast<std::size_t>(i)]; });
  }
  mls::set_sgemm_kernel("");
  CHECK(mls::sgemm_kernel().name == kernels.front().name);  // the highest priority by default
}

TEST_CASE("matmul of 256x300 by 300x200: 1 and 2 threads, every kernel", "[lab1][matmul]") {
  mls::Rng rng(706, "mmbig");
  const Ref ra = ref::random_ref({256, 300}, DType::Float32, rng), rb = ref::random_ref({300, 200}, DType::Float32, rng);
  const Tensor a = ref::make(ra, DType::Float32);
  const Tensor bt = ref::make(ref::permute(rb, {1, 0}), DType::Float32).transpose();  // transposed operand
  MLS_ORACLE(const auto [want, scale] = ref::matmul(ra, rb);)
  const Ref ri = ref::random_ref({120, 150}, DType::Int64, rng, -100, 100);
  const Ref rj = ref::random_ref({150, 130}, DType::Int64, rng, -100, 100);
  MLS_ORACLE(const Ref want_i = ref::matmul(ri, rj).first;)
  const double eps = ref::eps_of(DType::Float32);
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    mls::ThreadCountGuard guard(threads);
    for_each_kernel([&] {
      CHECK_CLOSE(mls::matmul(a, bt), want, [&](I64 i) { return (300 + 2) * eps * scale.v[static_cast<std::size_t>(i)]; });
    });
    CHECK_SAME(mls::matmul(ref::make(ri, DType::Int64), ref::make(rj, DType::Int64)), want_i);
  }
}

TEST_CASE("matmul: the openblas kernel's bits do not depend on the intra-op budget, and OpenBLAS runs on one thread",
          "[lab1][matmul]") {
  // Lab 3's parallel executor runs a product under a budget of fewer threads than the sequential
  // executor and promises the same bits: the kernel's cut into pieces depends on the shape and
  // num_threads() only, and each piece is one single-threaded cblas_sgemm (mls/tensor/tensor.hpp).
  mls::ThreadCountGuard threads(4);
  mls::register_matmul_kernels();
  bool have_openblas = false;
  for (const auto& k : mls::sgemm_kernels()) have_openblas |= k.name == "openblas";
  KernelGuard guard;
  if (have_openblas) mls::set_sgemm_kernel("openblas");
  mls::Rng rng(707, "mmbudget");
  const double eps = ref::eps_of(DType::Float32);
  // [M, K, N]: N split (N > M), M split, one piece (small), a row vector times a wide matrix.
  for (const auto& [M, K, N] : std::vector<std::array<I64, 3>>{{257, 131, 263}, {300, 64, 200}, {5, 3, 7}, {1, 64, 1000}}) {
    INFO("M " << M << " K " << K << " N " << N);
    const mls::SgemmSplit sp = mls::sgemm_split(M, N, K);
    const std::vector<long> cut{sp.rows ? 1 : 0, sp.blocks, sp.step};
    mls::testing::observe("sgemm_split " + std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N), cut);
    const long dim = sp.rows ? M : N;
    CHECK(sp.rows == (M >= N));
    CHECK(sp.blocks >= 1);
    CHECK(sp.blocks <= mls::num_threads());
    CHECK(sp.blocks * sp.step >= dim);
    CHECK((sp.blocks - 1) * sp.step < dim);
    const Ref ra = ref::random_ref({M, K}, DType::Float32, rng), rb = ref::random_ref({K, N}, DType::Float32, rng);
    const Tensor a = ref::make(ra, DType::Float32);
    const Tensor b = ref::make(ref::permute(rb, {1, 0}), DType::Float32).transpose();  // a transposed operand
    MLS_ORACLE(const auto [want, scale] = ref::matmul(ra, rb);)
    const Tensor full = mls::matmul(a, b);  // every piece on its own thread
    CHECK_CLOSE(full, want, [&](I64 i) { return static_cast<double>(K + 2) * eps * scale.v[static_cast<std::size_t>(i)]; });
    for (int budget : {1, 2, 3}) {
      INFO("budget " << budget);
      mls::IntraOpBudget cap(budget);
      const mls::SgemmSplit same_cut = mls::sgemm_split(M, N, K);
      CHECK(same_cut.blocks == sp.blocks);
      CHECK(same_cut.step == sp.step);
      const Tensor got = mls::matmul(a, b);
      const bool same_bits = std::memcmp(got.data_ptr(), full.data_ptr(), static_cast<std::size_t>(M * N) * 4) == 0;
      mls::testing::observe("same bits at budget " + std::to_string(budget), same_bits);
      CHECK(same_bits);
    }
    if (have_openblas) CHECK(mls::openblas_threads() == 1);
  }
}
