// Lab 4 part 2: schedule primitives. Each illegal request is its named error; tails, compute_at,
// cache_read/cache_write, rfactor and tensorize give the naive result; a fuzz test applies random
// legal sequences of primitives to random shapes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mls/common/rng.hpp"
#include "te_check.hpp"
#include "te_workloads.hpp"
#include "te_fuzz.hpp"

using namespace mls::kernels::te;
using Catch::Contains;
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

/// The schedule's result equals the naive evaluation within the rounding of a reduction of `r` terms.
void check_schedule(const Schedule& s, const std::vector<Tensor>& inputs, std::int64_t r, std::uint64_t seed = 1) {
  const auto in = random_inputs(inputs, seed);
  const auto got = run_schedule(s, inputs, in);
  const auto want = run_naive(inputs, in, s.outputs());
  for (std::size_t i = 0; i < got.size(); ++i)
    require_close(got[i], want[i], reduction_tol(r) * static_cast<double>(r), s.outputs()[i].name());
}
}  // namespace

TEST_CASE("te schedule: illegal primitives are named errors", "[te][schedule][errors]") {
  Matmul m = matmul(16, 16, 16);
  Schedule s({m.C});
  Stage c = s[m.C];
  const IterVar y = m.C.axis(0), x = m.C.axis(1);
  REQUIRE_THROWS_WITH(c.split(y, 0), Contains("split: factor 0 for axis 'y' of stage 'C' must be > 0"));
  REQUIRE_THROWS_WITH(c.split(y, -3), Contains("split: factor -3 for axis 'y' of stage 'C' must be > 0"));
  REQUIRE_THROWS_WITH(c.vectorize(m.k), Contains("vectorize: axis 'k' of stage 'C' is a reduction axis: rfactor it first"));
  REQUIRE_THROWS_WITH(c.parallel(m.k), Contains("parallel: axis 'k' of stage 'C' is a reduction axis: rfactor it first"));
  REQUIRE_THROWS_WITH(c.fuse(y, m.k), Contains("fuse: axes 'y' and 'k' of stage 'C' are not adjacent, outer then inner (its axes: y, x, k)"));
  REQUIRE_THROWS_WITH(c.fuse(x, y), Contains("fuse: axes 'x' and 'y' of stage 'C' are not adjacent"));
  REQUIRE_THROWS_WITH(c.fuse(x, m.k), Contains("fuse: axis 'x' of stage 'C' is data-parallel and 'k' is not: only axes of one kind fuse"));
  REQUIRE_THROWS_WITH(c.reorder({x, y, x}), Contains("reorder: axis 'x' of stage 'C' is given twice"));
  REQUIRE_THROWS_WITH(s[m.A], Contains("schedule[]: 'A' is a placeholder: it has no stage"));
  // Axes of another stage, and axes split away.
  Tensor D = compute("D", {16, 16}, [&](Var i, Var j) { return m.C(i, j) * 2.0f; });
  Schedule s2({D});
  REQUIRE_THROWS_WITH(s2[D].reorder({D.axis(0), y}), Contains("reorder: axis 'y' does not belong to stage 'D' (its axes: i, j)"));
  REQUIRE_THROWS_WITH(s2[D].split(m.k, 2), Contains("split: axis 'k' does not belong to stage 'D'"));
  auto [yo, yi] = c.split(y, 4);
  REQUIRE_THROWS_WITH(c.split(y, 2), Contains("split: axis 'y' of stage 'C' was already split or fused away (its axes now: yo, yi, x, k)"));
  REQUIRE_THROWS_WITH(c.unroll(y), Contains("unroll: axis 'y' of stage 'C' was already split or fused away"));
  REQUIRE_THROWS_WITH(c.tensorize(y, gemm_intrinsic(4, 4, 4)), Contains("tensorize: axis 'y' of stage 'C' was already split or fused away"));
  REQUIRE_THROWS_WITH(c.tile(yo, yo, 2, 2), Contains("tile: axis 'yo' of stage 'C' is given twice"));
  REQUIRE_THROWS_WITH(c.tile(yi, x, 0, 2), Contains("tile: factors 0 and 2 for axes 'yi' and 'x' of stage 'C' must be > 0"));
  IterVar f = c.fuse(yo, yi);
  REQUIRE_THROWS_WITH(c.fuse(yo, yi), Contains("fuse: axis 'yo' of stage 'C' was already split or fused away"));
  REQUIRE_THROWS_WITH(s.rfactor(m.C, f), Contains("rfactor: axis 'yo_yi' of stage 'C' is not a reduction axis"));
  // compute_at and cache_read.
  REQUIRE_THROWS_WITH(s2[D].compute_at(s2[D], D.axis(0)), Contains("compute_at: stage 'D' cannot be computed inside itself"));
  REQUIRE_THROWS_WITH(s2[m.C].compute_at(s2[D], y), Contains("compute_at: axis 'y' does not belong to stage 'D'"));
  REQUIRE_THROWS_WITH(s2[D].compute_at(s2[m.C], m.C.axis(0)), Contains("compute_at: 'D' is an output of the schedule"));
  REQUIRE_THROWS_WITH(s2.cache_read(m.B, s2[D], D.axis(0)), Contains("cache_read: stage 'D' does not read 'B'"));
  Tensor E = compute("E", {16, 16}, [&](Var i, Var j) { return m.C(j, i) + 1.0f; });
  Schedule s3({D, E});
  REQUIRE_THROWS_WITH(s3[m.C].compute_at(s3[D], D.axis(1)), Contains("compute_at: 'C' is also read by stage 'E'; compute_at needs a single consumer"));
  Tensor Q = compute("Q", {16, 16}, [&](Var i, Var j) { return m.A(i, j) * 3.0f; });
  Schedule s4({D, Q});
  REQUIRE_THROWS_WITH(s4[m.C].compute_at(s4[Q], Q.axis(0)), Contains("compute_at: stage 'Q' does not read 'C'"));
  s4.cache_read(m.A, s4[m.C], m.k);
  REQUIRE_THROWS_WITH(s4.cache_read(m.A, s4[m.C], m.k), Contains("cache_read: stage 'C' already reads 'A' through 'AL'"));
  REQUIRE_THROWS_WITH(s4.rfactor(m.C, m.k), Contains("rfactor: stage 'C' already has stages computed inside it; call rfactor first"));
  REQUIRE_THROWS_WITH(s4.cache_write(m.C), Contains("cache_write: stage 'C' already has stages computed inside it"));
  Schedule s5({m.C});
  s5[m.C].split(m.k, 4);
  REQUIRE_THROWS_WITH(s5.cache_write(m.C), Contains("cache_write: reduction axis 'k' of stage 'C' is already scheduled; call cache_write first"));
  Schedule s6({m.C});
  auto [ko, ki] = s6[m.C].split(m.k, 4);
  IterVar kf = s6[m.C].fuse(ko, ki);
  REQUIRE_THROWS_WITH(s6.rfactor(m.C, kf), Contains("rfactor: axis 'ko_ki' of stage 'C' comes from a fuse"));
  // An attach axis or a tensorize axis split after the fact: found when lowering.
  Schedule s7({D});
  s7[m.C].compute_at(s7[D], D.axis(0));
  s7[D].split(D.axis(0), 4);
  REQUIRE_THROWS_WITH(lower(s7), Contains("compute_at: stage 'C' is computed at axis 'i' of 'D', which was split or fused away since"));
}

