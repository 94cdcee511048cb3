// Lab 4 part 2: code generation (mls/kernels/codegen.hpp). The small pure functions of the code
// generator; the slide's three nests, every primitive and the workloads (matmul in three layouts,
// an elementwise chain, softmax and layernorm rows, a 2-D convolution) compiled with -Werror and
// equal to the interpreter bit for bit (-ffp-contract=off) and to the naive evaluation within
// rounding (default flags); parallel loops at 1 and 2 threads; every vector path; a register-blocked
// micro-kernel; the named errors. Kernels compile into this process's own cache folder.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen_check.hpp"
#include "codegen_internal.hpp"
#include "jit_test_util.hpp"
#include "mls/common/file.hpp"
#include "mls/common/rng.hpp"
#include "te_workloads.hpp"

using namespace mls::kernels::te;
using kernels_test::codegen_jit_options;
using kernels_test::random_inputs;
using kernels_test::reduction_tol;
using kernels_test::require_close;
using kernels_test::require_identical;
using kernels_test::run_compiled;
using kernels_test::run_lowered;
using kernels_test::run_naive;
namespace cd = mls::kernels::te::codegen_detail;

namespace {

/// A schedule to compile: its function, inputs and outputs, and the size of its largest reduction.
struct Job {
  LoweredFunc f;
  std::vector<Tensor> inputs, outputs;
  std::int64_t reduce = 1;
};

Job job(const Schedule& s, const std::string& name, std::vector<Tensor> inputs, std::int64_t reduce = 1) {
  return {lower(s, name), std::move(inputs), s.outputs(), reduce};
}

/// Compiles every job in one unit with exact float semantics and checks each against the
/// interpreter bit for bit at 1 and 2 threads; then compiles them again with the default flags
/// (FMA allowed) and checks them against the naive evaluation within rounding. The compiled
/// results are observed (within the rounding of the job's reduction). Returns the source.
std::string check_jobs(const std::vector<Job>& jobs, const CodegenOptions& options = {}, bool also_fast = true) {
  std::vector<LoweredFunc> fs;
  for (const auto& j : jobs) fs.push_back(j.f);
  const std::vector<JitKernel> exact = compile_all(fs, options, codegen_jit_options(true));
  const std::vector<JitKernel> fast = also_fast ? compile_all(fs, options, codegen_jit_options(false, "-O3"))
                                                : std::vector<JitKernel>{};
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    INFO(to_string(j.f));
    const auto in = random_inputs(j.inputs, 7 + i);
    const double tol = reduction_tol(j.reduce) * static_cast<double>(j.reduce);
    MLS_ORACLE(const auto want = run_lowered(j.f, j.inputs, in, j.outputs);)
    for (int threads : {1, 2}) {
      const auto got = run_compiled(exact[i], j.inputs, in, j.outputs, threads);
      kernels_test::observe_outputs(j.f.name + " at " + std::to_string(threads) + " threads", j.outputs, got, tol);
      MLS_ORACLE_CHECK(for (std::size_t o = 0; o < got.size(); ++o) require_identical(
          got[o], want[o], j.f.name + " " + j.outputs[o].name() + " at " + std::to_string(threads) + " threads"));
    }
    if (!also_fast) continue;
    const auto got = run_compiled(fast[i], j.inputs, in, j.outputs, 2);
    kernels_test::observe_outputs(j.f.name + " (-O3)", j.outputs, got, tol);
    MLS_ORACLE(const auto naive = run_naive(j.inputs, in, j.outputs);)
    MLS_ORACLE_CHECK(for (std::size_t o = 0; o < got.size(); ++o) require_close(got[o], naive[o], tol, j.f.name + " (-O3)"));
  }
  return exact.front().source();
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct Mm {
  Tensor A, B, C;
  IterVar k;
};
/// C = op(A) op(B): A m x k (or k x m when ta), B k x n (or n x k when tb).
Mm matmul(std::int64_t m, std::int64_t n, std::int64_t kk, bool ta = false, bool tb = false) {
  Mm r;
  r.A = ta ? placeholder("A", {kk, m}) : placeholder("A", {m, kk});
  r.B = tb ? placeholder("B", {n, kk}) : placeholder("B", {kk, n});
  r.k = reduce_axis(kk, "k");
  r.C = compute("C", {m, n}, [&](Var y, Var x) {
    return sum((ta ? r.A(r.k, y) : r.A(y, r.k)) * (tb ? r.B(x, r.k) : r.B(r.k, x)), {r.k});
  }, {"y", "x"});
  return r;
}
}  // namespace

// ---- the pure functions ------------------------------------------------------------------------------

