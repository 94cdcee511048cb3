// Lab 4 part 2: operands where they lie. Strided buffers (a leading dimension: a matrix read or
// written in place), accumulating reductions (C += A·B: BLAS's beta = 1), transposing copies
// (cache_read with a layout), and exact splits whose outer part is split again (no guard inside
// the tile), each against the naive evaluation and a double-precision reference on awkward shapes.
#include <catch2/catch.hpp>

#include <limits>
#include <string>
#include <vector>

#include "te_check.hpp"

using namespace mls::kernels::te;
using kernels_test::random_vec;

namespace {

/// C (M x N, leading dimension ldc) = or += op(A) op(B), every operand strided, A and B transposed
/// or not (A is K x M when ta, B is N x K when tb), as a tensor expression.
struct StridedGemm {
  long m, n, k, lda, ldb, ldc;
  bool ta, tb, accumulate;
  Tensor A, B, C;
  IterVar kk;
  StridedGemm(long m_, long n_, long k_, bool ta_, bool tb_, bool acc, long pad)
      : m(m_), n(n_), k(k_), lda((ta_ ? m_ : k_) + pad), ldb((tb_ ? k_ : n_) + pad), ldc(n_ + pad), ta(ta_), tb(tb_),
        accumulate(acc) {
    A = strided_placeholder("A", ta ? std::vector<std::int64_t>{k, m} : std::vector<std::int64_t>{m, k}, {lda, 1});
    B = strided_placeholder("B", tb ? std::vector<std::int64_t>{n, k} : std::vector<std::int64_t>{k, n}, {ldb, 1});
    kk = reduce_axis(k, "k");
    const Tensor c = compute(
        "C", {m, n},
        [&](Var y, Var x) {
          const Expr prod = (ta ? A(kk, y) : A(y, kk)) * (tb ? B(x, kk) : B(kk, x));
          return accumulate ? sum_into(prod, {kk}) : sum(prod, {kk});
        },
        {"y", "x"});
    C = with_strides(c, {ldc, 1});
  }
  std::string what() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + (ta ? " ta" : "") +
           (tb ? " tb" : "") + (accumulate ? " +=" : " =");
  }
};

/// Runs `run` on the operands of g (the gaps between rows hold 7.0 in C, which must stay) and
/// returns C's whole span.
template <class Run>
std::vector<float> run_gemm(const StridedGemm& g, std::uint64_t seed, Run&& run, std::vector<float>* a_out = nullptr,
                            std::vector<float>* b_out = nullptr, std::vector<float>* c0_out = nullptr) {
  std::vector<float> a = random_vec(static_cast<std::size_t>(buffer_span(*g.A.buffer())), seed, "A");
  std::vector<float> b = random_vec(static_cast<std::size_t>(buffer_span(*g.B.buffer())), seed, "B");
  std::vector<float> c = random_vec(static_cast<std::size_t>(buffer_span(*g.C.buffer())), seed, "C");
  for (long i = 0; i < g.m; ++i)
    for (long j = g.n; j < g.ldc && i * g.ldc + j < static_cast<long>(c.size()); ++j) c[static_cast<std::size_t>(i * g.ldc + j)] = 7.0f;
  if (a_out) *a_out = a;
  if (b_out) *b_out = b;
  if (c0_out) *c0_out = c;
  Bindings bind;
  bind.bind(g.A, a).bind(g.B, b).bind(g.C, c);
  run(bind);
  return c;
}

}  // namespace

