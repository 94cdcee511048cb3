// Lab 4 part 2: schedule primitives. Each illegal request is its named error; tails, compute_at,
// cache_read/cache_write, rfactor and tensorize give the naive result. (The fuzz test, random
// legal sequences of primitives on random shapes, is tests/test_te_fuzz.cpp: hidden.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "te_check.hpp"
#include "te_workloads.hpp"

using namespace mls::kernels::te;
using kernels_test::random_inputs;
using kernels_test::reduction_tol;
using kernels_test::require_close;
using kernels_test::run_naive;
using kernels_test::run_schedule;

namespace {
struct Matmul {
  Tensor A, B, C;
  IterVar k;
};
Matmul matmul(std::int64_t m, std::int64_t n, std::int64_t kk) {
  Matmul r;
  r.A = placeholder("A", {m, kk});
  r.B = placeholder("B", {kk, n});
  r.k = reduce_axis(kk, "k");
  r.C = compute("C", {m, n}, [&](Var y, Var x) { return sum(r.A(y, r.k) * r.B(r.k, x), {r.k}); }, {"y", "x"});
  return r;
}

/// The schedule's result (observed as `what`) equals the naive evaluation within the rounding of a
/// reduction of `r` terms.
void check_schedule(const std::string& what, const Schedule& s, const std::vector<Tensor>& inputs, std::int64_t r,
                    std::uint64_t seed = 1) {
  const auto in = random_inputs(inputs, seed);
  const auto got = run_schedule(s, inputs, in);
  const double tol = reduction_tol(r) * static_cast<double>(r);
  kernels_test::observe_outputs(what, s.outputs(), got, tol);
  MLS_ORACLE(const auto want = run_naive(inputs, in, s.outputs());)
  MLS_ORACLE_CHECK(for (std::size_t i = 0; i < got.size(); ++i) require_close(got[i], want[i], tol, s.outputs()[i].name()));
}
}  // namespace