TEST_CASE("codegen: C identifiers and literals", "[codegen][unit][base]") {
  CHECK(c_identifier("yo") == "yo");
  CHECK(c_identifier("y.x fused") == "y_x_fused");
  CHECK(c_identifier("3d") == "_3d");
  CHECK(c_identifier("") == "_");
  CHECK(c_identifier("int") == "int_");
  CHECK(c_identifier("main") == "main_");
  CHECK(c_identifier("strides") == "strides_");
  CHECK(c_identifier("mls_t") == "mls_t_");
  CHECK(cd::c_int_literal(12) == "12");
  CHECK(cd::c_int_literal(-3) == "-3");
  CHECK(cd::c_int_literal(4294967296LL) == "4294967296LL");
  CHECK(cd::c_float_literal(2.0f) == "2.0f");
  CHECK(cd::c_float_literal(0.1f) == "0.1f");
  CHECK(cd::c_float_literal(-0.0f) == "-0.0f");
  CHECK(cd::c_float_literal(1e20f) == "1e+20f");
  CHECK(cd::c_float_literal(INFINITY) == "__builtin_inff()");
  CHECK(cd::c_float_literal(-INFINITY) == "-__builtin_inff()");
  CHECK(cd::c_float_literal(NAN) == "__builtin_nanf(\"\")");
  // Every literal reads back to its float (random bit patterns, NaN and infinities left out).
  mls::Rng rng(5, "literals");
  for (int i = 0; i < 2000; ++i) {
    const auto bits = static_cast<std::uint32_t>(rng.uniform(0.0, 4294967295.0));
    const float v = std::bit_cast<float>(bits);
    if (!std::isfinite(v)) continue;
    std::string s = cd::c_float_literal(v);
    INFO(s);
    REQUIRE(s.back() == 'f');
    s.pop_back();
    REQUIRE(std::bit_cast<std::uint32_t>(std::strtof(s.c_str(), nullptr)) == bits);
  }
}

TEST_CASE("codegen: contiguity, interval conditions and disjoint writes", "[codegen][unit][base]") {
  Var i("i"), j("j"), v("v");
  const VarNode* vn = v.get();
  CHECK(cd::contiguous_in({Expr(i), Expr(j) * 8 + Expr(v)}, vn));
  CHECK(cd::contiguous_in({Expr(v) + 3}, vn));
  CHECK_FALSE(cd::contiguous_in({Expr(v), Expr(j)}, vn));          // v in the outer dimension
  CHECK_FALSE(cd::contiguous_in({Expr(i), Expr(v) * 2}, vn));      // stride 2
  CHECK_FALSE(cd::contiguous_in({Expr(i), Expr(j)}, vn));          // does not move with v
  CHECK_FALSE(cd::contiguous_in({Expr(i), Expr(v) / 2 + Expr(v)}, vn));  // v in a floor division
  CHECK(cd::interval_condition(Expr(i) * 4 + Expr(v) < 13, vn));
  CHECK(cd::interval_condition(Expr(v) >= 1 && Expr(v) * 2 - Expr(j) < 7 && Expr(i) < 3, vn));
  CHECK_FALSE(cd::interval_condition(eq(Expr(v), Expr(3)), vn));
  CHECK_FALSE(cd::interval_condition(Expr(v) % 3 < 2, vn));
  CHECK_FALSE(cd::interval_condition(Expr(v) < 3 || Expr(v) > 5, vn));
  CHECK(cd::interval_condition(eq(Expr(i), Expr(3)), vn));  // not on v: the same at every lane
  detail::Ranges inner{{j.get(), {0, 7}}};
  CHECK(cd::writes_disjoint({Expr(v) * 8 + Expr(j)}, {}, vn, inner));                // rows of 8
  CHECK_FALSE(cd::writes_disjoint({Expr(v) * 4 + Expr(j)}, {}, vn, inner));           // overlapping
  CHECK(cd::writes_disjoint({Expr(j), Expr(v) + Expr(i)}, {}, vn, inner));            // i fixed
  CHECK_FALSE(cd::writes_disjoint({Expr(i), Expr(j)}, {}, vn, inner));                // every v the same
  CHECK_FALSE(cd::writes_disjoint({Expr(v) * 8}, {8}, vn, inner));                    // a window of 9
  CHECK(cd::writes_disjoint({Expr(v) * 8}, {7}, vn, inner));
  CHECK_FALSE(cd::writes_disjoint({Expr(v) * 8 + Expr(j) * Expr(i)}, {}, vn, inner));  // i and j mixed
  CHECK(cd::writes_disjoint({Expr(v) / 7, Expr(v) % 7}, {}, vn, inner));              // a fused loop
  CHECK(cd::writes_disjoint({Expr(v) / 7 * 8 + Expr(j), Expr(v) % 7}, {}, vn, inner));
  CHECK_FALSE(cd::writes_disjoint({Expr(v) / 7, Expr(j)}, {}, vn, inner));            // v % 7 not told apart
  CHECK_FALSE(cd::writes_disjoint({Expr(v) / 7 + Expr(v) % 7}, {}, vn, inner));
  CHECK(cd::wrap({"a + b", 12}, 13) == "(a + b)");
  CHECK(cd::wrap({"a * b", 13}, 13) == "a * b");
}