TEST_CASE("te: strided operands and an accumulating output, C (ldc) (+)= op(A) (lda) op(B) (ldb) in place",
          "[te][expr][strides][base]") {
  const std::vector<std::array<long, 3>> shapes = {{1, 1, 1}, {7, 13, 5}, {3, 1, 17}, {11, 2, 1}};
  for (const auto& [m, n, k] : shapes) {
    for (int flags = 0; flags < 8; ++flags) {
      const StridedGemm g(m, n, k, flags & 1, flags & 2, flags & 4, 3);
      INFO(g.what());
      std::vector<float> a, b, c0;
      const std::uint64_t seed = static_cast<std::uint64_t>(m * 100 + n * 10 + k + flags);
      const auto naive = run_gemm(g, seed, [&](Bindings& bind) { evaluate_naive({g.C}, bind); }, &a, &b, &c0);
      const auto lowered = run_gemm(g, seed, [&](Bindings& bind) { interpret(lower(Schedule({g.C})), bind); });
      const double tol = kernels_test::reduction_tol(k + 1) * static_cast<double>(k + 1);
      mls::testing::observe("strided gemm " + g.what() + ", naive", naive, {tol, tol});
      mls::testing::observe("strided gemm " + g.what() + ", default loop nest", lowered, {tol, tol});
      REQUIRE(kernels_test::identical(naive, lowered));  // the same operations in the same order
      for (long i = 0; i < m; ++i)  // the gaps between C's rows are not written
        for (long j = n; j < g.ldc && i * g.ldc + j < static_cast<long>(naive.size()); ++j)
          REQUIRE(naive[static_cast<std::size_t>(i * g.ldc + j)] == 7.0f);
      MLS_ORACLE(const auto want = kernels_test::reference_sgemm(g.ta, g.tb, m, n, k, 1.0f, a.data(), g.lda, b.data(),
                                                                 g.ldb, g.accumulate ? 1.0f : 0.0f, c0.data(), g.ldc);)
      MLS_ORACLE_CHECK(for (long i = 0; i < m; ++i) for (long j = 0; j < n; ++j) {
        const std::size_t w = static_cast<std::size_t>(i * n + j);
        INFO("C[" << i << "][" << j << "]");
        REQUIRE(std::fabs(naive[static_cast<std::size_t>(i * g.ldc + j)] - want.value[w]) <= want.bound[w]);
      });
    }
  }
  // The loop nest of the accumulating output has no init, and names the strides.
  const StridedGemm g(4, 5, 6, false, true, true, 2);
  const std::string text = to_string(lower(Schedule({g.C}), "gemm"));
  INFO(text);
  CHECK(text.find("def gemm(A: float32[4, 6] strides [8, 1], B: float32[5, 6] strides [8, 1], C: float32[4, 5] strides [7, 1])") !=
        std::string::npos);
  CHECK(text.find("= 0.0") == std::string::npos);
  CHECK(text.find("C[y][x] += A[y][k] * B[x][k]") != std::string::npos);
  CHECK(to_string(g.C.op()->body) == "sum_into(A[y][k] * B[x][k], axis=[k])");
}