TEST_CASE("te schedule: illegal primitives are named errors", "[te][schedule][errors][split]") {
  Matmul m = matmul(16, 16, 16);
  Schedule s({m.C});
  Stage c = s[m.C];
  const IterVar y = m.C.axis(0), x = m.C.axis(1);
  LAB4_REQUIRE_ERROR(c.split(y, 0), "split: factor 0 for axis 'y' of stage 'C' must be > 0");
  LAB4_REQUIRE_ERROR(c.split(y, -3), "split: factor -3 for axis 'y' of stage 'C' must be > 0");
  LAB4_REQUIRE_ERROR(c.vectorize(m.k), "vectorize: axis 'k' of stage 'C' is a reduction axis: rfactor it first");
  LAB4_REQUIRE_ERROR(c.parallel(m.k), "parallel: axis 'k' of stage 'C' is a reduction axis: rfactor it first");
  LAB4_REQUIRE_ERROR(c.fuse(y, m.k), "fuse: axes 'y' and 'k' of stage 'C' are not adjacent, outer then inner (its axes: y, x, k)");
  LAB4_REQUIRE_ERROR(c.fuse(x, y), "fuse: axes 'x' and 'y' of stage 'C' are not adjacent");
  LAB4_REQUIRE_ERROR(c.fuse(x, m.k), "fuse: axis 'x' of stage 'C' is data-parallel and 'k' is not: only axes of one kind fuse");
  LAB4_REQUIRE_ERROR(c.reorder({x, y, x}), "reorder: axis 'x' of stage 'C' is given twice");
  LAB4_REQUIRE_ERROR(s[m.A], "schedule[]: 'A' is a placeholder: it has no stage");
  // Axes of another stage, and axes split away.
  Tensor D = compute("D", {16, 16}, [&](Var i, Var j) { return m.C(i, j) * 2.0f; });
  Schedule s2({D});
  LAB4_REQUIRE_ERROR(s2[D].reorder({D.axis(0), y}), "reorder: axis 'y' does not belong to stage 'D' (its axes: i, j)");
  LAB4_REQUIRE_ERROR(s2[D].split(m.k, 2), "split: axis 'k' does not belong to stage 'D'");
  auto [yo, yi] = c.split(y, 4);
  LAB4_REQUIRE_ERROR(c.split(y, 2), "split: axis 'y' of stage 'C' was already split or fused away (its axes now: yo, yi, x, k)");
  LAB4_REQUIRE_ERROR(c.unroll(y), "unroll: axis 'y' of stage 'C' was already split or fused away");
  LAB4_REQUIRE_ERROR(c.tensorize(y, gemm_intrinsic(4, 4, 4)), "tensorize: axis 'y' of stage 'C' was already split or fused away");
  LAB4_REQUIRE_ERROR(c.tile(yo, yo, 2, 2), "tile: axis 'yo' of stage 'C' is given twice");
  LAB4_REQUIRE_ERROR(c.tile(yi, x, 0, 2), "tile: factors 0 and 2 for axes 'yi' and 'x' of stage 'C' must be > 0");
  IterVar f = c.fuse(yo, yi);
  LAB4_REQUIRE_ERROR(c.fuse(yo, yi), "fuse: axis 'yo' of stage 'C' was already split or fused away");
  LAB4_REQUIRE_ERROR(s.rfactor(m.C, f), "rfactor: axis 'yo_yi' of stage 'C' is not a reduction axis");
  // compute_at and cache_read.
  LAB4_REQUIRE_ERROR(s2[D].compute_at(s2[D], D.axis(0)), "compute_at: stage 'D' cannot be computed inside itself");
  LAB4_REQUIRE_ERROR(s2[m.C].compute_at(s2[D], y), "compute_at: axis 'y' does not belong to stage 'D'");
  LAB4_REQUIRE_ERROR(s2[D].compute_at(s2[m.C], m.C.axis(0)), "compute_at: 'D' is an output of the schedule");
  LAB4_REQUIRE_ERROR(s2.cache_read(m.B, s2[D], D.axis(0)), "cache_read: stage 'D' does not read 'B'");
  Tensor E = compute("E", {16, 16}, [&](Var i, Var j) { return m.C(j, i) + 1.0f; });
  Schedule s3({D, E});
  LAB4_REQUIRE_ERROR(s3[m.C].compute_at(s3[D], D.axis(1)), "compute_at: 'C' is also read by stage 'E'; compute_at needs a single consumer");
  Tensor Q = compute("Q", {16, 16}, [&](Var i, Var j) { return m.A(i, j) * 3.0f; });
  Schedule s4({D, Q});
  LAB4_REQUIRE_ERROR(s4[m.C].compute_at(s4[Q], Q.axis(0)), "compute_at: stage 'Q' does not read 'C'");
  s4.cache_read(m.A, s4[m.C], m.k);
  LAB4_REQUIRE_ERROR(s4.cache_read(m.A, s4[m.C], m.k), "cache_read: stage 'C' already reads 'A' through 'AL'");
  LAB4_REQUIRE_ERROR(s4.rfactor(m.C, m.k), "rfactor: stage 'C' already has stages computed inside it; call rfactor first");
  LAB4_REQUIRE_ERROR(s4.cache_write(m.C), "cache_write: stage 'C' already has stages computed inside it");
  Schedule s5({m.C});
  s5[m.C].split(m.k, 4);
  LAB4_REQUIRE_ERROR(s5.cache_write(m.C), "cache_write: reduction axis 'k' of stage 'C' is already scheduled; call cache_write first");
  Schedule s6({m.C});
  auto [ko, ki] = s6[m.C].split(m.k, 4);
  IterVar kf = s6[m.C].fuse(ko, ki);
  LAB4_REQUIRE_ERROR(s6.rfactor(m.C, kf), "rfactor: axis 'ko_ki' of stage 'C' comes from a fuse");
  // An attach axis or a tensorize axis split after the fact: found when lowering.
  Schedule s7({D});
  s7[m.C].compute_at(s7[D], D.axis(0));
  s7[D].split(D.axis(0), 4);
  LAB4_REQUIRE_ERROR(lower(s7), "compute_at: stage 'C' is computed at axis 'i' of 'D', which was split or fused away since");
}