TEST_CASE("codegen: intrinsic sources", "[codegen][unit][tensorize][base]") {
  const Intrinsic g = gemm_intrinsic(4, 4, 4);
  CHECK(has(intrinsic_source(g, CallPart::Update), "acc += ptrs[1]"));
  CHECK(has(intrinsic_source(g, CallPart::Reset), "= 0.0f"));
  const Intrinsic c = copy_intrinsic({2, 3, 4});
  CHECK(has(intrinsic_source(c, CallPart::Update), "ptrs[0][t0 * strides[0] + t1 * strides[1] + t2 * strides[2]] = "
                                                   "ptrs[1][t0 * strides[3] + t1 * strides[4] + t2 * strides[5]]"));
  LAB4_REQUIRE_ERROR(intrinsic_source(c, CallPart::Reset), "intrinsic_source: copy intrinsic 'copy2x3x4' has no reset");
  Intrinsic own = g;
  own.update_source = "ptrs[0][0] = 1.0f;\n";
  CHECK(intrinsic_source(own, CallPart::Update) == own.update_source);
  const Intrinsic r = gemm_regblock_intrinsic(4, 32, 16, 16);
  CHECK(r.name == "gemm4x32x16_regblock");
  CHECK(r.tile == std::vector<std::int64_t>{4, 32, 16});
  CHECK(has(r.update_source, "vec acc[4][2];"));
  CHECK_FALSE(has(r.update_source, "__builtin_prefetch(out"));
  const Intrinsic pc = gemm_regblock_intrinsic(4, 32, 16, 16, true);
  CHECK(pc.name == "gemm4x32x16_regblock_pc");
  CHECK(has(pc.update_source, "__builtin_prefetch(out + i * strides[0] + v * 16, 1);"));
  CHECK(has(pc.update_source, "acc[i][v] = c + acc[i][v];"));
  LAB4_REQUIRE_ERROR(gemm_regblock_intrinsic(4, 24, 16, 16),
                      "gemm_regblock_intrinsic: tile 4x24x16 needs mr, k >= 1 and nr a positive multiple of 16 lanes");
  LAB4_REQUIRE_ERROR(gemm_regblock_intrinsic(4, 24, 16, 3), "gemm_regblock_intrinsic: lanes 3 is not 4, 8 or 16");
}

// ---- whole kernels -----------------------------------------------------------------------------------

TEST_CASE("codegen: the slide's three matmul nests compile and equal the interpreter", "[codegen][slide][kernels]") {
  for (std::int64_t n : {64, 40}) {
    const auto m = kernels_test::slide_matmul(n);
    const std::vector<Job> jobs = {job(kernels_test::slide_plain(m), "plain", {m.A, m.B}, n),
                                   job(kernels_test::slide_tiled(m), "tiled", {m.A, m.B}, n),
                                   job(kernels_test::slide_tensorized(m), "tensorized", {m.A, m.B}, n)};
    const std::string src = check_jobs(jobs);
    INFO(src);
    CHECK(has(src, "for (std::int64_t yo = 0; yo < " + std::to_string(n / 8) + "; ++yo) {"));
    CHECK(has(src, "C[y*" + std::to_string(n) + " + x] += A[k*" + std::to_string(n) + " + y] * B[k*" +
                       std::to_string(n) + " + x];"));
    CHECK(has(src, "fused_gemm8x8_add(ptrs, strides, extents);"));
    CHECK(has(src, "dma_copy2d(ptrs, strides, extents);"));
    CHECK(has(src, "alignas(64) float AL[64];  // AL: (8, 8), local"));
    CHECK(has(src, "extern \"C\" void tensorized(float* const* args, mls_parallel_for_fn, void*) {"));
    // The three give the naive product exactly (one order of additions everywhere).
    const auto in = random_inputs({m.A, m.B}, 3);
    MLS_ORACLE(const auto naive = run_naive({m.A, m.B}, in, {m.C});)
    std::vector<LoweredFunc> fs = {jobs[0].f, jobs[1].f, jobs[2].f};
    for (const auto& k : compile_all(fs, {}, codegen_jit_options(true))) {
      const auto got = run_compiled(k, {m.A, m.B}, in, {m.C});
      kernels_test::observe_outputs("slide " + k.func().name + " n " + std::to_string(n) + ", exact", {m.C}, got);
      MLS_ORACLE_CHECK(require_identical(got[0], naive[0], k.func().name));
    }
  }
}

TEST_CASE("codegen: every primitive's code compiles with -Wall -Wextra -Werror and equals the interpreter",
          "[codegen][primitives][kernels]") {
  std::vector<Job> jobs;
  auto mm = [] { return matmul(13, 7, 11); };
  {
    Mm m = mm();
    Schedule s({m.C});
    s[m.C].split(m.C.axis(1), 3);
    jobs.push_back(job(s, "split", {m.A, m.B}, 11));
  }
  {
    Mm m = mm();
    Schedule s({m.C});
    TileAxes t = s[m.C].tile(m.C.axis(0), m.C.axis(1), 4, 3);
    s[m.C].reorder({t.outer1, t.outer0, m.k, t.inner0, t.inner1});
    jobs.push_back(job(s, "tile_reorder", {m.A, m.B}, 11));
  }
  {
    Mm m = mm();
    Schedule s({m.C});
    const IterVar f = s[m.C].fuse(m.C.axis(0), m.C.axis(1));
    s[m.C].parallel(f);
    jobs.push_back(job(s, "fuse_parallel", {m.A, m.B}, 11));
  }
  {
    Mm m = mm();
    Schedule s({m.C});
    auto [ko, ki] = s[m.C].split(m.k, 4);
    s[m.C].unroll(ki);
    s[m.C].vectorize(m.C.axis(1));  // not innermost: the k loops run inside each chunk
    jobs.push_back(job(s, "unroll_vectorize", {m.A, m.B}, 11));
  }
  {
    Mm m = mm();
    Schedule s({m.C});
    TileAxes t = s[m.C].tile(m.C.axis(0), m.C.axis(1), 4, 4);
    s.cache_read(m.B, s[m.C], t.outer1);
    s[m.C].parallel(t.outer0);
    jobs.push_back(job(s, "cache_read", {m.A, m.B}, 11));
  }
  {
    Mm m = mm();
    Schedule s({m.C});
    Tensor CL = s.cache_write(m.C);
    s[CL].compute_at(s[m.C], m.C.axis(0));
    s[m.C].vectorize(m.C.axis(1));
    jobs.push_back(job(s, "cache_write_compute_at", {m.A, m.B}, 11));
  }
  {
    auto w = kernels_test::rfactor_row_sum();
    jobs.push_back(job(w.s, "rfactor", {w.A}, 29));
  }
  {
    Mm m = matmul(12, 8, 6);
    Schedule s({m.C});
    TileAxes t = s[m.C].tile(m.C.axis(0), m.C.axis(1), 4, 4);
    s[m.C].tensorize(t.inner0, gemm_intrinsic(4, 4, 6));
    jobs.push_back(job(s, "tensorize_gemm", {m.A, m.B}, 6));
  }
  {
    Tensor A = placeholder("A", {6, 8});
    Tensor T = compute("T", {6, 8}, [&](Var i, Var j) { return A(i, j); });
    Schedule s({T});
    TileAxes t = s[T].tile(T.axis(0), T.axis(1), 3, 4);
    s[T].tensorize(t.inner0, copy_intrinsic({3, 4}));
    jobs.push_back(job(s, "tensorize_copy", {A}, 1));
  }
  {  // Not a primitive: floor division and modulo of indices that may be negative.
    Tensor A = placeholder("A", {5});
    Tensor T = compute("T", {9}, [&](Var i) { return A((i - 4) % 5) + A((Expr(i) - 7) / 2 + 4); });
    jobs.push_back(job(Schedule({T}), "floor_div_mod", {A}));
  }
  const std::string src = check_jobs(jobs);
  INFO(src);
  CHECK(has(src, "A[mls_floormod(i - 4, 5)] + A[mls_floordiv(i - 7, 2) + 4]"));
  CHECK(has(src, "#pragma GCC unroll 4"));
  CHECK(has(src, "mls_parallel(parallel_for, host, 91, y_x_body);"));
  CHECK(has(src, "// x in vectorized(7): chunks of 4 lanes (mls_f32x4), then a scalar tail"));
  CHECK(has(src, "// ki in vectorized(8): a scalar loop, its store to 'R_rf' is not contiguous in ki"));
  CHECK(has(src, "gemm4x4x6_add(ptrs, strides, extents);"));
  CHECK(has(src, "fill_zero4x4(ptrs, strides, extents);"));
  CHECK(has(src, "copy3x4(ptrs, strides, extents);"));
}

