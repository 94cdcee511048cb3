// Student file of lab 4: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 4 part 2. The SGEMM schedule template: knobs -> schedule -> loop nest -> compiled kernel, and the staged
// runs that make one compiled kernel honour the whole SgemmFn contract. Yours: where the knobs
// become a schedule (instantiate).
#include <algorithm>
#include <cstring>
#include <span>

#include "mls/common/error.hpp"
#include "mls/kernels/tune.hpp"

namespace mls::kernels::tune {

te::Intrinsic micro_kernel(long mr, long nr, long kc, int unroll, int lanes) {
  te::Intrinsic in = te::gemm_regblock_intrinsic(mr, nr, kc, lanes);
  MLS_CHECK(unroll >= 1, "micro_kernel: unroll ", unroll, " must be >= 1");
  if (unroll == 1) return in;
  // The register-blocked kernel's k loop (codegen_jit.cpp) gets an unroll pragma.
  const std::string loop = "    for (std::int64_t k = 0; k < ";
  const std::size_t at = in.update_source.find(loop);
  MLS_CHECK(at != std::string::npos, "micro_kernel: the k loop of '", in.name,
            "' was not found in its source (te::gemm_regblock_intrinsic changed?)");
  in.update_source.insert(at, "#pragma GCC unroll " + std::to_string(unroll) + "\n");
  in.name += "_u" + std::to_string(unroll);
  return in;
}

namespace {

std::string default_name(const SgemmPlan& p) {
  const SgemmKnobs& k = p.knobs;
  return "sgemm_" + to_string(p.padded) + "_" + k.order + "_" + k.parallel + "_" + (k.pack_a ? "pa" : "na") +
         (k.pack_b ? "pb" : "nb") + "_mc" + std::to_string(p.mc) + "_kc" + std::to_string(p.kc) + "_nc" +
         std::to_string(p.nc) + "_mr" + std::to_string(k.mr) + "_nr" + std::to_string(k.nr) + "_u" +
         std::to_string(k.unroll);
}

}  // namespace

/// The template (the top of mls/kernels/tune.hpp has its picture). Given: the plan (block sizes
/// MC, NC, KC that tile the padded problem exactly), the compute C = A·B on it and its schedule.
/// Yours, the knobs made schedule primitives, in this order:
///   1. y -> (yp, yi) by MR, yp -> (yc, yr) by MC/MR; x -> (xp, xi) by NR, xp -> (xc, xr) by NC/NR;
///      k -> (ko, ki) by KC, with those names (the printed nest and the tests read them);
///   2. the loops: the block loops {xc, ko, yc} in knobs.order (n = xc, k = ko, m = yc), then xr,
///      yr, yi, xi, ki (one reorder);
///   3. pack_b: B's block copied at the later (inner) of its loops xc/ko (cache_read of B at that
///      axis, named "BL"), then pack_a: A's at the later of yc/ko ("AL"), in that order (where both
///      copies sit at one loop, the order of the calls is the order of the copies in the nest, and
///      the tests compare nests); each copy's innermost loop vectorized (s[BL].leaf_axes().back());
///   4. the MR x NR x KC tile from yi tensorized with micro_kernel(mr, nr, plan kc, unroll, lanes);
///   5. knobs.parallel: "m" yc, "n" xc, "mr" yr, "nr" xr made parallel ("none": nothing).
/// Hint: each of p.mc / knobs.mr and p.nc / knobs.nr is a whole number of panels.
SgemmInstance instantiate(const SgemmKnobs& knobs, long m, long n, long k, int lanes, std::string name) {
  const SgemmPlan p = plan_sgemm(knobs, {m, n, k}, lanes);
  const std::int64_t M = p.padded.m, N = p.padded.n, K = p.padded.k;
  const te::Tensor A = te::placeholder("A", {M, K}), B = te::placeholder("B", {K, N});
  te::IterVar kk = te::reduce_axis(K, "k");
  const te::Tensor C = te::compute(
      "C", {M, N}, [&](te::Var y, te::Var x) { return te::sum(A(y, kk) * B(kk, x), {kk}); }, {"y", "x"});
  te::Schedule s({C});
  te::Stage st = s[C];
  // BEGIN SOLUTION
  // Panels first, then blocks of panels: a block's tail guard sits on the panel loop (yr, xr).
  auto [yp, yi] = st.split(C.axis(0), knobs.mr, "yp", "yi");
  auto [yc, yr] = st.split(yp, p.mc / knobs.mr, "yc", "yr");
  auto [xp, xi] = st.split(C.axis(1), knobs.nr, "xp", "xi");
  auto [xc, xr] = st.split(xp, p.nc / knobs.nr, "xc", "xr");
  auto [ko, ki] = st.split(kk, p.kc, "ko", "ki");
  const te::IterVar outer[3] = {xc, ko, yc};  // by the letters n, k, m
  auto loop_of = [&](char c) { return outer[c == 'n' ? 0 : c == 'k' ? 1 : 2]; };
  std::vector<te::IterVar> loops;
  for (char c : knobs.order) loops.push_back(loop_of(c));
  loops.insert(loops.end(), {xr, yr, yi, xi, ki});
  st.reorder(loops);
  // A copy is made at the later (inner) of the two block loops its window depends on.
  auto later = [&](char a, char b) { return loop_of(knobs.order.find(a) > knobs.order.find(b) ? a : b); };
  if (knobs.pack_b) {
    const te::Tensor BL = s.cache_read(B, st, later('n', 'k'), "BL");  // KC x NC, reused by the yc blocks
    s[BL].vectorize(s[BL].leaf_axes().back());
  }
  if (knobs.pack_a) {
    const te::Tensor AL = s.cache_read(A, st, later('m', 'k'), "AL");  // MC x KC, reused by the xr panels
    s[AL].vectorize(s[AL].leaf_axes().back());
  }
  st.tensorize(yi, micro_kernel(knobs.mr, knobs.nr, p.kc, knobs.unroll, p.lanes));
  if (knobs.parallel == "m") st.parallel(yc);
  if (knobs.parallel == "n") st.parallel(xc);
  if (knobs.parallel == "mr") st.parallel(yr);
  if (knobs.parallel == "nr") st.parallel(xr);
  // END SOLUTION
  te::LoweredFunc f = te::lower(s, name.empty() ? default_name(p) : name);
  return SgemmInstance{p, A, B, C, s, std::move(f)};
}

// ---- compiled kernels ---------------------------------------------------------------------------

void CompiledSgemm::run(const float* A, const float* B, float* C, int threads) const {
  const SgemmShape& s = plan_.shape;
  run(false, false, s.m, s.n, s.k, 1.0f, A, s.k, B, s.n, 0.0f, C, s.n, threads);
}

namespace {
/// `stage` (rows_p x cols_p, compact) = op(X) (rows x cols; X[r * ld + c], or X[c * ld + r] when
/// `trans`), zero-padded. Transposes go in 16 x 16 blocks, so both sides stay in a few cache lines;
/// only the padding is zeroed.
void stage_operand(std::vector<float>& stage, const float* X, long ld, bool trans, long rows, long cols, long rows_p,
                   long cols_p) {
  stage.resize(static_cast<std::size_t>(rows_p * cols_p));
  float* s = stage.data();
  if (!trans) {
    for (long r = 0; r < rows; ++r) std::copy(X + r * ld, X + r * ld + cols, s + r * cols_p);
  } else {
    constexpr long kB = 16;
    for (long r0 = 0; r0 < rows; r0 += kB)
      for (long c0 = 0; c0 < cols; c0 += kB)
        for (long c = c0; c < std::min(cols, c0 + kB); ++c)
          for (long r = r0; r < std::min(rows, r0 + kB); ++r) s[r * cols_p + c] = X[c * ld + r];
  }
  for (long r = 0; r < rows; ++r) std::fill(s + r * cols_p + cols, s + (r + 1) * cols_p, 0.0f);
  std::fill(s + rows * cols_p, s + rows_p * cols_p, 0.0f);
}
}  // namespace

void CompiledSgemm::run(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float* A, long lda,
                        const float* B, long ldb, float beta, float* C, long ldc, int threads) const {
  MLS_CHECK(kernel_, "CompiledSgemm: the kernel is empty (default-constructed, not compiled)");
  const SgemmShape& s = plan_.shape;
  const SgemmShape& p = plan_.padded;
  MLS_CHECK(M == s.m && N == s.n && K == s.k, "CompiledSgemm: compiled for ", to_string(s), " (m x n x k), called with ",
            M, "x", N, "x", K);
  MLS_CHECK(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N, "CompiledSgemm: leading dimensions lda ",
            lda, ", ldb ", ldb, ", ldc ", ldc, " are too small for ", to_string(s), trans_a ? " (trans_a)" : "",
            trans_b ? " (trans_b)" : "");
  // Operands the kernel can take as they are, else zero-padded compact copies.
  std::vector<float> a_stage, b_stage, c_stage;
  float* a = const_cast<float*>(A);  // the kernel only reads its inputs
  float* b = const_cast<float*>(B);
  float* c = C;
  if (trans_a || lda != K || p.m != M || p.k != K) {
    stage_operand(a_stage, A, lda, trans_a, M, K, p.m, p.k);
    a = a_stage.data();
  }
  if (trans_b || ldb != N || p.k != K || p.n != N) {
    stage_operand(b_stage, B, ldb, trans_b, K, N, p.k, p.n);
    b = b_stage.data();
  }
  const bool stage_c = alpha != 1.0f || beta != 0.0f || ldc != N || p.m != M || p.n != N;
  if (stage_c) {
    c_stage.resize(static_cast<std::size_t>(p.m * p.n));
    c = c_stage.data();
  }
  const std::vector<std::span<float>> args = {{a, static_cast<std::size_t>(p.m * p.k)},
                                              {b, static_cast<std::size_t>(p.k * p.n)},
                                              {c, static_cast<std::size_t>(p.m * p.n)}};
  kernel_.run(args, threads);
  if (!stage_c) return;
  for (long i = 0; i < M; ++i) {
    float* row = C + i * ldc;
    const float* t = c + i * p.n;
    if (beta == 0.0f) {
      for (long j = 0; j < N; ++j) row[j] = alpha * t[j];  // C is not read (it may hold NaN)
    } else {
      for (long j = 0; j < N; ++j) row[j] = alpha * t[j] + beta * row[j];
    }
  }
}

std::vector<CompiledSgemm> compile_sgemm_all(const std::vector<SgemmKnobs>& knobs, const SgemmShape& shape,
                                             const jit::CompileOptions& options) {
  std::vector<SgemmPlan> plans;
  std::vector<te::LoweredFunc> funcs;
  for (const auto& k : knobs) {
    SgemmInstance inst = instantiate(k, shape.m, shape.n, shape.k);
    const bool seen = std::any_of(funcs.begin(), funcs.end(), [&](const te::LoweredFunc& f) { return f.name == inst.func.name; });
    if (!seen) funcs.push_back(inst.func);
    plans.push_back(inst.plan);
  }
  const std::vector<te::JitKernel> kernels = te::compile_all(funcs, {}, options);
  std::vector<CompiledSgemm> out;
  for (const auto& p : plans) {
    const std::string name = default_name(p);
    for (const auto& k : kernels)
      if (k.func().name == name) out.emplace_back(p, k);
  }
  return out;
}

CompiledSgemm compile_sgemm(const SgemmKnobs& knobs, const SgemmShape& shape, const jit::CompileOptions& options) {
  return compile_sgemm_all({knobs}, shape, options).front();
}

CandidateBuilder jit_builder(const jit::CompileOptions& options) {
  return [options](const SgemmKnobs& k, const SgemmShape& shape) -> CandidateFn {
    const CompiledSgemm g = compile_sgemm(k, shape, options);
    return [g](const float* A, const float* B, float* C, int threads) { g.run(A, B, C, threads); };
  };
}

}  // namespace mls::kernels::tune