TEST_CASE("te schedule: tensorize checks the tile, the pattern and tails", "[te][schedule][errors][tensorize][primitives]") {
  Matmul m = matmul(16, 16, 16);
  auto tiled = [&](std::int64_t fy, std::int64_t fx, std::int64_t fk) {
    Schedule s({m.C});
    TileAxes t = s[m.C].tile(m.C.axis(0), m.C.axis(1), fy, fx);
    auto [ko, ki] = s[m.C].split(m.k, fk);
    s[m.C].reorder({t.outer0, t.outer1, ko, t.inner0, t.inner1, ki});
    return std::make_pair(s, t);
  };
  {
    auto [s, t] = tiled(8, 4, 8);
    s[m.C].tensorize(t.inner0, gemm_intrinsic(8, 8, 8));
    LAB4_REQUIRE_ERROR(lower(s), "tensorize: the tile of stage 'C' from axis 'yi' is 8x4x8 (yi, xi, ki); intrinsic 'gemm8x8x8_add' computes 8x8x8");
  }
  {
    auto [s, t] = tiled(8, 8, 8);
    s[m.C].tensorize(t.inner1, gemm_intrinsic(8, 8, 8));
    LAB4_REQUIRE_ERROR(lower(s), "tensorize: the tile of stage 'C' from axis 'xi' has axes (xi, ki): 1 data-parallel and 1 reduction; intrinsic 'gemm8x8x8_add' (gemm) needs 2 data-parallel and 1 reduction");
  }
  {
    auto [s, t] = tiled(8, 8, 8);
    s[m.C].tensorize(t.inner0, copy_intrinsic({8, 8}));
    LAB4_REQUIRE_ERROR(lower(s), "needs 2 data-parallel and 0 reduction");
  }
  {  // 13 = 8 + 5: a tail inside the tile.
    Matmul t13 = matmul(13, 16, 16);
    Schedule s({t13.C});
    TileAxes t = s[t13.C].tile(t13.C.axis(0), t13.C.axis(1), 8, 8);
    auto [ko, ki] = s[t13.C].split(t13.k, 8);
    s[t13.C].reorder({t.outer0, t.outer1, ko, t.inner0, t.inner1, ki});
    s[t13.C].tensorize(t.inner0, gemm_intrinsic(8, 8, 8));
    LAB4_REQUIRE_ERROR(lower(s), "tensorize: stage 'C' has a tail inside the tile from axis 'yi' (guard yo*8 + yi < 13)");
  }
  {  // Not a product of two loads.
    Tensor A = placeholder("A", {8, 8});
    IterVar k = reduce_axis(8, "k");
    Tensor S = compute("S", {8, 8}, [&](Var i, Var j) { return sum(A(i, k) + A(k, j), {k}); });
    Schedule s({S});
    s[S].tensorize(S.axis(0), gemm_intrinsic(8, 8, 8));
    LAB4_REQUIRE_ERROR(lower(s), "tensorize: stage 'S' computes a reduction of A[i][k] + A[k][j], not a sum of a product of two loads");
    Tensor T = compute("T", {8, 8}, [&](Var i, Var j) { return A(j, i) * 2.0f; });
    Schedule s2({T});
    s2[T].tensorize(T.axis(0), copy_intrinsic({8, 8}));
    LAB4_REQUIRE_ERROR(lower(s2), "tensorize: stage 'T' computes A[j][i] * 2.0, not a copy of one load");
    // A fused tile axis is not affine.
    Tensor U = compute("U", {8, 8}, [&](Var i, Var j) { return A(j, i); });
    Schedule s3({U});
    IterVar f = s3[U].fuse(U.axis(0), U.axis(1));
    auto [fo, fi] = s3[U].split(f, 8);
    s3[U].tensorize(fo, copy_intrinsic({8, 8}));
    LAB4_REQUIRE_ERROR(lower(s3), "is not affine in the tile's axes (i_jo, i_ji)");
  }
  {  // A stage computed inside the tile.
    auto [s, t] = tiled(8, 8, 8);
    s.cache_read(m.A, s[m.C], t.inner0);
    s[m.C].tensorize(t.inner0, gemm_intrinsic(8, 8, 8));
    LAB4_REQUIRE_ERROR(lower(s), "tensorize: stage 'AL' is computed inside the tile of 'C' (at axis 'yi')");
  }
  {  // The reduction starts inside the tile and the intrinsic has no reset.
    Schedule s({m.C});
    TileAxes t = s[m.C].tile(m.C.axis(0), m.C.axis(1), 4, 4);
    Intrinsic g = gemm_intrinsic(4, 4, 16);
    g.reset = nullptr;
    g.reset_name.clear();
    s[m.C].tensorize(t.inner0, g);
    LAB4_REQUIRE_ERROR(lower(s), "holds the start of its reduction, and intrinsic 'gemm4x4x16_add' has no reset");
  }
}