TEST_CASE("codegen: matmul layouts, elementwise chain, softmax, layernorm and conv2d", "[codegen][workloads][kernels]") {
  std::vector<Job> jobs;
  for (const auto& [ta, tb] : {std::pair{false, false}, {true, false}, {false, true}}) {
    for (const auto& [m, n, k] : {std::tuple{1, 1, 1}, {17, 31, 13}, {16, 33, 7}}) {
      Mm mm = matmul(m, n, k, ta, tb);
      Schedule s({mm.C});
      TileAxes t = s[mm.C].tile(mm.C.axis(0), mm.C.axis(1), 4, 16);
      auto [ko, ki] = s[mm.C].split(mm.k, 4);
      s[mm.C].reorder({t.outer0, t.outer1, ko, t.inner0, ki, t.inner1});
      s[mm.C].vectorize(t.inner1);
      s[mm.C].parallel(t.outer0);
      s[mm.C].unroll(ki);
      jobs.push_back(job(s, std::string("mm_") + (ta ? "t" : "n") + (tb ? "t" : "n") + "_" + std::to_string(m), {mm.A, mm.B}, k));
    }
  }
  {  // E = D + (A + B) * C, elementwise, vectorized rows of a prime width.
    const std::int64_t r = 5, c = 37;
    Tensor A = placeholder("A", {r, c}), B = placeholder("B", {r, c}), C = placeholder("C", {r, c}), D = placeholder("D", {r, c});
    Tensor E = compute("E", {r, c}, [&](Var i, Var j) { return D(i, j) + (A(i, j) + B(i, j)) * C(i, j); });
    Schedule s({E});
    s[E].vectorize(E.axis(1));
    s[E].parallel(E.axis(0));
    jobs.push_back(job(s, "chain", {A, B, C, D}));
  }
  {  // softmax rows: max, exp-sum computed per row inside the divide, vectorized divide.
    const std::int64_t rows = 7, cols = 53;
    const auto w = kernels_test::row_softmax(rows, cols);
    const Tensor &X = w.X, &S = w.S, &Y = w.Y;
    Schedule s({Y});
    s[S].compute_at(s[Y], Y.axis(0));
    s[Y].vectorize(Y.axis(1));
    s[Y].parallel(Y.axis(0));
    jobs.push_back(job(s, "softmax", {X}, cols));
  }
  {  // layernorm rows: mean, variance, normalised output.
    const std::int64_t rows = 3, cols = 41;
    Tensor X = placeholder("X", {rows, cols});
    IterVar c1 = reduce_axis(cols, "c1"), c2 = reduce_axis(cols, "c2");
    const float inv = 1.0f / static_cast<float>(cols);
    Tensor Mean = compute("Mean", {rows}, [&](Var r) { return sum(X(r, c1) * inv, {c1}); });
    Tensor V = compute("V", {rows}, [&](Var r) { Expr d = X(r, c2) - Mean(r); return sum(d * d * inv, {c2}); });
    Tensor Y = compute("Y", {rows, cols}, [&](Var r, Var c) { return (X(r, c) - Mean(r)) * rsqrt(V(r) + 1e-5f); });
    Schedule s({Y});
    s[V].compute_at(s[Y], Y.axis(0));
    s[Y].vectorize(Y.axis(1));
    jobs.push_back(job(s, "layernorm", {X}, cols));
  }
  {  // conv2d NCHW, stride 2, padding 1 by select, input window cached per output row.
    const std::int64_t c = 3, h = 11, o = 4, kh = 3, stride = 2, pad = 1, oh = (h + 2 * pad - kh) / stride + 1;
    Tensor X = placeholder("X", {1, c, h, h}), W = placeholder("W", {o, c, kh, kh});
    IterVar rc = reduce_axis(c, "rc"), ry = reduce_axis(kh, "ry"), rx = reduce_axis(kh, "rx");
    Tensor Y = compute("Y", {1, o, oh, oh}, [&](Var b, Var oo, Var y, Var x) {
      Expr iy = y * stride + ry - pad, ix = x * stride + rx - pad;
      return sum(select(iy >= 0 && iy < h && ix >= 0 && ix < h, X(b, rc, iy, ix), 0.0f) * W(oo, rc, ry, rx), {rc, ry, rx});
    }, {"b", "o", "y", "x"});
    Schedule s({Y});
    s[Y].reorder({Y.axis(0), Y.axis(1), Y.axis(2), rc, ry, rx, Y.axis(3)});
    s[Y].vectorize(Y.axis(3));
    s[Y].parallel(Y.axis(1));
    jobs.push_back(job(s, "conv2d", {X, W}, c * kh * kh));
  }
  const std::string src = check_jobs(jobs);
  INFO(src);
  CHECK(has(src, "mls_vexp("));
  CHECK(has(src, "// lane by lane"));  // the conv's padded loads, the transposed B's gathers
}

