// Lab 4 part 2: tensor expressions, their naive evaluation, the default lowering, the printer and
// the interpreter, against hand-written loops (double precision) on random inputs; the slide's
// three matmul loop nests.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "te_check.hpp"
#include "te_workloads.hpp"

using namespace mls::kernels::te;
using kernels_test::numel;
using kernels_test::random_inputs;
using kernels_test::reduction_tol;
using kernels_test::require_close;
using kernels_test::run_naive;
using kernels_test::run_schedule;

namespace {
constexpr double kEps = std::numeric_limits<float>::epsilon();

/// Naive evaluation and the default schedule's loop nest on `in`, both observed (`what`, within
/// `tol`), and checked equal bit for bit (the same order of every operation). Returns the naive
/// outputs, for the oracle check against hand-written loops.
std::vector<std::vector<float>> run_both(const std::string& what, const std::vector<Tensor>& inputs,
                                         const std::vector<std::vector<float>>& in, const std::vector<Tensor>& outputs,
                                         double tol) {
  const auto naive = run_naive(inputs, in, outputs);
  const auto lowered = run_schedule(Schedule(outputs), inputs, in);
  kernels_test::observe_outputs(what + ", naive", outputs, naive, tol);
  kernels_test::observe_outputs(what + ", default loop nest", outputs, lowered, tol);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    INFO(what << ": " << outputs[i].name());
    REQUIRE(kernels_test::identical(lowered[i], naive[i]));
  }
  return naive;
}
}  // namespace

TEST_CASE("te: matmul C = A B and the slide's C = A^T B against a naive loop", "[te][expr][base]") {
  const std::vector<std::array<std::int64_t, 3>> shapes = {{1, 1, 1}, {7, 13, 5}, {16, 16, 16}, {3, 1, 17}, {2, 11, 1}};
  for (const auto& [m, n, kk] : shapes) {
    for (bool transposed : {false, true}) {
      INFO("m " << m << " n " << n << " k " << kk << " transposed " << transposed);
      Tensor A = transposed ? placeholder("A", {kk, m}) : placeholder("A", {m, kk});
      Tensor B = placeholder("B", {kk, n});
      IterVar k = reduce_axis(kk, "k");
      Tensor C = compute("C", {m, n}, [&](Var i, Var j) {
        return sum((transposed ? A(k, i) : A(i, k)) * B(k, j), {k});
      });
      const auto in = random_inputs({A, B}, static_cast<std::uint64_t>(m * 100 + n * 10 + kk));
      const double tol = reduction_tol(kk) * static_cast<double>(kk);
      const auto got = run_both("matmul " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(kk) +
                                    (transposed ? " (A^T)" : ""),
                                {A, B}, in, {C}, tol);
      MLS_ORACLE(std::vector<double> want(static_cast<std::size_t>(m * n));
                 for (std::int64_t i = 0; i < m; ++i) for (std::int64_t j = 0; j < n; ++j) {
                   double acc = 0;
                   for (std::int64_t p = 0; p < kk; ++p)
                     acc += double(in[0][static_cast<std::size_t>(transposed ? p * m + i : i * kk + p)]) *
                            in[1][static_cast<std::size_t>(p * n + j)];
                   want[static_cast<std::size_t>(i * n + j)] = acc;
                 })
      MLS_ORACLE_CHECK(require_close(got[0], want, tol, "C"));
    }
  }
}

TEST_CASE("te: elementwise chain E = D + (A + B) * C, exactly as a float loop", "[te][expr][base]") {
  for (std::int64_t n : {1, 13, 64}) {
    Tensor A = placeholder("A", {n}), B = placeholder("B", {n}), C = placeholder("C", {n}), D = placeholder("D", {n});
    Tensor E = compute("E", {n}, [&](Var i) { return D(i) + (A(i) + B(i)) * C(i); });
    const auto in = random_inputs({A, B, C, D}, 7);
    const auto got = run_both("chain n " + std::to_string(n), {A, B, C, D}, in, {E}, 0.0);
    MLS_ORACLE(std::vector<double> want;
               for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
                 want.push_back(in[3][i] + (in[0][i] + in[1][i]) * in[2][i]);)
    MLS_ORACLE_CHECK(require_close(got[0], want, 0.0, "E"));
  }
}