TEST_CASE("te: strides, accumulating outputs and layouts are checked", "[te][expr][strides][errors][base]") {
  LAB4_REQUIRE_ERROR(strided_placeholder("A", {2, 3}, {3}), "placeholder 'A': 1 strides [3] for the 2 dimensions of [2, 3]");
  LAB4_REQUIRE_ERROR(strided_placeholder("A", {2, 3}, {4, 2}), "placeholder 'A': strides [4, 2] must end in 1");
  LAB4_REQUIRE_ERROR(strided_placeholder("A", {2, 3}, {2, 1}),
                     "placeholder 'A': stride 2 of dimension 0 in [2, 1] is below 3, the span of the dimensions after it");
  LAB4_REQUIRE_ERROR(strided_placeholder("A", {2, 2, 3}, {5, 3, 1}), "stride 5 of dimension 0 in [5, 3, 1] is below 6");
  const Tensor A = strided_placeholder("A", {2, 3}, {5, 1});
  CHECK(buffer_span(*A.buffer()) == 8);
  CHECK(buffer_strides(*A.buffer()) == std::vector<std::int64_t>{5, 1});
  CHECK(buffer_strides(*placeholder("P", {2, 3, 4}).buffer()) == std::vector<std::int64_t>{12, 4, 1});
  CHECK(buffer_span(*placeholder("P", {2, 3, 4}).buffer()) == 24);
  const Tensor C = compute("C", {2, 3}, [&](Var i, Var j) { return A(i, j) * 2.0f; });
  LAB4_REQUIRE_ERROR(with_strides(C, {1, 1}), "with_strides 'C': stride 1 of dimension 0 in [1, 1] is below 3");
  LAB4_REQUIRE_ERROR(with_strides(Tensor(), {1}), "with_strides: the tensor is undefined");
  const Tensor Cs = with_strides(C, {4, 1});
  CHECK_FALSE(Cs.same_as(C));
  CHECK(Cs.op() == C.op());
  std::vector<float> a(7), c(7);
  LAB4_REQUIRE_ERROR(evaluate_naive({Cs}, Bindings().bind(A, a).bind(Cs, c)),
                     "evaluate_naive: buffer 'A' is bound to 7 floats, its shape [2, 3] (strides [5, 1]) needs 8");
  LAB4_REQUIRE_ERROR(interpret(lower(Schedule({Cs})), Bindings().bind(A, a).bind(Cs, c)),
                     "interpret: buffer 'A' is bound to 7 floats, its shape [2, 3] (strides [5, 1]) needs 8");
  // An accumulating reduction is an output's: it starts from the value the output had.
  const Tensor X = placeholder("X", {3, 4});
  IterVar k = reduce_axis(4, "k");
  const Tensor T = compute("T", {3}, [&](Var i) { return sum_into(X(i, k), {k}); });
  const Tensor U = compute("U", {3}, [&](Var i) { return T(i) * 2.0f; });
  std::vector<float> x(12), u(3);
  LAB4_REQUIRE_ERROR(evaluate_naive({U}, Bindings().bind(X, x).bind(U, u)),
                     "evaluate_naive: 'T' accumulates into its own value (sum_into) but is not bound");
  LAB4_REQUIRE_ERROR(lower(Schedule({U})), "lower: stage 'T' accumulates into its own value (sum_into) but is not an output");
  Schedule s({T});
  LAB4_REQUIRE_ERROR(s.cache_write(T), "cache_write: stage 'T' accumulates into its output (sum_into)");
  LAB4_REQUIRE_ERROR(s.rfactor(T, k), "rfactor: stage 'T' accumulates into its output (sum_into)");
  LAB4_REQUIRE_ERROR(s.cache_read(X, s[T], s[T].leaf_axes()[0], Scope::Local, std::vector<int>{0, 0}, "XL"),
                     "cache_read: layout [0, 0] for 'X' is not a permutation of its 2 dimensions");
  LAB4_REQUIRE_ERROR(s.cache_read(X, s[T], s[T].leaf_axes()[0], Scope::Local, std::vector<int>{1}, "XL"),
                     "cache_read: layout [1] for 'X' is not a permutation");
}

TEST_CASE("te: a transposing cache_read packs B[x][k] as BL[k][x] and gives the naive result", "[te][schedule][layout][base]") {
  for (const auto& [m, n, k] : std::vector<std::array<long, 3>>{{1, 1, 1}, {5, 7, 3}, {2, 13, 11}}) {
    const StridedGemm g(m, n, k, false, true, false, 2);
    Schedule s({g.C});
    const Tensor BL = s.cache_read(g.B, s[g.C], s[g.C].leaf_axes()[0], Scope::Local, {1, 0}, "BL");
    CHECK(BL.shape() == std::vector<std::int64_t>{k, n});
    const LoweredFunc f = lower(s, "packed");
    const std::string text = to_string(f);
    INFO(text);
    // The window of one row y: all of B, stored k-major.
    CHECK(text.find("BL = allocate((" + std::to_string(k) + ", " + std::to_string(n) + "), local)") != std::string::npos);
    if (k > 1 && n > 1) CHECK(text.find("BL[k][x]") != std::string::npos);
    const std::uint64_t seed = static_cast<std::uint64_t>(m * 7 + n + k);
    const auto naive = run_gemm(g, seed, [&](Bindings& bind) { evaluate_naive({g.C}, bind); });
    const auto packed = run_gemm(g, seed, [&](Bindings& bind) { interpret(f, bind); });
    mls::testing::observe("transposing cache_read " + g.what(), packed);
    CHECK(kernels_test::identical(naive, packed));  // a copy changes no value
  }
}