TEST_CASE("te schedule: tensorize checks the tile, the pattern and tails", "[te][schedule][errors][tensorize]") {
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
    REQUIRE_THROWS_WITH(lower(s), Contains("tensorize: the tile of stage 'C' from axis 'yi' is 8x4x8 (yi, xi, ki); intrinsic 'gemm8x8x8_add' computes 8x8x8"));
  }
  {
    auto [s, t] = tiled(8, 8, 8);
    s[m.C].tensorize(t.inner1, gemm_intrinsic(8, 8, 8));
    REQUIRE_THROWS_WITH(lower(s), Contains("tensorize: the tile of stage 'C' from axis 'xi' has axes (xi, ki): 1 data-parallel and 1 reduction; intrinsic 'gemm8x8x8_add' (gemm) needs 2 data-parallel and 1 reduction"));
  }
  {
    auto [s, t] = tiled(8, 8, 8);
    s[m.C].tensorize(t.inner0, copy_intrinsic({8, 8}));
    REQUIRE_THROWS_WITH(lower(s), Contains("needs 2 data-parallel and 0 reduction"));
  }
  {  // 13 = 8 + 5: a tail inside the tile.
    Matmul t13 = matmul(13, 16, 16);
    Schedule s({t13.C});
    TileAxes t = s[t13.C].tile(t13.C.axis(0), t13.C.axis(1), 8, 8);
    auto [ko, ki] = s[t13.C].split(t13.k, 8);
    s[t13.C].reorder({t.outer0, t.outer1, ko, t.inner0, t.inner1, ki});
    s[t13.C].tensorize(t.inner0, gemm_intrinsic(8, 8, 8));
    REQUIRE_THROWS_WITH(lower(s), Contains("tensorize: stage 'C' has a tail inside the tile from axis 'yi' (guard yo*8 + yi < 13)"));
  }
  {  // Not a product of two loads.
    Tensor A = placeholder("A", {8, 8});
    IterVar k = reduce_axis(8, "k");
    Tensor S = compute("S", {8, 8}, [&](Var i, Var j) { return sum(A(i, k) + A(k, j), {k}); });
    Schedule s({S});
    s[S].tensorize(S.axis(0), gemm_intrinsic(8, 8, 8));
    REQUIRE_THROWS_WITH(lower(s), Contains("tensorize: stage 'S' computes a reduction of A[i][k] + A[k][j], not a sum of a product of two loads"));
    Tensor T = compute("T", {8, 8}, [&](Var i, Var j) { return A(j, i) * 2.0f; });
    Schedule s2({T});
    s2[T].tensorize(T.axis(0), copy_intrinsic({8, 8}));
    REQUIRE_THROWS_WITH(lower(s2), Contains("tensorize: stage 'T' computes A[j][i] * 2.0, not a copy of one load"));
    // A fused tile axis is not affine.
    Tensor U = compute("U", {8, 8}, [&](Var i, Var j) { return A(j, i); });
    Schedule s3({U});
    IterVar f = s3[U].fuse(U.axis(0), U.axis(1));
    auto [fo, fi] = s3[U].split(f, 8);
    s3[U].tensorize(fo, copy_intrinsic({8, 8}));
    REQUIRE_THROWS_WITH(lower(s3), Contains("is not affine in the tile's axes (i_jo, i_ji)"));
  }
  {  // A stage computed inside the tile.
    auto [s, t] = tiled(8, 8, 8);
    s.cache_read(m.A, s[m.C], t.inner0);
    s[m.C].tensorize(t.inner0, gemm_intrinsic(8, 8, 8));
    REQUIRE_THROWS_WITH(lower(s), Contains("tensorize: stage 'AL' is computed inside the tile of 'C' (at axis 'yi')"));
  }
  {  // The reduction starts inside the tile and the intrinsic has no reset.
    Schedule s({m.C});
    TileAxes t = s[m.C].tile(m.C.axis(0), m.C.axis(1), 4, 4);
    Intrinsic g = gemm_intrinsic(4, 4, 16);
    g.reset = nullptr;
    g.reset_name.clear();
    s[m.C].tensorize(t.inner0, g);
    REQUIRE_THROWS_WITH(lower(s), Contains("holds the start of its reduction, and intrinsic 'gemm4x4x16_add' has no reset"));
  }
}