TEST_CASE("te: row softmax as three computes (max, exp-sum, divide)", "[te][expr][base]") {
  for (auto [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {3, 17}, {8, 64}}) {
    const auto w = kernels_test::row_softmax(rows, cols);
    const Tensor &X = w.X, &Y = w.Y;
    const auto in = random_inputs({X}, 11);
    const auto got = run_both("softmax " + std::to_string(rows) + "x" + std::to_string(cols), {X}, in, {Y},
                              reduction_tol(cols));
    MLS_ORACLE(std::vector<double> want;
               for (std::int64_t r = 0; r < rows; ++r) {
                 const float* x = in[0].data() + r * cols;
                 double m = *std::max_element(x, x + cols), s = 0;
                 for (std::int64_t c = 0; c < cols; ++c) s += std::exp(x[c] - m);
                 for (std::int64_t c = 0; c < cols; ++c) want.push_back(std::exp(x[c] - m) / s);
               })
    MLS_ORACLE_CHECK(require_close(got[0], want, reduction_tol(cols), "Y"));
  }
}

TEST_CASE("te: layernorm rows: mean, variance, normalised output", "[te][expr][base]") {
  for (auto [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {5, 7}, {4, 32}}) {
    const float eps = 1e-5f;
    Tensor X = placeholder("X", {rows, cols}), W = placeholder("W", {cols}), Bb = placeholder("Bb", {cols});
    IterVar c1 = reduce_axis(cols, "c1"), c2 = reduce_axis(cols, "c2");
    const float inv = 1.0f / static_cast<float>(cols);
    Tensor Mean = compute("Mean", {rows}, [&](Var r) { return sum(X(r, c1) * inv, {c1}); });
    Tensor Var_ = compute("Var", {rows}, [&](Var r) {
      Expr d = X(r, c2) - Mean(r);
      return sum(d * d * inv, {c2});
    });
    Tensor Y = compute("Y", {rows, cols}, [&](Var r, Var c) {
      return (X(r, c) - Mean(r)) * rsqrt(Var_(r) + eps) * W(c) + Bb(c);
    });
    const auto in = random_inputs({X, W, Bb}, 13);
    const std::string what = "layernorm " + std::to_string(rows) + "x" + std::to_string(cols);
    const auto stats = run_both(what, {X, W, Bb}, in, {Mean, Var_}, reduction_tol(cols));
    const auto y = run_both(what, {X, W, Bb}, in, {Y}, reduction_tol(cols) / std::sqrt(eps));
    MLS_ORACLE(std::vector<double> want_mean, want_var, want_y;
    for (std::int64_t r = 0; r < rows; ++r) {
      double m = 0, v = 0;
      for (std::int64_t c = 0; c < cols; ++c) m += in[0][static_cast<std::size_t>(r * cols + c)];
      m /= static_cast<double>(cols);
      for (std::int64_t c = 0; c < cols; ++c) v += std::pow(in[0][static_cast<std::size_t>(r * cols + c)] - m, 2);
      v /= static_cast<double>(cols);
      want_mean.push_back(m);
      want_var.push_back(v);
      for (std::int64_t c = 0; c < cols; ++c)
        want_y.push_back((in[0][static_cast<std::size_t>(r * cols + c)] - m) / std::sqrt(v + eps) *
                             in[1][static_cast<std::size_t>(c)] + in[2][static_cast<std::size_t>(c)]);
    })
    // y divides by sqrt(var + eps): its error grows with rstd <= 1/sqrt(eps).
    MLS_ORACLE_CHECK(require_close(stats[0], want_mean, reduction_tol(cols), "Mean");
                     require_close(stats[1], want_var, reduction_tol(cols), "Var");
                     const double rstd = 1.0 / std::sqrt(*std::min_element(want_var.begin(), want_var.end()) + eps);
                     require_close(y[0], want_y, reduction_tol(cols) * rstd, "Y"));
  }
}