TEST_CASE("te schedule: an exact split needs no guard even when its outer part is split again with a tail",
          "[te][schedule][tails][split]") {
  // y (12) -> yp (3 panels of 4), yi; yp -> yc (2), yr (2): the tail is yp's (yc*2 + yr < 3), on yr,
  // outside the 4 x 5 x 6 tile, which tensorizes.
  const StridedGemm g(12, 5, 6, false, false, true, 1);
  Schedule s({g.C});
  Stage st = s[g.C];
  auto [yp, yi] = st.split(g.C.axis(0), 4, "yp", "yi");
  auto [yc, yr] = st.split(yp, 2, "yc", "yr");
  st.reorder({yc, yr, yi, g.C.axis(1), g.kk});
  st.tensorize(yi, gemm_intrinsic(4, 5, 6));
  const LoweredFunc f = lower(s, "tiles");
  const std::string text = to_string(f);
  INFO(text);
  CHECK(text.find("if yc*2 + yr < 3:") != std::string::npos);
  CHECK(text.find("< 12") == std::string::npos);
  CHECK(text.find("fill_zero") == std::string::npos);  // C += ...: no reset
  const auto naive = run_gemm(g, 3, [&](Bindings& bind) { evaluate_naive({g.C}, bind); });
  const auto tiles = run_gemm(g, 3, [&](Bindings& bind) { interpret(f, bind); });
  const double tol = kernels_test::reduction_tol(7) * 7;
  mls::testing::observe("exact split, tensorized tiles", tiles, {tol, tol});
  MLS_ORACLE_CHECK(kernels_test::require_close(tiles, naive, tol, "C"));
  // An inexact split keeps its guard: 10 rows in panels of 4 put a tail inside the tile.
  const StridedGemm h(10, 5, 6, false, false, false, 0);
  Schedule s2({h.C});
  auto [hp, hi] = s2[h.C].split(h.C.axis(0), 4, "yp", "yi");
  s2[h.C].tensorize(hi, gemm_intrinsic(4, 5, 6));
  LAB4_REQUIRE_ERROR(lower(s2), "tensorize: stage 'C' has a tail inside the tile from axis 'yi'");
  (void)hp;
}