TEST_CASE("te schedule: tensorized tiles give the loop nest's result", "[te][schedule][tensorize]") {
  // Whole reduction inside the tile (reset + update in one place), A read transposed via strides.
  Matmul m = matmul(12, 8, 6);
  Schedule s({m.C});
  TileAxes t = s[m.C].tile(m.C.axis(0), m.C.axis(1), 4, 4);
  s[m.C].tensorize(t.inner0, gemm_intrinsic(4, 4, 6));
  const std::string text = to_string(lower(s).body);
  REQUIRE(text.find("fill_zero4x4(C[yo*4:yo*4 + 4][xo*4:xo*4 + 4])") != std::string::npos);
  REQUIRE(text.find("gemm4x4x6_add(C[yo*4:yo*4 + 4][xo*4:xo*4 + 4], A[yo*4:yo*4 + 4][0:6], B[0:6][xo*4:xo*4 + 4])") != std::string::npos);
  const auto in = random_inputs({m.A, m.B}, 3);
  REQUIRE(run_schedule(s, {m.A, m.B}, in)[0] == run_naive({m.A, m.B}, in, {m.C})[0]);
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
  REQUIRE(run_schedule(s2, {m.A, m.B}, in)[0] == run_naive({m.A, m.B}, in, {m.C})[0]);
}