TEST_CASE("te: direct 2-D convolution, NCHW, stride, padding by select", "[te][expr][base]") {
  struct P { std::int64_t n, c, h, w, o, kh, kw, stride, pad; };
  for (const P& p : {P{1, 1, 1, 1, 1, 1, 1, 1, 0}, P{2, 3, 7, 5, 4, 3, 2, 2, 0}, P{1, 2, 5, 5, 3, 3, 3, 1, 1},
                    P{1, 3, 11, 7, 2, 3, 3, 2, 1}}) {
    INFO("stride " << p.stride << " pad " << p.pad << " h " << p.h << " w " << p.w);
    const std::int64_t oh = (p.h + 2 * p.pad - p.kh) / p.stride + 1, ow = (p.w + 2 * p.pad - p.kw) / p.stride + 1;
    Tensor X = placeholder("X", {p.n, p.c, p.h, p.w}), Wt = placeholder("Wt", {p.o, p.c, p.kh, p.kw});
    IterVar rc = reduce_axis(p.c, "rc"), ry = reduce_axis(p.kh, "ry"), rx = reduce_axis(p.kw, "rx");
    Tensor Y = compute("Y", {p.n, p.o, oh, ow}, [&](Var b, Var o, Var y, Var x) {
      Expr iy = y * p.stride + ry - p.pad, ix = x * p.stride + rx - p.pad;
      Expr v = p.pad == 0 ? X(b, rc, iy, ix)
                          : select(iy >= 0 && iy < p.h && ix >= 0 && ix < p.w, X(b, rc, iy, ix), 0.0f);
      return sum(v * Wt(o, rc, ry, rx), {rc, ry, rx});
    });
    const auto in = random_inputs({X, Wt}, 17);
    const std::int64_t r = p.c * p.kh * p.kw;
    const double tol = reduction_tol(r) * static_cast<double>(r);
    const auto got = run_both("conv2d stride " + std::to_string(p.stride) + " pad " + std::to_string(p.pad) + " h " +
                                  std::to_string(p.h) + " w " + std::to_string(p.w),
                              {X, Wt}, in, {Y}, tol);
    MLS_ORACLE(std::vector<double> want;
    for (std::int64_t b = 0; b < p.n; ++b)
      for (std::int64_t o = 0; o < p.o; ++o)
        for (std::int64_t y = 0; y < oh; ++y)
          for (std::int64_t x = 0; x < ow; ++x) {
            double acc = 0;
            for (std::int64_t c = 0; c < p.c; ++c)
              for (std::int64_t i = 0; i < p.kh; ++i)
                for (std::int64_t j = 0; j < p.kw; ++j) {
                  const std::int64_t iy = y * p.stride + i - p.pad, ix = x * p.stride + j - p.pad;
                  if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) continue;
                  acc += double(in[0][static_cast<std::size_t>(((b * p.c + c) * p.h + iy) * p.w + ix)]) *
                         in[1][static_cast<std::size_t>(((o * p.c + c) * p.kh + i) * p.kw + j)];
                }
            want.push_back(acc);
          })
    MLS_ORACLE_CHECK(require_close(got[0], want, tol, "Y"));
  }
}

