#pragma once
// GPU schedules of the tensor-expression workloads (lab 4 part 2, CUDA code generation), shared by
// the CPU tests of generate_cuda, its NVRTC tests and its GPU tests: the matmul of the slides tiled
// for a GPU with shared-memory tiles of A and B, softmax over rows, and an elementwise chain.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/kernels/schedule.hpp"

namespace kernels_test {

namespace te = mls::kernels::te;

/// A workload: its inputs, outputs and a schedule with bound loops.
struct CudaWorkload {
  std::string name;
  std::vector<te::Tensor> inputs, outputs;
  te::Schedule schedule;
  std::int64_t reduction = 1;  // the longest reduction (for tolerances)
};

/// C(i, j) = sum(k, A(i, k) * B(k, j)): the tensor expression every CUDA matmul schedule below starts from.
struct MatmulExpression {
  te::Tensor A, B;
  te::IterVar r;
  te::Tensor C;
};
inline MatmulExpression matmul_expression(std::int64_t m, std::int64_t n, std::int64_t k) {
  te::Tensor A = te::placeholder("A", {m, k});
  te::Tensor B = te::placeholder("B", {k, n});
  te::IterVar r = te::reduce_axis(k, "k");
  te::Tensor C = te::compute("C", {m, n}, [&](te::Var i, te::Var j) { return te::sum(A(i, r) * B(r, j), {r}); },
                             {"i", "j"});
  return {A, B, r, C};
}

/// C (m x n) = A (m x k) * B (k x n): blocks of tile x tile outputs (blockIdx.y, blockIdx.x), a
/// thread per output (threadIdx.y, threadIdx.x), k in slices of `tile` with the slices of A and B in
/// shared memory (tails guarded on every axis). `unroll`: the slice's loop ki unrolled too.
inline CudaWorkload cuda_matmul(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t tile = 16,
                                bool unroll = false) {
  auto [A, B, r, C] = matmul_expression(m, n, k);
  te::Schedule s({C});
  auto [io, ii] = s[C].split(C.axis(0), tile);
  auto [jo, ji] = s[C].split(C.axis(1), tile);
  auto [ko, ki] = s[C].split(r, tile);
  s[C].reorder({io, jo, ii, ji, ko, ki});
  s[C].bind(io, te::ThreadTag::BlockY);
  s[C].bind(jo, te::ThreadTag::BlockX);
  s[C].bind(ii, te::ThreadTag::ThreadY);
  s[C].bind(ji, te::ThreadTag::ThreadX);
  s.cache_read(A, s[C], ko, te::Scope::Shared);
  s.cache_read(B, s[C], ko, te::Scope::Shared);
  if (unroll) s[C].unroll(ki);
  return {unroll ? "matmul_unrolled" : "matmul", {A, B}, {C}, s, k};
}

/// The same matmul with each thread's sum in a local accumulator CL (cache_write) computed at the
/// thread's loop ji: the shared tiles are read by CL, inside C's bound loops (their window counts the
/// thread loops of C, where CL is computed).
inline CudaWorkload cuda_matmul_local(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t tile = 16) {
  auto [A, B, r, C] = matmul_expression(m, n, k);
  te::Schedule s({C});
  te::Tensor CL = s.cache_write(C);
  auto [io, ii] = s[C].split(C.axis(0), tile);
  auto [jo, ji] = s[C].split(C.axis(1), tile);
  s[C].reorder({io, jo, ii, ji});
  s[C].bind(io, te::ThreadTag::BlockY);
  s[C].bind(jo, te::ThreadTag::BlockX);
  s[C].bind(ii, te::ThreadTag::ThreadY);
  s[C].bind(ji, te::ThreadTag::ThreadX);
  s[CL].compute_at(s[C], ji);
  auto [ko, ki] = s[CL].split(r, tile);
  s.cache_read(A, s[CL], ko, te::Scope::Shared);
  s.cache_read(B, s[CL], ko, te::Scope::Shared);
  return {"matmul_local", {A, B}, {C}, s, k};
}

/// The register-tiled matmul's shape (cuda_matmul_regtile): a block computes bm x bn outputs with
/// (bm / tm) x (bn / tn) threads, each thread a tm x tn micro-tile; k in slices of bk.
struct RegTile {
  std::int64_t bm = 64, bn = 64, bk = 8, tm = 4, tn = 4;
  /// The shared tiles double-buffered (Stage::double_buffer): slice ko + 1 is filled while slice ko
  /// is multiplied, one barrier per slice.
  bool double_buffer = false;
  /// "bm64x64_bk8_tm4x4", with "_db" when double-buffered.
  std::string name() const {
    return "bm" + std::to_string(bm) + "x" + std::to_string(bn) + "_bk" + std::to_string(bk) + "_tm" +
           std::to_string(tm) + "x" + std::to_string(tn) + (double_buffer ? "_db" : "");
  }
};

/// C (m x n) = A (m x k) * B (k x n), register-tiled as in the CUDA SGEMM worklogs, every part a
/// schedule primitive:
///   - C's rows split by bm (blockIdx.y) then tm, its columns by bn (blockIdx.x) then tn; the thread
///     loops ty, tx (threadIdx.y, .x) bound, the micro-tile loops yy, xx unrolled: (bm / tm) x (bn / tn)
///     threads, each tm x tn outputs (the thread-tile split);
///   - the thread's sums in a local tile CL (cache_write) of tm x tn, computed at tx: registers;
///   - CL's k split by bk: per slice ko, A's tile stored transposed in shared memory (cache_read with
///     layout {1, 0}: A_shared[k][i], so a thread's tm values of a step lie side by side) and B's tile
///     as it is, both filled by the block's threads together (float4 loads where the rows allow);
///     with `double_buffer`, two copies of each: slice ko + 1 filled while slice ko is read;
///   - the bk steps ki of a slice and each step's tm x tn update unrolled: NVRTC keeps the tm values
///     of A_shared and the tn of B_shared a step reads in registers (ld.shared.v4 where aligned); a
///     register copy by cache_read of a shared tile is not supported.
/// Tails of every axis are guarded (any m, n, k).
inline CudaWorkload cuda_matmul_regtile(std::int64_t m, std::int64_t n, std::int64_t k, const RegTile& t = {}) {
  auto [A, B, r, C] = matmul_expression(m, n, k);
  te::Schedule s({C});
  te::Tensor CL = s.cache_write(C);
  auto [by, yi] = s[C].split(C.axis(0), t.bm, "by", "yi");
  auto [bx, xi] = s[C].split(C.axis(1), t.bn, "bx", "xi");
  // A thread's tm x tn outputs are adjacent rows and columns: the region of C one thread computes (CL's
  // window) is exactly its micro-tile (columns bn / tn apart would make it a box of bn - bn / tn + 1).
  auto [ty, yy] = s[C].split(yi, t.tm, "ty", "yy");
  auto [tx, xx] = s[C].split(xi, t.tn, "tx", "xx");
  s[C].reorder({by, bx, ty, tx, yy, xx});
  s[C].bind(by, te::ThreadTag::BlockY);
  s[C].bind(bx, te::ThreadTag::BlockX);
  s[C].bind(ty, te::ThreadTag::ThreadY);
  s[C].bind(tx, te::ThreadTag::ThreadX);
  s[C].unroll(yy);
  s[C].unroll(xx);
  s[CL].compute_at(s[C], tx);
  const auto cl_axes = s[CL].leaf_axes();  // i, j (the thread's tm x tn region), then k
  auto [ko, ki] = s[CL].split(cl_axes[2], t.bk, "ko", "ki");
  s[CL].reorder({ko, ki, cl_axes[0], cl_axes[1]});
  s[CL].unroll(ki);
  s[CL].unroll(cl_axes[0]);
  s[CL].unroll(cl_axes[1]);
  te::Tensor AS = s.cache_read(A, s[CL], ko, te::Scope::Shared, std::vector<int>{1, 0});
  te::Tensor BS = s.cache_read(B, s[CL], ko, te::Scope::Shared);
  if (t.double_buffer) {
    s[AS].double_buffer();
    s[BS].double_buffer();
  }
  return {"matmul_regtile_" + t.name(), {A, B}, {C}, s, k};
}

/// A matmul schedule by name: "t<T>" (cuda_matmul_local with tile T) or "bm<BM>x<BN>_bk<BK>_tm<TM>x<TN>"
/// (cuda_matmul_regtile), "..._db" double-buffered. mls::Error "--config '<name>' ..." for any other name, or sizes that are
/// not positive with TM dividing BM and TN dividing BN.
inline CudaWorkload cuda_matmul_by_name(const std::string& cfg, std::int64_t m, std::int64_t n, std::int64_t k) {
  long long a = 0, b = 0, c = 0, d = 0, e = 0;
  int used = 0;
  if (std::sscanf(cfg.c_str(), "t%lld%n", &a, &used) == 1 && used == static_cast<int>(cfg.size()) && a >= 1)
    return cuda_matmul_local(m, n, k, a);
  used = 0;
  if (std::sscanf(cfg.c_str(), "bm%lldx%lld_bk%lld_tm%lldx%lld%n", &a, &b, &c, &d, &e, &used) == 5 &&
      (cfg.substr(static_cast<std::size_t>(used)).empty() || cfg.substr(static_cast<std::size_t>(used)) == "_db")) {
    MLS_CHECK(a >= 1 && b >= 1 && c >= 1 && d >= 1 && e >= 1 && a % d == 0 && b % e == 0, "--config '", cfg,
              "': expected positive sizes with TM dividing BM and TN dividing BN");
    return cuda_matmul_regtile(m, n, k, {a, b, c, d, e, cfg.substr(static_cast<std::size_t>(used)) == "_db"});
  }
  mls::fail("--config '", cfg, "' is not a schedule; expected t<T> (e.g. t32) or ",
            "bm<BM>x<BN>_bk<BK>_tm<TM>x<TN>[_db] (e.g. bm128x128_bk8_tm8x8, bm128x128_bk8_tm8x8_db)");
}

/// The schedules mls-te-cuda-bench times by default: the one-output-per-thread baseline, then the
/// register-tiled ones (256 threads each).
inline std::vector<std::string> cuda_matmul_bench_configs() {
  return {"t32",
          "bm64x64_bk8_tm4x4",
          "bm64x64_bk8_tm4x4_db",
          "bm128x64_bk8_tm8x4",
          "bm128x128_bk8_tm8x8",
          "bm128x128_bk8_tm8x8_db",
          "bm128x128_bk16_tm8x8_db"};
}

/// Y = softmax of each row of X (rows x cols) as three kernels (compute_at needs a single consumer,
/// and M and S each have two): M = the row's max, S = sum_j exp(X - M), Y = exp(X - M) / S. M and S
/// (the workspace) have a thread per row (rows in blocks of 32); Y a thread per element (the fused
/// index in blocks of 128: a tail where 128 does not divide rows * cols).
inline CudaWorkload cuda_softmax(std::int64_t rows, std::int64_t cols) {
  te::Tensor X = te::placeholder("X", {rows, cols});
  te::IterVar k1 = te::reduce_axis(cols, "k");
  te::Tensor M = te::compute("M", {rows}, [&](te::Var i) { return te::max_reduce(X(i, k1), {k1}); }, {"i"});
  te::IterVar k2 = te::reduce_axis(cols, "k");
  te::Tensor S = te::compute("S", {rows}, [&](te::Var i) { return te::sum(te::exp(X(i, k2) - M(i)), {k2}); }, {"i"});
  te::Tensor Y = te::compute("Y", {rows, cols}, [&](te::Var i, te::Var j) { return te::exp(X(i, j) - M(i)) / S(i); },
                             {"i", "j"});
  te::Schedule s({Y});
  for (const te::Tensor& t : {M, S}) {
    auto [o, i] = s[t].split(t.axis(0), 32);
    s[t].bind(o, te::ThreadTag::BlockX);
    s[t].bind(i, te::ThreadTag::ThreadX);
  }
  auto [o, i] = s[Y].split(s[Y].fuse(Y.axis(0), Y.axis(1), "f"), 128);
  s[Y].bind(o, te::ThreadTag::BlockX);
  s[Y].bind(i, te::ThreadTag::ThreadX);
  return {"softmax", {X}, {Y}, s, cols};
}

/// D = relu(A * B + C) * 0.5 elementwise on (rows x cols), the intermediates computed at the output's
/// thread: the whole chain in one kernel, 256 threads per block over the fused index.
inline CudaWorkload cuda_elementwise(std::int64_t rows, std::int64_t cols) {
  te::Tensor A = te::placeholder("A", {rows, cols});
  te::Tensor B = te::placeholder("B", {rows, cols});
  te::Tensor C = te::placeholder("C", {rows, cols});
  te::Tensor T = te::compute("T", {rows, cols}, [&](te::Var i, te::Var j) { return A(i, j) * B(i, j) + C(i, j); },
                             {"i", "j"});
  te::Tensor R = te::compute("R", {rows, cols}, [&](te::Var i, te::Var j) { return te::max(T(i, j), 0.0f); },
                             {"i", "j"});
  te::Tensor D = te::compute("D", {rows, cols}, [&](te::Var i, te::Var j) { return R(i, j) * 0.5f; }, {"i", "j"});
  te::Schedule s({D});
  te::IterVar f = s[D].fuse(D.axis(0), D.axis(1), "f");
  auto [fo, fi] = s[D].split(f, 256);
  s[D].bind(fo, te::ThreadTag::BlockX);
  s[D].bind(fi, te::ThreadTag::ThreadX);
  s[R].compute_at(s[D], fi);
  s[T].compute_at(s[R], R.axis(1));
  return {"elementwise", {A, B, C}, {D}, s, 1};
}

}  // namespace kernels_test