TEST_CASE("codegen: parallel loops at 1 and 2 threads, racy ones run serially", "[codegen][parallel][base]") {
  // The exp-sum S is computed inside Y's column loop, which is parallel: every column's iteration
  // recomputes S[i] from 0, so the loop must run serially (and still give the right result).
  const std::int64_t rows = 4, cols = 23;
  Tensor X = placeholder("X", {rows, cols});
  IterVar j2 = reduce_axis(cols, "j2");
  Tensor S = compute("S", {rows}, [&](Var i) { return sum(exp(X(i, j2)), {j2}); });
  Tensor Y = compute("Y", {rows, cols}, [&](Var i, Var j) { return exp(X(i, j)) / S(i); });
  Schedule racy({Y});
  racy[S].compute_at(racy[Y], Y.axis(1));
  racy[Y].parallel(Y.axis(1));
  Schedule rows_par({Y});
  rows_par[S].compute_at(rows_par[Y], Y.axis(0));
  rows_par[Y].parallel(Y.axis(0));
  const std::string src = check_jobs({job(racy, "racy", {X}, cols), job(rows_par, "rows", {X}, cols)});
  INFO(src);
  CHECK(has(src, "// j in parallel(23): run serially, iterations may write the same element of 'S'"));
  CHECK(has(src, "mls_parallel(parallel_for, host, 4, i_body);"));
}

TEST_CASE("codegen: vector lanes 1, 4, 8 and 16 and every vector path give the interpreter's result",
          "[codegen][vectorize]") {
  std::vector<Job> jobs;
  {  // Contiguous loads, broadcasts, a tail guard inside the chunk (split by 5 of 23), min/max.
    Tensor A = placeholder("A", {3, 23}), B = placeholder("B", {23});
    Tensor T = compute("T", {3, 23}, [&](Var i, Var j) { return max(A(i, j), B(j)) - min(A(i, 0), -abs(B(j))); });
    Schedule s({T});
    auto [jo, ji] = s[T].split(T.axis(1), 5);
    s[T].vectorize(ji);  // chunks of 4 of 5; the guard jo*5 + ji < 23 depends on ji
    jobs.push_back(job(s, "guard", {A, B}));
  }
  {  // A strided load (gather) and a float of an index.
    Tensor A = placeholder("A", {19, 6});
    Tensor T = compute("T", {6, 19}, [&](Var i, Var j) { return A(j, i) * to_float(j * 2 - i) + sqrt(abs(A(j, i))); });
    Schedule s({T});
    s[T].vectorize(T.axis(1));
    jobs.push_back(job(s, "gather", {A}));
  }
  {  // A select on a uniform condition in the vector body, and on the lanes.
    Tensor A = placeholder("A", {4, 21});
    Tensor T = compute("T", {4, 21}, [&](Var i, Var j) {
      return select(i < 2, A(i, j), -A(i, j)) + select(j < 10, A(i, j), 1.0f);
    });
    Schedule s({T});
    s[T].vectorize(T.axis(1));
    jobs.push_back(job(s, "select", {A}));
  }
  for (int lanes : {1, 4, 8, 16}) {
    CodegenOptions o;
    o.vector_lanes = lanes;
    std::vector<Job> renamed = jobs;
    for (auto& j : renamed) j.f.name += "_" + std::to_string(lanes);
    const std::string src = check_jobs(renamed, o, false);
    INFO(src);
    if (lanes == 1) {
      CHECK(has(src, "a scalar loop, no SIMD: vector_lanes 1"));
      continue;
    }
    CHECK(has(src, "} else {  // lane by lane"));
    CHECK(has(src, "= {};  // lane by lane"));
  }
}