TEST_CASE("te: a cache_read in panels stores copy[r][c] at [c / w][r][c % w] and gives the naive result",
          "[te][schedule][layout][panels][base]") {
  // The copy's loops as cache_read makes them (no split): its stores and the consumer's loads divide.
  for (const auto& [m, n, k] : std::vector<std::array<long, 3>>{{1, 1, 1}, {5, 7, 3}, {2, 13, 11}, {3, 4, 6}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const std::int64_t w : {1, 3, 4}) {
          const StridedGemm g(m, n, k, ta, tb, (m + n) % 2 == 1, 2);
          Schedule s({g.C});
          // B's copy in rows of k (BL[k][x]) and A's in columns (AL[k][y]), each in panels of w.
          const Tensor BL = s.cache_read(g.B, s[g.C], s[g.C].leaf_axes()[0], Scope::Local,
                                         tb ? std::vector<int>{1, 0} : std::vector<int>{0, 1}, w, "BL");
          const Tensor AL = s.cache_read(g.A, s[g.C], s[g.C].leaf_axes()[0], Scope::Local,
                                         ta ? std::vector<int>{0, 1} : std::vector<int>{1, 0}, w, "AL");
          CHECK(BL.shape() == std::vector<std::int64_t>{k, n});  // the logical copy
          const LoweredFunc f = lower(s, "panels");
          const std::string text = to_string(f);
          INFO(g.what() << " panel " << w << "\n" << text);
          // The window of one row y: all of B, [ceil(n / w)][k][w].
          CHECK(text.find("BL = allocate((" + std::to_string((n + w - 1) / w) + ", " + std::to_string(k) + ", " +
                          std::to_string(w) + "), local)") != std::string::npos);
          const std::uint64_t seed = static_cast<std::uint64_t>(m * 7 + n + k + w);
          const auto panels = run_gemm(g, seed, [&](Bindings& bind) { interpret(f, bind); });
          mls::testing::observe("cache_read in panels of " + std::to_string(w) + " " + g.what(), panels);
          const auto naive = run_gemm(g, seed, [&](Bindings& bind) { evaluate_naive({g.C}, bind); });
          CHECK(kernels_test::identical(naive, panels));  // a copy changes no value
        }
  const Tensor X = placeholder("X", {3, 4});
  const Tensor T = compute("T", {3, 4}, [&](Var i, Var j) { return X(i, j) * 2.0f; });
  Schedule s({T});
  LAB4_REQUIRE_ERROR(s.cache_read(X, s[T], s[T].leaf_axes()[0], Scope::Local, {}, -2, "XL"),
                     "cache_read: panel width -2 for 'X' must be >= 0");
  LAB4_REQUIRE_ERROR(s.cache_read(X, s[T], s[T].leaf_axes()[0], Scope::Shared, {}, 4, "XL"),
                     "cache_read: panel width 4 for 'X' with Scope::Shared");
}

TEST_CASE("te: B packed in NR-wide panels [NC/NR][KC][NR] feeds a tensorized MR x NR x KC tile with affine indices",
          "[te][schedule][layout][panels][split]") {
  // The Goto/BLIS loop nest: x -> (xc, xr, xi) by NC and NR, y -> (yo, yi) by MR, k -> (ko, ki) by KC;
  // B's KC x NC block copied at ko in panels of NR, panel by panel (its x split by NR, the panel loop
  // first), the tile tensorized. Awkward extents: N not a multiple of NC (a short last block: a guard
  // on xr, outside the tile), K in two blocks, B transposed or not, C accumulated or not.
  struct Case {
    long m, n, k, mr, nr, nc, kc;
  };
  for (const Case& c : std::vector<Case>{{6, 20, 10, 3, 4, 8, 5}, {4, 12, 7, 2, 6, 12, 7}, {1, 5, 3, 1, 5, 5, 1},
                                         {9, 24, 12, 3, 8, 16, 4}})
    for (const bool tb : {false, true}) {
      const StridedGemm g(c.m, c.n, c.k, false, tb, c.n % 2 == 0, 1);
      Schedule s({g.C});
      Stage st = s[g.C];
      auto [yo, yi] = st.split(g.C.axis(0), c.mr, "yo", "yi");
      auto [xp, xi] = st.split(g.C.axis(1), c.nr, "xp", "xi");
      auto [xc, xr] = st.split(xp, c.nc / c.nr, "xc", "xr");
      auto [ko, ki] = st.split(g.kk, c.kc, "ko", "ki");
      st.reorder({xc, ko, yo, xr, yi, xi, ki});
      const Tensor BL = s.cache_read(g.B, st, ko, Scope::Local, tb ? std::vector<int>{1, 0} : std::vector<int>{0, 1},
                                     c.nr, "BL");
      auto [bp, bi] = s[BL].split(s[BL].leaf_axes().back(), c.nr, "bp", "bi");
      s[BL].reorder({bp, s[BL].leaf_axes().front(), bi});
      // With B transposed, C's tiles reset in the tile loops (ResetAt::Tile) instead of a nest of their own.
      if (tb)  // (on C += ...: nothing to reset)
        st.tensorize(yi, gemm_intrinsic(c.mr, c.nr, c.kc), ResetAt::Tile);
      else
        st.tensorize(yi, gemm_intrinsic(c.mr, c.nr, c.kc));
      const LoweredFunc f = lower(s, "goto_panels");
      const std::string text = to_string(f);
      INFO(g.what() << "\n" << text);
      if (!g.accumulate) {
        // One fill_zero call either way; in the tile loops, at ko == 0 when there is more than one k block.
        const std::size_t fill = text.find("fill_zero"), call = text.find("gemm" + std::to_string(c.mr) + "x");
        REQUIRE(fill != std::string::npos);
        CHECK((fill < text.find("for ko")) == !tb);
        if (tb) CHECK((text.find("if ko == 0:") != std::string::npos) == (c.k > c.kc));
        if (tb) CHECK(call > fill);
      }
      CHECK(text.find("BL = allocate((" + std::to_string(c.nc / c.nr) + ", " + std::to_string(c.kc) + ", " +
                      std::to_string(c.nr) + "), local)") != std::string::npos);
      // Panel xr of the block is BL[xr] (BL[0] when the block is one panel): no division left in the nest.
      CHECK(text.find(c.nc > c.nr ? "BL[xr:xr + 1]" : "BL[0:1]") != std::string::npos);
      CHECK(text.find("//") == std::string::npos);
      CHECK(text.find(" % ") == std::string::npos);
      const auto tiles = run_gemm(g, 41, [&](Bindings& bind) { interpret(f, bind); });
      const double tol = kernels_test::reduction_tol(c.k + 1) * static_cast<double>(c.k + 1);
      mls::testing::observe("panels " + g.what(), tiles, {tol, tol});
      const auto naive = run_gemm(g, 41, [&](Bindings& bind) { evaluate_naive({g.C}, bind); });
      MLS_ORACLE_CHECK(kernels_test::require_close(tiles, naive, tol, "C"));
      (void)bi;
    }
}

TEST_CASE("te: ResetAt::Tile resets each tile at the first k block, needs an intrinsic with a reset, and leaves "
          "sum_into alone", "[te][schedule][errors][split]") {
  // C += A·B (sum_into): nothing to reset, no fill_zero anywhere, the product added to C.
  const StridedGemm acc(4, 4, 4, false, false, true, 0);
  Schedule s({acc.C});
  auto [ko, ki] = s[acc.C].split(acc.kk, 2, "ko", "ki");
  s[acc.C].reorder({ko, acc.C.axis(0), acc.C.axis(1), ki});
  s[acc.C].tensorize(acc.C.axis(0), gemm_intrinsic(4, 4, 2), ResetAt::Tile);
  const LoweredFunc fa = lower(s, "accumulate");
  CHECK(to_string(fa).find("fill_zero") == std::string::npos);
  const auto added = run_gemm(acc, 6, [&](Bindings& bind) { interpret(fa, bind); });
  const double tol_a = kernels_test::reduction_tol(5) * 5;
  mls::testing::observe("ResetAt::Tile on sum_into", added, {tol_a, tol_a});
  const auto naive_a = run_gemm(acc, 6, [&](Bindings& bind) { evaluate_naive({acc.C}, bind); });
  MLS_ORACLE_CHECK(kernels_test::require_close(added, naive_a, tol_a, "C"));
  const StridedGemm g(4, 4, 4, false, false, false, 0);
  Schedule s2({g.C});
  auto [ko2, ki2] = s2[g.C].split(g.kk, 2, "ko", "ki");
  s2[g.C].reorder({ko2, g.C.axis(0), g.C.axis(1), ki2});
  Intrinsic no_reset = gemm_intrinsic(4, 4, 2, "gemm_noreset");
  no_reset.reset = nullptr;
  no_reset.reset_name.clear();
  s2[g.C].tensorize(g.C.axis(0), no_reset, ResetAt::Tile);
  LAB4_REQUIRE_ERROR(lower(s2), "tensorize: ResetAt::Tile on stage 'C', and intrinsic 'gemm_noreset' has no reset");
  // The same schedule with a reset: the init inside ko's first iteration, equal to the naive product.
  Schedule s3({g.C});
  auto [ko3, ki3] = s3[g.C].split(g.kk, 2, "ko", "ki");
  s3[g.C].reorder({ko3, g.C.axis(0), g.C.axis(1), ki3});
  s3[g.C].tensorize(g.C.axis(0), gemm_intrinsic(4, 4, 2), ResetAt::Tile);
  const LoweredFunc f = lower(s3, "reset_in_tile");
  const std::string text = to_string(f);
  INFO(text);
  CHECK(text.find("if ko == 0:") != std::string::npos);
  const auto got = run_gemm(g, 5, [&](Bindings& bind) { interpret(f, bind); });
  const double tol = kernels_test::reduction_tol(5) * 5;
  mls::testing::observe("ResetAt::Tile, two k blocks", got, {tol, tol});
  const auto naive = run_gemm(g, 5, [&](Bindings& bind) { evaluate_naive({g.C}, bind); });
  MLS_ORACLE_CHECK(kernels_test::require_close(got, naive, tol, "C"));
  (void)ki;
  (void)ki2;
  (void)ki3;
}