TEST_CASE("te: the other operators: // % on indices, min/max, abs, sqrt, select, float(i), products", "[te][expr][base]") {
  const std::int64_t n = 12;
  Tensor A = placeholder("A", {4, 3}), V = placeholder("V", {n});
  IterVar k = reduce_axis(3, "k"), q = reduce_axis(3, "q");
  Tensor G = compute("G", {n}, [&](Var i) { return A(i / 3, i % 3); });  // gather through // and %
  Tensor F = compute("F", {n}, [&](Var i) {
    return select(V(i) > 0.0f, sqrt(abs(V(i))), -min(V(i), max(V(n - 1 - i), to_float(i) * 0.125f)));
  });
  Tensor Mn = compute("Mn", {4}, [&](Var i) { return min_reduce(A(i, k), {k}); });
  Tensor Pr = compute("Pr", {4}, [&](Var i) { return reduce({BinaryOp::Mul, 1.0f}, A(i, q) + 2.0f, {q}); });
  const auto in = random_inputs({A, V}, 19);
  const auto got = run_both("other operators", {A, V}, in, {G, F, Mn, Pr}, 8 * kEps);
  MLS_ORACLE(std::vector<double> g, f, mn, pr;
  for (std::int64_t i = 0; i < n; ++i) {
    g.push_back(in[0][static_cast<std::size_t>(i)]);
    const float v = in[1][static_cast<std::size_t>(i)], w = in[1][static_cast<std::size_t>(n - 1 - i)];
    f.push_back(v > 0 ? std::sqrt(std::fabs(v)) : -std::min(v, std::max(w, float(i) * 0.125f)));
  }
  for (std::size_t i = 0; i < 4; ++i) {
    mn.push_back(std::min({in[0][i * 3], in[0][i * 3 + 1], in[0][i * 3 + 2]}));
    pr.push_back((in[0][i * 3] + 2.0) * (in[0][i * 3 + 1] + 2.0) * (in[0][i * 3 + 2] + 2.0));
  })
  MLS_ORACLE_CHECK(require_close(got[0], g, 8 * kEps, "G"); require_close(got[1], f, 8 * kEps, "F");
                   require_close(got[2], mn, 8 * kEps, "Mn"); require_close(got[3], pr, 8 * kEps, "Pr"));
}

TEST_CASE("te: printing expressions", "[te][expr][base]") {
  Tensor A = placeholder("A", {8, 8}), B = placeholder("B", {8, 8});
  IterVar k = reduce_axis(8, "k");
  Var y("y"), x("x");
  REQUIRE(to_string(A(k, y) * B(k, x)) == "A[k][y] * B[k][x]");
  REQUIRE(to_string(sum(A(k, y) * B(k, x), {k})) == "sum(A[k][y] * B[k][x], axis=[k])");
  REQUIRE(to_string(A(y * 8 + x, (y + 1) % 8)) == "A[y*8 + x][(y + 1) % 8]");
  REQUIRE(to_string((A(y, x) - 1.5f) / (A(x, y) + 2)) == "(A[y][x] - 1.5) / (A[x][y] + 2.0)");
  REQUIRE(to_string(select(y < 3 && x >= 0, exp(A(y, x)), max(A(y, x), 0.0f))) ==
          "select(y < 3 and x >= 0, exp(A[y][x]), max(A[y][x], 0.0))");
  REQUIRE(to_string(y / 2 - (x - 1)) == "y // 2 - (x - 1)");
}