TEST_CASE("codegen: a transposing copy (cache_read with a layout) goes in register blocks, any shape, tails and "
          "leading dimension, and equals the interpreter", "[codegen][layout][kernels]") {
  // C = A·op(B) with B stored n x k (rows padded by 3 floats), B's copy BL[k][x] = B[x][k] vectorized
  // along x: whole W x W blocks transpose through registers, the edges element by element; every
  // other copy parallel over its rows (blocks of W rows per thread), run at 1 and 2 threads.
  struct Case {
    std::int64_t m, n, k, kc;  // kc 0: the copy of the whole B at the first loop; else at ko of a split by kc
  };
  const std::vector<Case> cases = {{3, 16, 16, 0}, {2, 17, 33, 0}, {3, 37, 19, 0}, {2, 5, 40, 0},
                                   {1, 1, 1, 0},   {2, 48, 64, 16}, {3, 35, 41, 12}, {2, 32, 13, 13}};
  for (int lanes : {4, 8, 16}) {
    std::vector<Job> jobs;
    bool blocks = false;  // some copy has whole blocks of this many lanes
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const Tensor A = placeholder("A", {c.m, c.k});
      const Tensor B = strided_placeholder("B", {c.n, c.k}, {c.k + 3, 1});
      IterVar r = reduce_axis(c.k, "k");
      const Tensor C = compute("C", {c.m, c.n}, [&](Var y, Var x) { return sum(A(y, r) * B(x, r), {r}); }, {"y", "x"});
      Schedule s({C});
      IterVar at = s[C].leaf_axes()[0];
      if (c.kc > 0) {
        auto [ko, ki] = s[C].split(r, c.kc, "ko", "ki");
        s[C].reorder({ko, C.axis(0), C.axis(1), ki});
        at = ko;
      }
      const Tensor BL = s.cache_read(B, s[C], at, Scope::Local, {1, 0}, "BL");
      s[BL].vectorize(s[BL].leaf_axes().back());
      if (i % 2 == 1) s[BL].parallel(s[BL].leaf_axes().front());  // the rows shared out among threads
      jobs.push_back(job(s, "transposed" + std::to_string(i) + "_" + std::to_string(lanes), {A, B}, c.k));
      const std::int64_t rows = c.kc > 0 ? c.kc : c.k;
      blocks = blocks || (rows >= lanes && c.n >= lanes);
    }
    CodegenOptions o;
    o.vector_lanes = lanes;
    const std::string src = check_jobs(jobs, o);
    INFO(src);
    CHECK(has(src, "void mls_transpose" + std::to_string(lanes) + "(") == blocks);
    CHECK(has(src, "a transposing copy BL[ax0][ax1] = B[ax1][ax0] in " + std::to_string(lanes) + " x " +
                       std::to_string(lanes) + " blocks"));
    CHECK(has(src, "blocks of " + std::to_string(lanes) + " rows on the host's threads"));
  }
}

TEST_CASE("codegen: B packed in NR-wide panels (cache_read's panel) feeds the register-blocked micro-kernel, copies "
          "transpose panel by panel, and equal the interpreter", "[codegen][layout][kernels]") {
  // The SGEMM template's nest (tune.hpp) written out: B's KC x NC block at ko stored [NC/NR][KC][NR],
  // its copy panel by panel (bp, ax0, bi) with bi vectorized (a W x W register transpose per panel
  // when B is N x K), parallel over the panels half the time; the micro-kernel reads the panel with
  // rows NR apart. K in blocks, at 4, 8 and 16 lanes.
  for (int lanes : {4, 8, 16}) {
    std::vector<Job> jobs;
    const std::int64_t nr = 2 * lanes, mr = 3, kc = 2 * lanes + 3, nc = 2 * nr;
    for (const bool tb : {false, true}) {
      // N = 3 panels in blocks of 2: the last block is short, its copy guarded panel by panel
      // (xc*2NR + bp*NR < 3NR, outside the vector loop), so whole panels still transpose in registers.
      const std::int64_t m = 2 * mr, n = 3 * nr, k = 2 * kc;
      Mm mm = matmul(m, n, k, false, tb);
      Schedule s({mm.C});
      Stage st = s[mm.C];
      auto [yo, yi] = st.split(mm.C.axis(0), mr, "yo", "yi");
      auto [xp, xi] = st.split(mm.C.axis(1), nr, "xp", "xi");
      auto [xc, xr] = st.split(xp, nc / nr, "xc", "xr");
      auto [ko, ki] = st.split(mm.k, kc, "ko", "ki");
      st.reorder({xc, ko, yo, xr, yi, xi, ki});
      const Tensor BL = s.cache_read(mm.B, st, ko, Scope::Local, tb ? std::vector<int>{1, 0} : std::vector<int>{0, 1},
                                     nr, "BL");
      auto [bp, bi] = s[BL].split(s[BL].leaf_axes().back(), nr, "bp", "bi");
      s[BL].reorder({bp, s[BL].leaf_axes().front(), bi});
      s[BL].vectorize(bi);
      if (tb) s[BL].parallel(bp);  // the panels shared out among the threads
      // The transposed one with the C-prefetching kernel (C fetched first, added after the k loop).
      st.tensorize(yi, gemm_regblock_intrinsic(mr, nr, kc, lanes, /*prefetch_c=*/tb));
      jobs.push_back(job(s, std::string("panels_") + (tb ? "nt_" : "nn_") + std::to_string(lanes), {mm.A, mm.B}, k));
    }
    CodegenOptions o;
    o.vector_lanes = lanes;
    const std::string src = check_jobs(jobs, o);
    INFO(src);
    // The transposed copy goes through registers panel by panel: BL[bp][ax0][bi] = B[bp*NR + bi][...]
    // (inside the parallel loop's lambda, whose __restrict pointers are BL_ and B_).
    CHECK(has(src, "a transposing copy BL_[ax0][bi] = B_[bi][ax0] in " + std::to_string(lanes) + " x " +
                       std::to_string(lanes) + " blocks"));
    CHECK(has(src, "_regblock"));
  }
}