TEST_CASE("te schedule: tensorized tiles give the loop nest's result", "[te][schedule][tensorize][primitives]") {
  // Whole reduction inside the tile (reset + update in one place), A read transposed via strides.
  Matmul m = matmul(12, 8, 6);
  Schedule s({m.C});
  TileAxes t = s[m.C].tile(m.C.axis(0), m.C.axis(1), 4, 4);
  s[m.C].tensorize(t.inner0, gemm_intrinsic(4, 4, 6));
  const std::string text = to_string(lower(s).body);
  REQUIRE(text.find("fill_zero4x4(C[yo*4:yo*4 + 4][xo*4:xo*4 + 4])") != std::string::npos);
  REQUIRE(text.find("gemm4x4x6_add(C[yo*4:yo*4 + 4][xo*4:xo*4 + 4], A[yo*4:yo*4 + 4][0:6], B[0:6][xo*4:xo*4 + 4])") != std::string::npos);
  const auto in = random_inputs({m.A, m.B}, 3);
  const auto whole = run_schedule(s, {m.A, m.B}, in);
  kernels_test::observe_outputs("tensorized 4x4x6 tiles", {m.C}, whole);
  MLS_ORACLE(const auto naive = run_naive({m.A, m.B}, in, {m.C});)
  MLS_ORACLE_CHECK(REQUIRE(kernels_test::identical(whole[0], naive[0])));
  // Without a reset, the init nest stays loops when the reduction starts outside the tile.
  Schedule s2({m.C});
  TileAxes t2 = s2[m.C].tile(m.C.axis(0), m.C.axis(1), 4, 4);
  auto [ko, ki] = s2[m.C].split(m.k, 3);
  s2[m.C].reorder({t2.outer0, t2.outer1, ko, t2.inner0, t2.inner1, ki});
  Intrinsic g = gemm_intrinsic(4, 4, 3, "mma");
  g.reset = nullptr;
  g.reset_name.clear();
  s2[m.C].tensorize(t2.inner0, g);
  const std::string t2s = to_string(lower(s2).body);
  REQUIRE(t2s.find("C[yo*4 + yi][xo*4 + xi] = 0.0") != std::string::npos);
  const auto split_k = run_schedule(s2, {m.A, m.B}, in);
  kernels_test::observe_outputs("tensorized 4x4x3 tiles, no reset", {m.C}, split_k);
  MLS_ORACLE_CHECK(REQUIRE(kernels_test::identical(split_k[0], naive[0])));
}

TEST_CASE("te schedule: tails are guarded and correct", "[te][schedule][tails][split]") {
  Matmul m = matmul(13, 7, 11);
  Schedule s({m.C});
  TileAxes t = s[m.C].tile(m.C.axis(0), m.C.axis(1), 4, 3);
  auto [ko, ki] = s[m.C].split(m.k, 5);
  s[m.C].reorder({t.outer0, ko, t.outer1, t.inner0, ki, t.inner1});
  s[m.C].vectorize(t.inner1);
  s[m.C].parallel(t.outer0);
  s[m.C].unroll(ki);
  const std::string text = to_string(lower(s).body);
  INFO(text);
  REQUIRE(text.find("for yo in parallel(4):") != std::string::npos);
  REQUIRE(text.find("for xi in vectorized(3):") != std::string::npos);
  REQUIRE(text.find("for ki in unrolled(5):") != std::string::npos);
  REQUIRE(text.find("if yo*4 + yi < 13:") != std::string::npos);
  REQUIRE(text.find("if ko*5 + ki < 11:") != std::string::npos);
  REQUIRE(text.find("if xo*3 + xi < 7:") != std::string::npos);
  check_schedule("matmul 13x7x11 tiled 4x3, k by 5", s, {m.A, m.B}, 11);
  // Divisible splits need no guard.
  Matmul d = matmul(8, 8, 8);
  Schedule s2({d.C});
  s2[d.C].tile(d.C.axis(0), d.C.axis(1), 4, 2);
  REQUIRE(to_string(lower(s2).body).find("if ") == std::string::npos);
}

