#pragma once
// GPU schedules of the tensor-expression workloads (lab 4 part 2, CUDA code generation), shared by
// the CPU tests of generate_cuda, its NVRTC tests and its GPU tests: the matmul of the slides tiled
// for a GPU with shared-memory tiles of A and B, softmax over rows, and an elementwise chain.
#include <cstdint>
#include <string>
#include <vector>

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

/// C (m x n) = A (m x k) * B (k x n): blocks of tile x tile outputs (blockIdx.y, blockIdx.x), a
/// thread per output (threadIdx.y, threadIdx.x), k in slices of `tile` with the slices of A and B in
/// shared memory (tails guarded on every axis). `unroll`: the slice's loop ki unrolled too.
inline CudaWorkload cuda_matmul(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t tile = 16,
                                bool unroll = false) {
  te::Tensor A = te::placeholder("A", {m, k});
  te::Tensor B = te::placeholder("B", {k, n});
  te::IterVar r = te::reduce_axis(k, "k");
  te::Tensor C = te::compute("C", {m, n}, [&](te::Var i, te::Var j) { return te::sum(A(i, r) * B(r, j), {r}); },
                             {"i", "j"});
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
  te::Tensor A = te::placeholder("A", {m, k});
  te::Tensor B = te::placeholder("B", {k, n});
  te::IterVar r = te::reduce_axis(k, "k");
  te::Tensor C = te::compute("C", {m, n}, [&](te::Var i, te::Var j) { return te::sum(A(i, r) * B(r, j), {r}); },
                             {"i", "j"});
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