TEST_CASE("codegen: a tensorized matmul with a register-blocked micro-kernel equals the naive product",
          "[codegen][tensorize][kernels]") {
  const int lanes = resolved_vector_lanes({});
  const std::int64_t mr = 4, nr = 2 * lanes, kc = 8;
  const std::int64_t m = 3 * mr, n = 2 * nr, k = 3 * kc;
  Mm mm = matmul(m, n, k);
  Schedule s({mm.C});
  TileAxes t = s[mm.C].tile(mm.C.axis(0), mm.C.axis(1), mr, nr);
  auto [ko, ki] = s[mm.C].split(mm.k, kc);
  s[mm.C].reorder({t.outer1, ko, t.outer0, t.inner0, t.inner1, ki});
  Tensor BL = s.cache_read(mm.B, s[mm.C], ko);  // a packed kc x nr panel of B, reused by every yo
  s[BL].vectorize(s[BL].leaf_axes().back());
  s[mm.C].tensorize(t.inner0, gemm_regblock_intrinsic(mr, nr, kc));
  s[mm.C].parallel(t.outer1);
  const LoweredFunc f = lower(s, "regblock");
  const JitKernel kern = compile(f, {}, codegen_jit_options(false, "-O3"));
  INFO(kern.source());
  CHECK(has(kern.source(), "gemm4x" + std::to_string(nr) + "x8_regblock(ptrs, strides, extents);"));
  CHECK(has(kern.source(), "vec acc[4][2];"));
  const auto in = random_inputs({mm.A, mm.B}, 11);
  MLS_ORACLE(const auto naive = run_naive({mm.A, mm.B}, in, {mm.C});)
  for (int threads : {1, 2}) {
    const auto got = run_compiled(kern, {mm.A, mm.B}, in, {mm.C}, threads);
    kernels_test::observe_outputs("regblock at " + std::to_string(threads) + " threads", {mm.C}, got,
                                  reduction_tol(k) * k);
    MLS_ORACLE_CHECK(require_close(got[0], naive[0], reduction_tol(k) * k, "C"));
  }
}

// ---- errors ------------------------------------------------------------------------------------------

TEST_CASE("codegen: bad IR, options and runs are named errors", "[codegen][errors][base]") {
  Tensor A = placeholder("A", {4}), C = placeholder("C", {4});
  Var i("i"), j("j");
  auto fn = [&](Stmt body, std::vector<Buffer> args) { return LoweredFunc{"bad", std::move(args), std::move(body)}; };
  const Stmt unbound = make_store(C.buffer(), {Expr(j)}, Expr(1.0f));
  LAB4_REQUIRE_ERROR(generate_cpp(fn(make_for(i, 0, 4, ForKind::Serial, unbound), {C.buffer()})),
                      "generate_cpp: variable 'j' of 'bad' is not bound by any loop around it");
  const Stmt twice = make_for(i, 0, 4, ForKind::Serial, make_for(i, 0, 4, ForKind::Serial, unbound));
  LAB4_REQUIRE_ERROR(generate_cpp(fn(twice, {C.buffer()})),
                      "generate_cpp: loop variable 'i' of 'bad' is bound twice in nested loops");
  const Stmt store_a = make_for(i, 0, 4, ForKind::Serial, make_store(A.buffer(), {Expr(i)}, Expr(1.0f)));
  LAB4_REQUIRE_ERROR(generate_cpp(fn(store_a, {C.buffer()})),
                      "generate_cpp: buffer 'A' (store in 'bad') is neither an argument of the function nor allocated in it");
  const Buffer tmp = std::make_shared<const BufferNode>(BufferNode{"T", {4}, Scope::Local, nullptr});
  const Stmt after = make_seq({make_allocate(tmp, make_for(i, 0, 4, ForKind::Serial, make_store(tmp, {Expr(i)}, Expr(0.0f)))),
                               make_for(i, 0, 4, ForKind::Serial, make_store(C.buffer(), {Expr(i)}, Tensor(tmp)(i)))});
  LAB4_REQUIRE_ERROR(generate_cpp(fn(after, {C.buffer()})),
                      "generate_cpp: buffer 'T' (load in 'bad') is used outside its allocation");
  IterVar r = reduce_axis(4, "r");
  const Stmt reduce = make_store(C.buffer(), {Expr(0)}, sum(A(r), {r}));
  LAB4_REQUIRE_ERROR(generate_cpp(fn(reduce, {A.buffer(), C.buffer()})), "cannot be compiled (a reduction: lower the schedule first)");
  const LoweredFunc ok = fn(make_for(i, 0, 4, ForKind::Serial, make_store(C.buffer(), {Expr(i)}, A(i) * 2.0f)), {A.buffer(), C.buffer()});
  CodegenOptions bad;
  bad.vector_lanes = 3;
  LAB4_REQUIRE_ERROR(generate_cpp(ok, bad), "generate_cpp: vector_lanes 3 is not 0 (from the CPU), 1 (no SIMD), 4, 8 or 16");
  bad = {};
  bad.max_unroll = 0;
  LAB4_REQUIRE_ERROR(generate_cpp(ok, bad), "generate_cpp: max_unroll 0 must be >= 1");
  const std::vector<LoweredFunc> two = {ok, ok};
  LAB4_REQUIRE_ERROR(generate_cpp(two), "generate_cpp: two functions are named 'bad' (symbol 'bad')");

  // Runs.
  LAB4_REQUIRE_ERROR(JitKernel().run(std::vector<std::span<float>>{}), "JitKernel::run: the kernel is empty");
  const JitKernel k = compile(ok, {}, codegen_jit_options());
  std::vector<float> a(4, 1.0f), c(4), small(3), big(8);
  using Spans = std::vector<std::span<float>>;
  LAB4_REQUIRE_ERROR(k.run(Spans{a}), "JitKernel::run: 'bad' takes 2 buffers (A, C), got 1");
  LAB4_REQUIRE_ERROR(k.run(Spans{a, small}), "JitKernel::run: buffer 'C' of 'bad' has 3 floats, its shape [4] needs 4");
  LAB4_REQUIRE_ERROR(k.run(Spans{std::span<float>(big).first(4), std::span<float>(big).subspan(2, 4)}),
                      "JitKernel::run: buffers 'A' and 'C' of 'bad' overlap");
  LAB4_REQUIRE_ERROR(k.run(Spans{a, c}, -1), "JitKernel::run: threads -1 must be >= 0");
  Bindings b;
  b.bind(A, a);
  LAB4_REQUIRE_ERROR(k.run(b), "JitKernel::run: argument 'C' of 'bad' is not bound");
  k.run(Spans{a, c});
  CHECK(c == std::vector<float>(4, 2.0f));
  // run_jit: interpret()'s compiled twin.
  std::vector<float> c2(4);
  run_jit(ok, Bindings().bind(A, a).bind(C, c2), 1, {}, codegen_jit_options());
  CHECK(c2 == c);
}