TEST_CASE("te schedule: compute_at, cache_read, cache_write and rfactor", "[te][schedule][primitives]") {
  SECTION("softmax: the exp-sum computed per row inside the divide") {
    const std::int64_t rows = 5, cols = 13;
    const auto w = kernels_test::row_softmax(rows, cols);
    const Tensor &X = w.X, &S = w.S, &Y = w.Y;
    Schedule s({Y});
    s[S].compute_at(s[Y], Y.axis(0));
    const std::string text = to_string(lower(s).body);
    INFO(text);
    REQUIRE(text.find("    S[i] = 0.0\n    for j2 in range(13):\n        S[i] += exp(X[i][j2] - M[i])") != std::string::npos);
    check_schedule("softmax 5x13, S at Y's rows", s, {X}, cols);
  }
  SECTION("an elementwise producer at a tiled consumer's loop, with tails") {
    Tensor A = placeholder("A", {11, 7}), B = placeholder("B", {11, 7});
    Tensor T = compute("T", {11, 7}, [&](Var i, Var j) { return A(i, j) + B(i, j); });
    Tensor E = compute("E", {11, 7}, [&](Var i, Var j) { return T(i, j) * T(i, j); });
    Schedule s({E});
    TileAxes t = s[E].tile(E.axis(0), E.axis(1), 4, 4);
    s[T].compute_at(s[E], t.outer1);
    const std::string text = to_string(lower(s).body);
    INFO(text);
    REQUIRE(text.find("T[io*4 + i][jo*4 + j] = A[io*4 + i][jo*4 + j] + B[io*4 + i][jo*4 + j]") != std::string::npos);
    check_schedule("T at E's tile", s, {A, B}, 1);
  }
  SECTION("cache_read of a convolution's input window (stride 2, overlapping windows)") {
    Tensor X = placeholder("X", {1, 2, 9, 9}), W = placeholder("W", {3, 2, 3, 3});
    IterVar rc = reduce_axis(2, "rc"), ry = reduce_axis(3, "ry"), rx = reduce_axis(3, "rx");
    Tensor Y = compute("Y", {1, 3, 4, 4}, [&](Var b, Var o, Var y, Var x) {
      return sum(X(b, rc, y * 2 + ry, x * 2 + rx) * W(o, rc, ry, rx), {rc, ry, rx});
    }, {"b", "o", "y", "x"});
    Schedule s({Y});
    Tensor XL = s.cache_read(X, s[Y], Y.axis(2));
    const std::string text = to_string(lower(s).body);
    INFO(text);
    REQUIRE(text.find("XL = allocate((1, 2, 3, 9), local)") != std::string::npos);
    check_schedule("conv2d, XL at y", s, {X, W}, 18);
    Schedule s2({Y});
    s2.cache_read(X, s2[Y], Y.axis(3));
    REQUIRE(to_string(lower(s2).body).find("XL = allocate((1, 2, 3, 3), local)") != std::string::npos);
    check_schedule("conv2d, XL at x", s2, {X, W}, 18);
  }
  SECTION("rfactor: a split reduction made parallel and vectorized") {
    auto w = kernels_test::rfactor_row_sum();
    Tensor A = w.A, R = w.R;
    IterVar k = w.k;
    Schedule& s = w.s;
    const std::string text = to_string(lower(s).body);
    INFO(text);
    REQUIRE(text.find("R_rf = allocate((8, 3), global)") != std::string::npos);
    REQUIRE(text.find("for ki in vectorized(8):") != std::string::npos);
    REQUIRE(text.find("select(ko*8 + ki < 29, A[i][ko*8 + ki], 0.0)") != std::string::npos);
    check_schedule("row sum, rfactor of the inner part", s, {A}, 29);
    Schedule s2({R});
    auto [ko2, ki2] = s2[R].split(k, 4);
    Tensor RF2 = s2.rfactor(R, ko2);  // the outer part: partial sums over the inner one
    s2[RF2].parallel(s2[RF2].leaf_axes()[0]);
    check_schedule("row sum, rfactor of the outer part", s2, {A}, 29);
    LAB4_REQUIRE_ERROR(s2[R].vectorize(s2[R].leaf_axes().back()), "vectorize: axis 'ko' of stage 'R' is a reduction axis");
  }
  SECTION("cache_write of an elementwise compute, computed at the consumer's row") {
    Tensor A = placeholder("A", {5, 3});
    Tensor T = compute("T", {5, 3}, [&](Var i, Var j) { return exp(A(i, j)); });
    Schedule s({T});
    Tensor TL = s.cache_write(T);
    s[TL].compute_at(s[T], T.axis(0));
    REQUIRE(to_string(lower(s).body).find("TL = allocate((1, 3), local)") != std::string::npos);
    check_schedule("cache_write at rows", s, {A}, 1);
  }
}