TEST_CASE("te schedule: tails are guarded and correct", "[te][schedule][tails]") {
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
  check_schedule(s, {m.A, m.B}, 11);
  // Divisible splits need no guard.
  Matmul d = matmul(8, 8, 8);
  Schedule s2({d.C});
  s2[d.C].tile(d.C.axis(0), d.C.axis(1), 4, 2);
  REQUIRE(to_string(lower(s2).body).find("if ") == std::string::npos);
}

TEST_CASE("te schedule: compute_at, cache_read, cache_write and rfactor", "[te][schedule]") {
  SECTION("softmax: the exp-sum computed per row inside the divide") {
    const std::int64_t rows = 5, cols = 13;
    const auto w = kernels_test::row_softmax(rows, cols);
    const Tensor &X = w.X, &S = w.S, &Y = w.Y;
    Schedule s({Y});
    s[S].compute_at(s[Y], Y.axis(0));
    const std::string text = to_string(lower(s).body);
    INFO(text);
    REQUIRE(text.find("    S[i] = 0.0\n    for j2 in range(13):\n        S[i] += exp(X[i][j2] - M[i])") != std::string::npos);
    check_schedule(s, {X}, cols);
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
    check_schedule(s, {A, B}, 1);
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
    check_schedule(s, {X, W}, 18);
    Schedule s2({Y});
    s2.cache_read(X, s2[Y], Y.axis(3));
    REQUIRE(to_string(lower(s2).body).find("XL = allocate((1, 2, 3, 3), local)") != std::string::npos);
    check_schedule(s2, {X, W}, 18);
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
    check_schedule(s, {A}, 29);
    Schedule s2({R});
    auto [ko2, ki2] = s2[R].split(k, 4);
    Tensor RF2 = s2.rfactor(R, ko2);  // the outer part: partial sums over the inner one
    s2[RF2].parallel(s2[RF2].leaf_axes()[0]);
    check_schedule(s2, {A}, 29);
    REQUIRE_THROWS_WITH(s2[R].vectorize(s2[R].leaf_axes().back()), Contains("vectorize: axis 'ko' of stage 'R' is a reduction axis"));
  }
  SECTION("cache_write of an elementwise compute, computed at the consumer's row") {
    Tensor A = placeholder("A", {5, 3});
    Tensor T = compute("T", {5, 3}, [&](Var i, Var j) { return exp(A(i, j)); });
    Schedule s({T});
    Tensor TL = s.cache_write(T);
    s[TL].compute_at(s[T], T.axis(0));
    REQUIRE(to_string(lower(s).body).find("TL = allocate((1, 3), local)") != std::string::npos);
    check_schedule(s, {A}, 1);
  }
}

// ---- fuzz ----------------------------------------------------------------------------------

TEST_CASE("te schedule: fuzz, random legal schedules equal the naive evaluation", "[te][schedule][fuzz]") {
  mls::Rng rng(2024, "te-fuzz");
  const std::vector<std::string> kPrimitives = {".split(", ".reorder(", ".fuse(", ".unroll(", ".vectorize(",
                                                ".parallel(", "compute_at(", "cache_read(", "cache_write(", "rfactor("};
  std::map<std::string, int> cases_with;  // how many cases used each primitive
  for (int iter = 0; iter < 200; ++iter) {
    kernels_test::fuzz::Case c = kernels_test::fuzz::random_case(rng);
    const auto& p = c.p;
    INFO("case " << iter << ": " << c.log);
    const auto in = random_inputs(p.inputs, static_cast<std::uint64_t>(iter));
    const LoweredFunc f = lower(c.s);
    INFO(to_string(f));
    const auto got = kernels_test::run_lowered(f, p.inputs, in, p.outputs);
    const auto want = run_naive(p.inputs, in, p.outputs);
    for (std::size_t i = 0; i < got.size(); ++i)
      require_close(got[i], want[i], reduction_tol(p.reduce) * static_cast<double>(p.reduce), p.outputs[i].name());
    for (const auto& name : kPrimitives) cases_with[name] += c.log.find(name) != std::string::npos;
  }
  for (const auto& name : kPrimitives) {
    INFO("cases with " << name << ": " << cases_with[name]);
    CHECK(cases_with[name] >= 10);
  }
}