TEST_CASE("te: bad expressions and computes are named errors", "[te][expr][errors][base]") {
  Tensor A = placeholder("A", {4, 4});
  IterVar k = reduce_axis(4, "k");
  LAB4_REQUIRE_ERROR(placeholder("P", {3, 0}), "placeholder 'P': shape [3, 0] must have extents >= 1");
  LAB4_REQUIRE_ERROR(placeholder("P", {}), "placeholder 'P': the shape is empty");
  LAB4_REQUIRE_ERROR(A(1), "A(...): 1 indices for a 2-D tensor of shape [4, 4]");
  LAB4_REQUIRE_ERROR(A(1, 0.5f), "A(...): index 1 is float, expected an int expression");
  LAB4_REQUIRE_ERROR(A(0, 0) % 2, "'%' needs int operands, got float");
  LAB4_REQUIRE_ERROR(A(0, 0) + (A(0, 0) < 1.0f), "'+' needs int or float operands, got float and bool");
  LAB4_REQUIRE_ERROR(select(A(0, 0), 1.0f, 2.0f), "select: the condition must be bool, got float");
  LAB4_REQUIRE_ERROR(reduce_axis(0, "r"), "reduce_axis: extent 0 of 'r' must be >= 1");
  LAB4_REQUIRE_ERROR(sum(A(0, 0), {}), "reduce: no reduction axes given");
  LAB4_REQUIRE_ERROR(sum(A(0, 0), {k, k}), "reduce: axis 'k' is given twice");
  LAB4_REQUIRE_ERROR(reduce({BinaryOp::Sub, 0.0f}, A(0, k), {k}), "reduce: combiner '-' must be");
  LAB4_REQUIRE_ERROR(compute("C", {4}, [&](Var i) { return sum(A(i, k), {k}) + 1.0f; }),
                      "compute 'C': a reduction must be the whole body");
  LAB4_REQUIRE_ERROR(compute("C", {4}, [&](Var i) { return A(i, k); }),
                      "compute 'C': variable 'k' is neither an axis of 'C' nor a reduction axis of its body");
  LAB4_REQUIRE_ERROR(compute("C", {4}, [&](Var i) { return i * 2; }), "compute 'C': the body must be float, got int");
  LAB4_REQUIRE_ERROR(compute("C", {4, 4}, [&](Var i) { return A(i, i); }),
                      "compute 'C': f gave no expression (does it take 2 indices");
  LAB4_REQUIRE_ERROR(compute("C", {4}, [&](Var i) { return A(i, 0); }, {"a", "b"}),
                      "compute 'C': 2 axis names for 1 dimensions");
  compute("S1", {4}, [&](Var i) { return sum(A(i, k), {k}); });
  LAB4_REQUIRE_ERROR(compute("S2", {4}, [&](Var i) { return sum(A(i, k), {k}); }),
                      "compute 'S2': reduction axis 'k' already belongs to compute 'S1'; make one reduce_axis per compute");
  LAB4_REQUIRE_ERROR(A.axis(0), "axis: 'A' is a placeholder");
  Tensor E = compute("E", {4}, [&](Var i) { return A(i, i); });
  LAB4_REQUIRE_ERROR(E.axis(1), "axis: 'E' has 1 axes, asked for axis 1");
  LAB4_REQUIRE_ERROR(E.reduce_axis(0), "reduce_axis: 'E' is not a reduction");
}

TEST_CASE("te: naive evaluation and the interpreter reject bad bindings and out-of-bounds loads", "[te][interp][errors][base]") {
  Tensor A = placeholder("A", {4});
  Tensor B = compute("B", {4}, [&](Var i) { return A(i + 1); });  // reads A[4]
  Tensor C = compute("C", {4}, [&](Var i) { return A(i) * 2.0f; });
  std::vector<float> a(4, 1.0f), b(4), small(3);
  Bindings ok;
  ok.bind(A, a).bind(B, b);
  LAB4_REQUIRE_ERROR(evaluate_naive({B}, ok), "evaluate_naive: load A[4] is out of bounds of shape [4]");
  LAB4_REQUIRE_ERROR(interpret(lower(Schedule({B})), ok), "interpret: load A[4] is out of bounds of shape [4]");
  Bindings missing;
  missing.bind(C, b);
  LAB4_REQUIRE_ERROR(evaluate_naive({C}, missing), "evaluate_naive: placeholder 'A' is not bound");
  LAB4_REQUIRE_ERROR(interpret(lower(Schedule({C}), "f"), missing), "interpret: argument 'A' of 'f' is not bound");
  LAB4_REQUIRE_ERROR(interpret(lower(Schedule({C})).body, missing), "interpret: buffer 'A' is not bound");
  Bindings wrong;
  wrong.bind(A, small).bind(C, b);
  LAB4_REQUIRE_ERROR(evaluate_naive({C}, wrong), "evaluate_naive: buffer 'A' is bound to 3 floats, its shape [4] needs 4");
  LAB4_REQUIRE_ERROR(interpret(lower(Schedule({C})), wrong), "interpret: buffer 'A' is bound to 3 floats, its shape [4] needs 4");
  LAB4_REQUIRE_ERROR(evaluate_naive({C}, Bindings().bind(A, a)), "evaluate_naive: output 'C' is not bound");
  // Hand-made IR: a loop variable bound twice, a variable bound by no loop, integer division by zero.
  Var i("i");
  Stmt inner = make_store(C.buffer(), {Expr(i)}, Expr(1.0f));
  Stmt twice = make_for(i, 0, 4, ForKind::Serial, make_for(i, 0, 4, ForKind::Serial, inner));
  LAB4_REQUIRE_ERROR(interpret(twice, ok.bind(C, b)), "interpret: loop variable 'i' is bound twice in nested loops");
  LAB4_REQUIRE_ERROR(interpret(inner, ok), "interpret: variable 'i' is not bound by any loop around it");
  Stmt div0 = make_for(i, 0, 4, ForKind::Serial, make_store(C.buffer(), {Expr(i) / (Expr(i) - Expr(i))}, Expr(1.0f)));
  LAB4_REQUIRE_ERROR(interpret(div0, ok), "integer division by zero");
}