TEST_CASE("te schedule: compute_with fuses loop nests, one pass for several stages", "[te][schedule][primitives]") {
  SECTION("two row reductions in one loop over the row") {
    Tensor A = placeholder("A", {5, 13});
    IterVar ja = reduce_axis(13, "ja"), jb = reduce_axis(13, "jb");
    Tensor SA = compute("SA", {5}, [&](Var i) { return sum(A(i, ja), {ja}); }, {"i"});
    Tensor SB = compute("SB", {5}, [&](Var i) { return sum(A(i, jb) * A(i, jb), {jb}); }, {"i"});
    Schedule s({SA, SB});
    s[SB].compute_with(s[SA], ja);
    const std::string text = to_string(lower(s).body);
    INFO(text);
    REQUIRE(text ==
            "for i in range(5):\n"
            "    SA[i] = 0.0\n"
            "    SB[i] = 0.0\n"
            "    for ja in range(13):\n"
            "        SA[i] += A[i][ja]\n"
            "        SB[i] += A[i][ja] * A[i][ja]\n");
    check_schedule("two row sums, one loop", s, {A}, 13);
    // Split alike (a tail of 1): the shared loops keep the one guard.
    Schedule s2({SA, SB});
    auto [ao, ai] = s2[SA].split(ja, 4);
    auto [bo, bi] = s2[SB].split(jb, 4);
    s2[SB].compute_with(s2[SA], ai);
    const std::string t2 = to_string(lower(s2).body);
    INFO(t2);
    REQUIRE(t2.find("            if jao*4 + jai < 13:\n                SA[i] += A[i][jao*4 + jai]\n"
                    "                SB[i] += A[i][jao*4 + jai] * A[i][jao*4 + jai]") != std::string::npos);
    check_schedule("two row sums, split alike, one loop", s2, {A}, 13);
  }
  SECTION("column sums over blocks of rows inside the row loop that writes each row") {
    const std::int64_t rows = 6, cols = 5, rb = 3;
    Tensor A = placeholder("A", {rows, cols});
    Tensor Y = compute("Y", {rows, cols}, [&](Var i, Var j) { return A(i, j) * 2.0f; }, {"i", "j"});
    IterVar rr = reduce_axis(rb, "rr");
    Tensor G = compute("G", {rows / rb, cols}, [&](Var b, Var j) { return sum(A(Expr(b) * Expr(rb) + rr, j), {rr}); },
                       {"b", "j"});
    Schedule s({Y, G});
    auto [io, ii] = s[Y].split(Y.axis(0), rb);
    s[Y].parallel(io);
    s[G].reorder({G.axis(0), rr, G.axis(1)});
    s[G].compute_with(s[Y], Y.axis(1));
    const std::string text = to_string(lower(s).body);
    INFO(text);
    REQUIRE(text ==
            "for io in parallel(2):\n"
            "    for j in range(5):\n"
            "        G[io][j] = 0.0\n"
            "    for ii in range(3):\n"
            "        for j in range(5):\n"
            "            Y[io*3 + ii][j] = A[io*3 + ii][j] * 2.0\n"
            "            G[io][j] += A[io*3 + ii][j]\n");
    check_schedule("column sums fused into the row loop", s, {A}, rb);
  }
  SECTION("two partial sums computed at one consumer's row, local, in one pass") {
    Tensor A = placeholder("A", {4, 8});
    IterVar ka = reduce_axis(4, "ka"), kb = reduce_axis(4, "kb"), u = reduce_axis(2, "u");
    Tensor PA = compute("PA", {4, 2}, [&](Var i, Var l) { return sum(A(i, Expr(ka) * Expr(2) + l), {ka}); }, {"i", "l"});
    Tensor PB = compute("PB", {4, 2}, [&](Var i, Var l) {
      const Expr a = A(i, Expr(kb) * Expr(2) + l);
      return sum(a * a, {kb});
    }, {"i", "l"});
    Tensor C = compute("C", {4}, [&](Var i) { return sum(PA(i, u) + PB(i, u), {u}); }, {"i"});
    Schedule s({C});
    for (const Tensor& p : {PA, PB}) {
      s[p].compute_at(s[C], C.axis(0));
      s[p].set_scope(Scope::Local);
      s[p].reorder({p.axis(0), s[p].leaf_axes().back(), p.axis(1)});
      s[p].vectorize(p.axis(1));
    }
    s[PB].compute_with(s[PA], PA.axis(1));
    const std::string text = to_string(lower(s).body);
    INFO(text);
    REQUIRE(text.find("    for ka in range(4):\n        for l in vectorized(2):\n"
                      "            PA[0][l] += A[i][ka*2 + l]\n"
                      "            PB[0][l] += A[i][ka*2 + l] * A[i][ka*2 + l]\n") != std::string::npos);
    check_schedule("two local partial sums, one pass", s, {A}, 8);
  }
  SECTION("a held row's exp summed as it is written: the guest goes with its host to the row") {
    Tensor X = placeholder("X", {3, 8});
    Tensor E = compute("E", {3, 8}, [&](Var i, Var j) { return exp(X(i, j)); }, {"i", "j"});
    IterVar k = reduce_axis(4, "k"), u = reduce_axis(2, "u");
    Tensor P = compute("P", {3, 2}, [&](Var i, Var l) { return sum(E(i, Expr(k) * Expr(2) + l), {k}); }, {"i", "l"});
    Tensor S = compute("S", {3}, [&](Var i) { return sum(P(i, u), {u}); }, {"i"});
    Tensor Y = compute("Y", {3, 8}, [&](Var i, Var j) { return E(i, j) / S(i); }, {"i", "j"});
    Schedule s({Y});
    s[S].compute_at(s[Y], Y.axis(0));
    s[P].reorder({P.axis(0), k, P.axis(1)});
    auto [jo, l] = s[E].split(E.axis(1), 2, "jo", "l");
    s[P].compute_with(s[E], l);
    s[E].compute_at(s[Y], Y.axis(0));  // P goes with it
    s[E].set_scope(Scope::Local);
    s[P].set_scope(Scope::Local);
    const std::string text = to_string(lower(s).body);
    INFO(text);
    REQUIRE(text.find("            E[0][jo*2 + l] = exp(X[i][jo*2 + l])\n            P[0][l] += E[0][jo*2 + l]\n") !=
            std::string::npos);
    check_schedule("softmax rows, exp and its sum in one pass", s, {X}, 8);
  }
}