TEST_CASE("codegen: MLS_CODEGEN_DUMP writes the generated source", "[codegen][base]") {
  mls::testing::TempDir dir("dump");
  kernels_test::EnvGuard env("MLS_CODEGEN_DUMP", dir.file("src"));
  const auto m = kernels_test::slide_matmul(8);
  const JitKernel k = compile(kernels_test::slide_plain(m), "dumped", {}, codegen_jit_options());
  const std::string dumped = mls::read_file(dir.path / "src" / "dumped.cpp");
  mls::testing::observe("the dumped source of 'dumped'", dumped);
  CHECK((dumped == k.source()));
}

TEST_CASE("codegen: strided operands and an accumulating output compile and equal the interpreter", "[codegen][strides][base]") {
  // C (ldc) (+)= op(A) (lda) op(B) (ldb), every operand where it lies: rows padded by 3 floats.
  std::vector<LoweredFunc> fs;
  struct Case {
    Tensor A, B, C;
    long m, n, ldc;
  };
  std::vector<Case> cases;
  for (int flags = 0; flags < 8; ++flags) {
    const bool ta = flags & 1, tb = flags & 2, acc = flags & 4;
    const long m = 5 + flags, n = 3 + 2 * flags, k = 7;
    const Tensor A = strided_placeholder("A", ta ? std::vector<std::int64_t>{k, m} : std::vector<std::int64_t>{m, k},
                                         {(ta ? m : k) + 3, 1});
    const Tensor B = strided_placeholder("B", tb ? std::vector<std::int64_t>{n, k} : std::vector<std::int64_t>{k, n},
                                         {(tb ? k : n) + 3, 1});
    IterVar r = reduce_axis(k, "k");
    const Tensor C = with_strides(compute("C", {m, n}, [&](Var y, Var x) {
      const Expr p = (ta ? A(r, y) : A(y, r)) * (tb ? B(x, r) : B(r, x));
      return acc ? sum_into(p, {r}) : sum(p, {r});
    }, {"y", "x"}), {n + 3, 1});
    fs.push_back(lower(Schedule({C}), "strided" + std::to_string(flags)));
    cases.push_back({A, B, C, m, n, n + 3});
  }
  const std::vector<JitKernel> ks = compile_all(fs, {}, codegen_jit_options(true));
  CHECK(has(ks.front().source(), "// A: float32[5, 7] (strides [10, 1])"));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    auto span_of = [](const Tensor& t) { return static_cast<std::size_t>(buffer_span(*t.buffer())); };
    std::vector<float> a = kernels_test::random_vec(span_of(c.A), i, "A"), b = kernels_test::random_vec(span_of(c.B), i, "B");
    std::vector<float> want = kernels_test::random_vec(span_of(c.C), i, "C");
    for (long y = 0; y + 1 < c.m; ++y)
      for (long x = c.n; x < c.ldc; ++x) want[static_cast<std::size_t>(y * c.ldc + x)] = 7.0f;  // the gaps stay
    std::vector<float> got = want;
    interpret(fs[i], Bindings().bind(c.A, a).bind(c.B, b).bind(c.C, want));
    ks[i].run(Bindings().bind(c.A, a).bind(c.B, b).bind(c.C, got), 1);
    mls::testing::observe(fs[i].name + " compiled", got, {1e-5, 1e-5});
    INFO(fs[i].name);
    CHECK(kernels_test::identical(got, want));
  }
  std::vector<float> small(10), c(cases[0].ldc * cases[0].m);
  LAB4_REQUIRE_ERROR(ks[0].run(std::vector<std::span<float>>{small, small, c}),
                     "JitKernel::run: buffer 'A' of 'strided0' has 10 floats, its shape [5, 7] (strides [10, 1]) needs 47");
}