TEST_CASE("te: the slide's three matmul loop nests, printed and equal", "[te][slide][split]") {
  // C[y][x] = sum_k A[k][y] * B[k][x]; printed at the slide's 1024, interpreted at 64 and 40.
  using kernels_test::slide_plain;
  using kernels_test::slide_tensorized;
  using kernels_test::slide_tiled;
  const auto big = kernels_test::slide_matmul(1024);
  REQUIRE(to_string(lower(slide_plain(big)).body) ==
          "for y in range(1024):\n"
          "    for x in range(1024):\n"
          "        C[y][x] = 0.0\n"
          "        for k in range(1024):\n"
          "            C[y][x] += A[k][y] * B[k][x]\n");
  REQUIRE(to_string(lower(slide_tiled(big)).body) ==
          "for yo in range(128):\n"
          "    for xo in range(128):\n"
          "        for yi in range(8):\n"
          "            for xi in range(8):\n"
          "                C[yo*8 + yi][xo*8 + xi] = 0.0\n"
          "        for ko in range(128):\n"
          "            for yi in range(8):\n"
          "                for xi in range(8):\n"
          "                    for ki in range(8):\n"
          "                        C[yo*8 + yi][xo*8 + xi] += A[ko*8 + ki][yo*8 + yi] * B[ko*8 + ki][xo*8 + xi]\n");
  const std::string t3 = to_string(lower(slide_tensorized(big), "matmul"));
  REQUIRE(t3 ==
          "def matmul(A: float32[1024, 1024], B: float32[1024, 1024], C: float32[1024, 1024]):\n"
          "    for yo in range(128):\n"
          "        for xo in range(128):\n"
          "            CL = allocate((8, 8), local)\n"
          "            fill_zero8x8(CL[0:8][0:8])\n"
          "            for ko in range(128):\n"
          "                BL = allocate((8, 8), local)\n"
          "                AL = allocate((8, 8), local)\n"
          "                dma_copy2d(AL[0:8][0:8], A[ko*8:ko*8 + 8][yo*8:yo*8 + 8])\n"
          "                dma_copy2d(BL[0:8][0:8], B[ko*8:ko*8 + 8][xo*8:xo*8 + 8])\n"
          "                fused_gemm8x8_add(CL[0:8][0:8], AL[0:8][0:8], BL[0:8][0:8])\n"
          "            dma_copy2d(C[yo*8:yo*8 + 8][xo*8:xo*8 + 8], CL[0:8][0:8])\n");
  for (std::int64_t n : {64, 40}) {
    const auto m = kernels_test::slide_matmul(n);
    const auto in = random_inputs({m.A, m.B}, static_cast<std::uint64_t>(n));
    const auto plain = run_schedule(slide_plain(m), {m.A, m.B}, in);
    const auto tiled = run_schedule(slide_tiled(m), {m.A, m.B}, in);
    const auto tensorized = run_schedule(slide_tensorized(m), {m.A, m.B}, in);
    const std::string n_is = "slide matmul n " + std::to_string(n);
    kernels_test::observe_outputs(n_is + ", tiled", {m.C}, tiled);
    kernels_test::observe_outputs(n_is + ", tensorized", {m.C}, tensorized);
    // One order of additions for every element in all four: the results are identical.
    REQUIRE(kernels_test::identical(tiled[0], plain[0]));
    REQUIRE(kernels_test::identical(tensorized[0], plain[0]));
    MLS_ORACLE(const auto naive = run_naive({m.A, m.B}, in, {m.C});)
    MLS_ORACLE_CHECK(REQUIRE(kernels_test::identical(plain[0], naive[0])));
  }
}
