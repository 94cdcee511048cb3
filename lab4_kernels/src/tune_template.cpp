// Student file of lab 4: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 4 part 2. The SGEMM schedule template: knobs -> schedule -> loop nest -> compiled kernels (one per
// piece of the plan), run on the operands where they lie, and the staged runs that make a compiled
// plan honour the whole SgemmFn contract for the calls it was not compiled for. Yours: where the
// knobs become a schedule (instantiate).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <span>

#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"
#include "mls/kernels/tune.hpp"

namespace mls::kernels::tune {

te::Intrinsic micro_kernel(long mr, long nr, long kc, int unroll, int lanes, bool c_prefetch) {
  MLS_CHECK(unroll >= 1, "micro_kernel: unroll ", unroll, " must be >= 1");
  if (lanes == 0) lanes = te::resolved_vector_lanes({});
  // A narrow edge (fewer columns than a vector, or not whole vectors): the plain loops.
  if (nr % lanes != 0) return te::gemm_intrinsic(mr, nr, kc);
  te::Intrinsic in = te::gemm_regblock_intrinsic(mr, nr, kc, lanes, c_prefetch);
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

std::string default_name(const SgemmPiece& p) {
  const SgemmKnobs& k = p.knobs;
  const SgemmShape& s = p.shape;
  const SgemmShape c = s.canonical();
  std::string flags = std::string(s.trans_a ? "t" : "n") + (s.trans_b ? "t" : "n") + (s.beta ? "_acc" : "");
  if (c.lda) flags += "_lda" + std::to_string(c.lda);
  if (c.ldb) flags += "_ldb" + std::to_string(c.ldb);
  if (c.ldc) flags += "_ldc" + std::to_string(c.ldc);
  return "sgemm_" + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + "_" + flags + "_" +
         k.order + "_" + k.parallel + "_" + (k.pack_a ? "pa" : "na") + (k.pack_b ? "pb" : "nb") + (k.pack_a && k.a_panels ? "_ap" : "") + "_mc" +
         std::to_string(p.mc) + "_kc" + std::to_string(p.kc) + "_nc" + std::to_string(p.nc) + "_mr" +
         std::to_string(k.mr) + "_nr" + std::to_string(k.nr) + "_u" + std::to_string(k.unroll) + (k.c_prefetch ? "_pc" : "");
}

/// A matrix operand where it lies: rows x cols with leading dimension ld (a plain placeholder when
/// compact).
te::Tensor operand(const char* name, long rows, long cols, long ld) {
  return ld == cols ? te::placeholder(name, {rows, cols}) : te::strided_placeholder(name, {rows, cols}, {ld, 1});
}

/// The compute of a piece: C (+)= op(A)·op(B) on A m x k (k x m with trans_a), B k x n (n x k with
/// trans_b) and C m x n, each where it lies (its leading dimension); beta 1 sums into C (no reset).
struct PieceCompute {
  te::Tensor A, B, C;
  te::IterVar k;
};
PieceCompute piece_compute(const SgemmShape& sh) {
  const std::int64_t M = sh.m, N = sh.n, K = sh.k;
  PieceCompute pc;
  pc.A = sh.trans_a ? operand("A", K, M, sh.a_ld()) : operand("A", M, K, sh.a_ld());
  pc.B = sh.trans_b ? operand("B", N, K, sh.b_ld()) : operand("B", K, N, sh.b_ld());
  pc.k = te::reduce_axis(K, "k");
  auto body = [&](te::Var y, te::Var x) {
    const te::Expr prod = (sh.trans_a ? pc.A(pc.k, y) : pc.A(y, pc.k)) * (sh.trans_b ? pc.B(x, pc.k) : pc.B(pc.k, x));
    return sh.beta ? te::sum_into(prod, {pc.k}) : te::sum(prod, {pc.k});
  };
  pc.C = te::compute("C", {M, N}, body, {"y", "x"});
  if (sh.c_ld() != N) pc.C = te::with_strides(pc.C, {sh.c_ld(), 1});
  return pc;
}

}  // namespace

/// The template (the top of mls/kernels/tune.hpp has its picture). Given: the piece (block sizes
/// MC, NC, KC that tile it exactly, the last block of panels possibly shorter), the compute
/// C (+)= op(A)·op(B) on its operands where they lie, and its schedule. Yours, the knobs made
/// schedule primitives, in this order:
///   1. y -> (yp, yi) by MR, yp -> (yc, yr) by MC/MR; x -> (xp, xi) by NR, xp -> (xc, xr) by NC/NR;
///      k -> (ko, ki) by KC, with those names (the printed nest and the tests read them);
///   2. the loops: the block loops {xc, ko, yc} in knobs.order (n = xc, k = ko, m = yc), then xr,
///      yr, yi, xi, ki (one reorder);
///   3. pack_b: B's block copied at the later (inner) of its loops xc/ko (cache_read of B at that
///      axis, Scope::Local, in the layout `b_layout`: rows of k whatever B's own layout, in panels of
///      knobs.nr columns, named "BL": stored [NC/NR][KC][NR]); the copy's loops (ax0 = k, ax1 = x):
///      ax1 split by NR into (bp, bi), reordered {bp, ax0, bi} (panel by panel), bi vectorized;
///      then pack_a: A's at the later of yc/ko ("AL"), in that order (where both copies sit at one
///      loop, the order of the calls is the order of the copies in the nest, and the tests compare
///      nests). Rows of KC (a_panels off): A's copy's innermost loop vectorized
///      (s[AL].leaf_axes().back()). In panels (a_panels): the layout `a_layout` (columns of y, AL[k][y],
///      whatever A's layout) in panels of knobs.mr rows, stored [MC/MR][KC][MR] (lab4_packed's pack_a:
///      the micro-kernel reads its MR x KC panel as one contiguous run, MR apart per k); the copy's
///      loops (ax0 = k, ax1 = y): ax1 split by MR into (ap, ai), reordered {ap, ax0, ai} (panel by
///      panel), ai vectorized (one store of MR floats per k: with trans_a its loads are contiguous
///      too; without, its lanes are gathered from the MR rows, each row read along k);
///   4. the MR x NR x KC tile from yi tensorized with micro_kernel(mr, nr, piece kc, unroll, lanes,
///      c_prefetch),
///      te::ResetAt::Tile (C = ...: each tile zeroed in cache right before its first k block, as
///      lab4_packed's beta' = 0 for the first KC block, instead of a pass of its own over C);
///   5. knobs.parallel: "m" yc, "n" xc, "mr" yr, "nr" xr made parallel ("none": nothing), and then
///      each copy that sits outside the parallel loop (its loop before yc for "m", before xc for "n";
///      every copy for "mr" and "nr", whose loops come after the block loops) parallel over its rows
///      (its first leaf axis: B's panels, A's rows): the threads share the packing out, as sgemm_packed_mt
///      does, instead of one copying while the others wait.
/// Hint: each of p.mc / knobs.mr and p.nc / knobs.nr is a whole number of panels.
SgemmInstance instantiate(const SgemmPiece& piece, std::string name) {
  const SgemmPiece& p = piece;
  [[maybe_unused]] const SgemmKnobs& knobs = p.knobs;
  // A is M x K (K x M with trans_a), B K x N (N x K with trans_b), C M x N, each with its leading dimension.
  const PieceCompute pc = piece_compute(p.shape);
  const te::Tensor &A = pc.A, &B = pc.B, &C = pc.C;
  [[maybe_unused]] const te::IterVar& kk = pc.k;
  // B's copy holds rows of k (BL[k][x]) whatever B's layout, in panels of NR columns: the micro-kernel
  // reads its KC x NR panel of B's block as one contiguous run (rows NR apart).
  const std::vector<int> b_layout = p.shape.trans_b ? std::vector<int>{1, 0} : std::vector<int>{0, 1};
  // A's copy in panels holds columns of y (AL[k][y]) whatever A's layout, in panels of MR rows.
  [[maybe_unused]] const std::vector<int> a_layout =
      p.shape.trans_a ? std::vector<int>{0, 1} : std::vector<int>{1, 0};
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
  // Where the parallel loop is among the block loops (3: after them, "mr" and "nr"; none: past all).
  const std::size_t par = knobs.parallel == "m"   ? knobs.order.find('m')
                          : knobs.parallel == "n" ? knobs.order.find('n')
                          : knobs.parallel == "none" ? 4 : 3;
  // A copy at the later of its loops a, b is outside the parallel loop when that comes first.
  auto outside = [&](char a, char b) { return std::max(knobs.order.find(a), knobs.order.find(b)) < par && par < 4; };
  std::vector<te::Tensor> copies_outside;
  if (knobs.pack_b) {
    // KC x NC, reused by the yc blocks, stored as NC/NR panels of KC x NR (one contiguous run per xr).
    const te::Tensor BL = s.cache_read(B, st, later('n', 'k'), te::Scope::Local, b_layout, knobs.nr, "BL");
    auto [bp, bi] = s[BL].split(s[BL].leaf_axes().back(), knobs.nr, "bp", "bi");
    s[BL].reorder({bp, s[BL].leaf_axes().front(), bi});
    s[BL].vectorize(bi);
    if (outside('n', 'k')) copies_outside.push_back(BL);
  }
  if (knobs.pack_a && !knobs.a_panels) {
    const te::Tensor AL = s.cache_read(A, st, later('m', 'k'), "AL");  // MC x KC, reused by the xr panels
    s[AL].vectorize(s[AL].leaf_axes().back());
    if (outside('m', 'k')) copies_outside.push_back(AL);
  }
  if (knobs.pack_a && knobs.a_panels) {
    // MC x KC stored as MC/MR panels of KC x MR (one contiguous run per yr).
    const te::Tensor AL = s.cache_read(A, st, later('m', 'k'), te::Scope::Local, a_layout, knobs.mr, "AL");
    const te::IterVar ak = s[AL].leaf_axes().front();
    auto [ap, ai] = s[AL].split(s[AL].leaf_axes().back(), knobs.mr, "ap", "ai");
    s[AL].reorder({ap, ak, ai});
    s[AL].vectorize(ai);
    if (outside('m', 'k')) copies_outside.push_back(AL);
  }
  st.tensorize(yi, micro_kernel(knobs.mr, knobs.nr, p.kc, knobs.unroll, p.lanes, knobs.c_prefetch), te::ResetAt::Tile);
  if (knobs.parallel == "m") st.parallel(yc);
  if (knobs.parallel == "n") st.parallel(xc);
  if (knobs.parallel == "mr") st.parallel(yr);
  if (knobs.parallel == "nr") st.parallel(xr);
  for (const te::Tensor& copy : copies_outside) s[copy].parallel(s[copy].leaf_axes().front());
  // END SOLUTION
  te::LoweredFunc f = te::lower(s, name.empty() ? default_name(p) : name);
  return SgemmInstance{p, A, B, C, s, std::move(f)};
}

SgemmInstance instantiate(const SgemmKnobs& knobs, const SgemmShape& shape, int lanes, std::string name) {
  const SgemmPlan p = plan_sgemm(knobs, shape, lanes);
  if (p.edges()) {
    std::string pieces;
    for (const auto& q : p.pieces) pieces += "\n  " + to_string(q);
    fail("instantiate: ", to_string(shape), " with ", to_string(knobs), " has edges, ", p.pieces.size(),
         " pieces (instantiate_all makes each):", pieces);
  }
  return instantiate(p.pieces.front(), std::move(name));
}

SgemmInstance instantiate(const SgemmKnobs& knobs, long m, long n, long k, int lanes, std::string name) {
  return instantiate(knobs, SgemmShape{m, n, k}, lanes, std::move(name));
}

std::vector<SgemmInstance> instantiate_all(const SgemmKnobs& knobs, const SgemmShape& shape, int lanes) {
  std::vector<SgemmInstance> out;
  for (const auto& piece : plan_sgemm(knobs, shape, lanes).pieces) out.push_back(instantiate(piece));
  return out;
}

// ---- compiled kernels ---------------------------------------------------------------------------

namespace {
std::atomic<std::int64_t> g_staged{0};
}  // namespace

std::int64_t tuned_staged_calls() { return g_staged.load(); }
namespace detail {
void reset_staged_calls() { g_staged.store(0); }
}  // namespace detail

CompiledSgemm::CompiledSgemm(SgemmPlan plan, std::vector<te::JitKernel> kernels)
    : plan_(std::move(plan)), kernels_(std::move(kernels)) {
  MLS_CHECK(kernels_.size() == plan_.pieces.size(), "CompiledSgemm: ", kernels_.size(), " kernels for the ",
            plan_.pieces.size(), " pieces of ", to_string(plan_.shape));
  for (const auto& k : kernels_) MLS_CHECK(static_cast<bool>(k), "CompiledSgemm: a kernel of ", to_string(plan_.shape), " is empty");
}

void CompiledSgemm::run(const float* A, const float* B, float* C, int threads) const {
  MLS_CHECK(!kernels_.empty(), "CompiledSgemm: the kernel is empty (default-constructed, not compiled)");
  MLS_CHECK(threads >= 0, "CompiledSgemm: threads ", threads, " must be >= 0 (0: mls::num_threads())");
  run_pieces(A, B, C, threads);
}

void CompiledSgemm::run_pieces(const float* A, const float* B, float* C, int threads) const {
  const SgemmShape& s = plan_.shape;
  const long lda = s.a_ld(), ldb = s.b_ld(), ldc = s.c_ld();
  std::optional<ThreadCountGuard> guard;
  if (threads > 1) guard.emplace(threads);
  const te::ParallelForFn pf = threads == 1 ? nullptr : &te::pool_parallel_for;
  for (std::size_t i = 0; i < kernels_.size(); ++i) {
    const SgemmPiece& p = plan_.pieces[i];
    // The piece's corner of each operand (the kernel only reads A and B).
    float* const args[3] = {
        const_cast<float*>(s.trans_a ? A + p.k0 * lda + p.row0 : A + p.row0 * lda + p.k0),
        const_cast<float*>(s.trans_b ? B + p.col0 * ldb + p.k0 : B + p.k0 * ldb + p.col0), C + p.row0 * ldc + p.col0};
    kernels_[i].fn()(args, pf, nullptr);
  }
}

namespace {
/// `dst` (leading dimension dst_ld) = op(X) (rows x cols; X[r * ld + c], or X[c * ld + r] when
/// `trans`), stored transposed when `dst_trans`. Transposes go in 16 x 16 blocks, so both sides stay
/// in a few cache lines.
void stage_operand(std::vector<float>& dst, bool dst_trans, long dst_ld, const float* X, long ld, bool trans, long rows,
                   long cols) {
  const long drows = dst_trans ? cols : rows, dcols = dst_trans ? rows : cols;
  dst.assign(static_cast<std::size_t>((drows - 1) * dst_ld + dcols), 0.0f);
  float* d = dst.data();
  if (trans == dst_trans) {  // the same layout, another leading dimension
    const long srows = trans ? cols : rows, scols = trans ? rows : cols;
    for (long r = 0; r < srows; ++r) std::copy(X + r * ld, X + r * ld + scols, d + r * dst_ld);
    return;
  }
  // op(X)[r][c] is X[r][c] or X[c][r]; dst holds it at [r][c] or [c][r]: one side reads transposed.
  constexpr long kB = 16;
  for (long r0 = 0; r0 < rows; r0 += kB)
    for (long c0 = 0; c0 < cols; c0 += kB)
      for (long r = r0; r < std::min(rows, r0 + kB); ++r)
        for (long c = c0; c < std::min(cols, c0 + kB); ++c)
          d[dst_trans ? c * dst_ld + r : r * dst_ld + c] = trans ? X[c * ld + r] : X[r * ld + c];
}
}  // namespace

void CompiledSgemm::run(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float* A, long lda,
                        const float* B, long ldb, float beta, float* C, long ldc, int threads) const {
  MLS_CHECK(!kernels_.empty(), "CompiledSgemm: the kernel is empty (default-constructed, not compiled)");
  MLS_CHECK(threads >= 0, "CompiledSgemm: threads ", threads, " must be >= 0 (0: mls::num_threads())");
  const SgemmShape& s = plan_.shape;
  MLS_CHECK(M == s.m && N == s.n && K == s.k, "CompiledSgemm: compiled for ", to_string(s), " (m x n x k), called with ",
            M, "x", N, "x", K);
  MLS_CHECK(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N, "CompiledSgemm: leading dimensions lda ",
            lda, ", ldb ", ldb, ", ldc ", ldc, " are too small for ", M, "x", N, "x", K, trans_a ? " (trans_a)" : "",
            trans_b ? " (trans_b)" : "");
  // Operands in the plan's layout are read where they lie; others are copied into it.
  std::vector<float> a_stage, b_stage, c_stage;
  const float* a = A;
  const float* b = B;
  if (trans_a != s.trans_a || lda != s.a_ld()) {
    stage_operand(a_stage, s.trans_a, s.a_ld(), A, lda, trans_a, M, K);
    a = a_stage.data();
  }
  if (trans_b != s.trans_b || ldb != s.b_ld()) {
    stage_operand(b_stage, s.trans_b, s.b_ld(), B, ldb, trans_b, K, N);
    b = b_stage.data();
  }
  // C: in place when alpha = 1 and the plan computes C = ... (beta 0 asked) or C += ... (any beta:
  // C scaled first); else into a copy in the plan's layout, then C = alpha copy + beta C.
  const long pldc = s.c_ld();
  const bool c_in_place = alpha == 1.0f && ldc == pldc && (s.beta == 1 || beta == 0.0f);
  if (!a_stage.empty() || !b_stage.empty() || !c_in_place) g_staged.fetch_add(1);
  if (c_in_place) {
    if (s.beta == 1 && beta != 1.0f)
      for (long i = 0; i < M; ++i) {
        float* row = C + i * ldc;
        if (beta == 0.0f)
          std::fill(row, row + N, 0.0f);  // C is not read (it may hold NaN)
        else
          for (long j = 0; j < N; ++j) row[j] *= beta;
      }
    return run_pieces(a, b, C, threads);
  }
  c_stage.assign(static_cast<std::size_t>((M - 1) * pldc + N), 0.0f);  // a beta-1 plan adds to zeros
  run_pieces(a, b, c_stage.data(), threads);
  for (long i = 0; i < M; ++i) {
    float* row = C + i * ldc;
    const float* t = c_stage.data() + i * pldc;
    if (beta == 0.0f) {
      for (long j = 0; j < N; ++j) row[j] = alpha * t[j];  // C is not read (it may hold NaN)
    } else {
      for (long j = 0; j < N; ++j) row[j] = alpha * t[j] + beta * row[j];
    }
  }
}

std::vector<CompiledSgemm> compile_sgemm_jobs(const std::vector<std::pair<SgemmKnobs, SgemmShape>>& jobs,
                                              const jit::CompileOptions& options) {
  std::vector<SgemmPlan> plans;
  std::vector<te::LoweredFunc> funcs;
  std::set<std::string> names;
  for (const auto& [knobs, shape] : jobs) {
    plans.push_back(plan_sgemm(knobs, shape));
    for (const auto& piece : plans.back().pieces)
      if (const std::string name = default_name(piece); names.insert(name).second) funcs.push_back(instantiate(piece, name).func);
  }
  if (funcs.empty()) return {};
  const std::vector<te::JitKernel> kernels = te::compile_all(funcs, {}, options);
  std::map<std::string, const te::JitKernel*> by_name;
  for (const auto& k : kernels) by_name[k.func().name] = &k;
  std::vector<CompiledSgemm> out;
  for (const auto& p : plans) {
    std::vector<te::JitKernel> mine;
    for (const auto& piece : p.pieces) mine.push_back(*by_name.at(default_name(piece)));
    out.emplace_back(p, std::move(mine));
  }
  return out;
}

std::vector<CompiledSgemm> compile_sgemm_all(const std::vector<SgemmKnobs>& knobs, const SgemmShape& shape,
                                             const jit::CompileOptions& options) {
  std::vector<std::pair<SgemmKnobs, SgemmShape>> jobs;
  for (const auto& k : knobs) jobs.emplace_back(k, shape);
  return compile_sgemm_jobs(jobs, options);
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