TEST_CASE("te schedule: compute_with's illegal requests are named errors", "[te][schedule][errors][primitives]") {
  Tensor A = placeholder("A", {5, 13}), B = placeholder("B", {5, 16});
  IterVar ja = reduce_axis(13, "ja"), jb = reduce_axis(16, "jb"), jc = reduce_axis(13, "jc");
  Tensor SA = compute("SA", {5}, [&](Var i) { return sum(A(i, ja), {ja}); }, {"i"});
  Tensor SB = compute("SB", {5}, [&](Var i) { return sum(B(i, jb), {jb}); }, {"i"});
  Tensor SC = compute("SC", {5}, [&](Var i) { return sum(A(i, jc) * SA(i), {jc}); }, {"i"});
  Tensor E = compute("E", {5}, [&](Var i) { return SA(i) + SB(i) + SC(i); }, {"i"});
  {
    Schedule s({E});
    LAB4_REQUIRE_ERROR(s[SA].compute_with(s[SA], ja), "compute_with: stage 'SA' cannot share loops with itself");
    LAB4_REQUIRE_ERROR(s[SB].compute_with(s[SA], jb), "compute_with: axis 'jb' does not belong to stage 'SA'");
    LAB4_REQUIRE_ERROR(s[E].compute_with(s[SA], ja),
                       "compute_with: stage 'E' has 1 loops (i), fewer than the 2 it would share with 'SA' down to axis 'ja'");
    LAB4_REQUIRE_ERROR(s[SA].compute_with(s[SC], jc), "compute_with: stage 'SC' reads 'SA': each shared iteration runs "
                                                      "the host's statements, then the guest's");
    s[SB].compute_at(s[E], E.axis(0));
    LAB4_REQUIRE_ERROR(s[SB].compute_with(s[SA], SA.axis(0)),
                       "compute_with: stage 'SB' is computed at loop 'i' of 'E' and 'SA' at the root: both must be "
                       "computed at the same place");
  }
  {
    Schedule s({E});
    s[SB].compute_with(s[SA], ja);
    LAB4_REQUIRE_ERROR(s[E].compute_with(s[SB], SB.axis(0)), "compute_with: host 'SB' is itself computed with 'SA'");
    LAB4_REQUIRE_ERROR(s[SA].compute_with(s[E], E.axis(0)), "compute_with: stage 'SA' is the host of 'SB'");
    // Checked when lowering: 16 iterations against 13.
    LAB4_REQUIRE_ERROR(lower(s), "compute_with: loop 'jb' of 'SB' has 16 iterations, the loop 'ja' of 'SA' it would share has 13");
  }
  {
    Schedule s({E});  // a guest reading a reduction it shares the loops of: SA[i] is not final yet
    s[SC].compute_with(s[SA], ja);
    LAB4_REQUIRE_ERROR(lower(s), "compute_with: stage 'SC' reads its host 'SA' at SA[i], not an element the host has "
                                 "just computed");
  }
  {
    Schedule s({E});  // split alike into 4 x 4, but only A's 13 columns have a tail
    s[SA].split(ja, 4);
    auto [bo, bi] = s[SB].split(jb, 4);
    s[SB].compute_with(s[SA], s[SA].leaf_axes().back());
    LAB4_REQUIRE_ERROR(lower(s), "compute_with: stage 'SB' and its host 'SA' have different tails on the loops they "
                                 "share (down to 'jai'): 'SA' has jao*4 + jai < 13;");
  }
  {
    Schedule s({E});  // a stage computed at a loop the guest shares
    Tensor T = compute("T", {5, 16}, [&](Var i, Var j) { return B(i, j) * 2.0f; });
    IterVar jt = reduce_axis(16, "jt");
    Tensor ST = compute("ST", {5}, [&](Var i) { return sum(T(i, jt), {jt}); }, {"i"});
    Tensor P = compute("P", {5}, [&](Var i) { return SA(i) + ST(i); }, {"i"});
    Schedule s2({P});
    s2[T].compute_at(s2[ST], ST.axis(0));
    s2[ST].compute_with(s2[SA], SA.axis(0));
    LAB4_REQUIRE_ERROR(lower(s2), "compute_with: stage 'T' is computed at loop 'i' of 'ST', a loop it shares with 'SA'");
    // A guest reading a stage lowered after its host.
    Tensor U = compute("U", {5}, [&](Var i) { return SB(i) * 2.0f; }, {"i"});
    IterVar ju = reduce_axis(13, "ju");
    Tensor SU = compute("SU", {5}, [&](Var i) { return sum(A(i, ju) * U(i), {ju}); }, {"i"});
    Tensor Q = compute("Q", {5}, [&](Var i) { return SA(i) + SU(i); }, {"i"});
    Schedule s3({Q});
    s3[SU].compute_with(s3[SA], ja);
    std::string order;
    for (const Tensor& t : topo_order({Q})) order += t.name() + " ";
    INFO(order);
    if (order.find("SA") < order.find("U "))  // SA lowered before U, which SU reads
      LAB4_REQUIRE_ERROR(lower(s3), "compute_with: stage 'SU' reads 'U', which is computed after its host 'SA'");
  }
}
