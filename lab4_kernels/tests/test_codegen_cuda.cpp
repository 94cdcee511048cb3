// Lab 4 part 2: thread bindings, shared-memory tiles and the CUDA code generator, on the CPU (no CUDA
// needed): the source's structure and launch, the illegal schedules' errors, and the interpreter on
// bound schedules against the naive evaluation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/kernels/codegen.hpp"
#include "mls/kernels/codegen_cuda.hpp"
#include "cuda_emulator.hpp"
#include "te_check.hpp"
#include "te_cuda_workloads.hpp"
#include "te_workloads.hpp"

using namespace kernels_test;
using Catch::Contains;
using te::ThreadTag;

namespace {
std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// The interpreter on the workload's bound schedule equals the naive evaluation of its definitions.
void check_interpreter(const CudaWorkload& w, std::uint64_t seed) {
  const auto in = random_inputs(w.inputs, seed);
  const auto got = run_schedule(w.schedule, w.inputs, in);
  const auto want = run_naive(w.inputs, in, w.outputs);
  for (std::size_t o = 0; o < got.size(); ++o)
    require_close(got[o], want[o], reduction_tol(w.reduction), w.name + " " + w.outputs[o].name());
}
}  // namespace

TEST_CASE("launch_dims: bound loops set the grid and the block, within CUDA's limits", "[lab4][te_cuda]") {
  const te::LaunchDims d = te::launch_dims({{ThreadTag::BlockY, 3}, {ThreadTag::BlockX, 5}, {ThreadTag::ThreadY, 16},
                                            {ThreadTag::ThreadX, 8}},
                                           "k");
  CHECK(d.grid == std::array<std::int64_t, 3>{5, 3, 1});
  CHECK(d.block == std::array<std::int64_t, 3>{8, 16, 1});
  CHECK(d.threads_per_block() == 128);
  CHECK(d.to_string() == "grid (5, 3, 1) x block (8, 16, 1)");
  const te::LaunchDims none = te::launch_dims({}, "k");
  CHECK(none.threads_per_block() == 1);
  CHECK(none.grid == std::array<std::int64_t, 3>{1, 1, 1});
  REQUIRE_THROWS_WITH(te::launch_dims({{ThreadTag::ThreadX, 32}, {ThreadTag::ThreadY, 33}}, "k"),
                      Contains("1056 threads per block") && Contains("at most 1024"));
  REQUIRE_THROWS_WITH(te::launch_dims({{ThreadTag::ThreadZ, 65}}, "k"), Contains("threadIdx.z to 65"));
  REQUIRE_THROWS_WITH(te::launch_dims({{ThreadTag::BlockY, 70000}}, "k"), Contains("at most 65535"));
  REQUIRE_THROWS_WITH(te::launch_dims({{ThreadTag::BlockX, 2}, {ThreadTag::BlockX, 3}}, "k"),
                      Contains("binds blockIdx.x twice"));
  REQUIRE_THROWS_WITH(te::launch_dims({{ThreadTag::None, 2}}, "k"), Contains("without a GPU index"));
  REQUIRE_THROWS_WITH(te::launch_dims({{ThreadTag::BlockX, 0}}, "k"), Contains("extent 0"));
}

TEST_CASE("thread_tag_name and the printer of bound loops and shared tiles", "[lab4][te_cuda]") {
  CHECK(std::string(te::thread_tag_name(ThreadTag::BlockX)) == "blockIdx.x");
  CHECK(std::string(te::thread_tag_name(ThreadTag::ThreadZ)) == "threadIdx.z");
  CHECK(te::is_thread_index(ThreadTag::ThreadY));
  CHECK_FALSE(te::is_thread_index(ThreadTag::BlockY));
  const CudaWorkload w = cuda_matmul(40, 24, 20);
  const std::string text = te::to_string(te::lower(w.schedule, "matmul"));
  CHECK_THAT(text, Contains("for io in thread_binding(3, \"blockIdx.y\"):"));
  CHECK_THAT(text, Contains("for ji in thread_binding(16, \"threadIdx.x\"):"));
  CHECK_THAT(text, Contains("A_shared = allocate((16, 16), shared)"));
  CHECK_THAT(text, Contains("B_shared = allocate((16, 16), shared)"));
  REQUIRE_THROWS_WITH(te::make_for(te::Var("x"), 0, 4, te::ForKind::ThreadBinding, te::make_seq({})),
                      Contains("make_for: loop 'x'") && Contains("needs a tag"));
}

TEST_CASE("the interpreter on bound schedules equals the naive evaluation (awkward sizes)", "[lab4][te_cuda]") {
  std::uint64_t seed = 1;
  for (auto [m, n, k] : {std::array<std::int64_t, 3>{1, 1, 1}, {17, 31, 13}, {32, 16, 48}, {37, 5, 40}})
    check_interpreter(cuda_matmul(m, n, k), seed++);
  check_interpreter(cuda_matmul(19, 23, 29, 8), seed++);
  check_interpreter(cuda_matmul_local(37, 19, 33), seed++);
  check_interpreter(cuda_matmul_local(1, 1, 1, 32), seed++);
  check_interpreter(cuda_matmul_regtile(37, 50, 29, {16, 16, 8, 4, 4}), seed++);
  check_interpreter(cuda_matmul_regtile(1, 1, 1, {16, 16, 8, 4, 4}), seed++);
  check_interpreter(cuda_matmul_regtile(70, 33, 20, {32, 16, 4, 8, 2}), seed++);
  for (auto [r, c] : {std::array<std::int64_t, 2>{1, 1}, {7, 13}, {33, 64}, {3, 129}}) {
    check_interpreter(cuda_softmax(r, c), seed++);
    check_interpreter(cuda_elementwise(r, c), seed++);
  }
}

TEST_CASE("generate_cuda: the slide's matmul with bound loops and shared tiles of A and B", "[lab4][te_cuda]") {
  const CudaWorkload w = cuda_matmul(37, 50, 29);
  const te::CudaSource cu = te::generate_cuda(te::lower(w.schedule, "matmul"));
  INFO(cu.source);
  REQUIRE(cu.kernels.size() == 1);
  const te::CudaKernelInfo& k = cu.kernels[0];
  CHECK(k.name == "matmul");
  CHECK(k.dims.grid == std::array<std::int64_t, 3>{4, 3, 1});  // ceil(50 / 16) x ceil(37 / 16) blocks
  CHECK(k.dims.block == std::array<std::int64_t, 3>{16, 16, 1});
  CHECK(k.shared_bytes == 2 * 16 * 16 * 4);
  CHECK(cu.num_args == 3);
  REQUIRE(cu.params.size() == 3);
  CHECK(cu.params[2]->name == "C");
  const std::string& s = cu.source;
  CHECK_THAT(s, Contains("extern \"C\" __global__ void __launch_bounds__(256) matmul(float* __restrict__ A, "
                         "float* __restrict__ B, float* __restrict__ C)"));
  CHECK_THAT(s, Contains("__shared__ __align__(16) float A_shared[256];"));
  CHECK_THAT(s, Contains("__shared__ __align__(16) float B_shared[256];"));
  CHECK_THAT(s, Contains("const long long io = blockIdx.y;"));
  CHECK_THAT(s, Contains("const long long jo = blockIdx.x;"));
  CHECK_THAT(s, Contains("const long long ii = threadIdx.y;"));
  CHECK_THAT(s, Contains("const long long ji = threadIdx.x;"));
  CHECK_THAT(s, Contains("mls_e += 256"));  // the cooperative fill
  CHECK(count(s, "__syncthreads();") == 2);  // after the fills, and before the next ones
  CHECK(s.find("A_shared filled") == std::string::npos);  // one barrier for both fills
  CHECK_THAT(s, Contains("A_shared, B_shared filled"));
  // The tails of i and j guard the update, not the fills (every thread reaches the barriers).
  const std::size_t fill = s.find("mls_e = mls_tid"), guard = s.rfind("if (io*16 + ii < 37 && jo*16 + ji < 50) {");
  CHECK(fill != std::string::npos);
  CHECK(guard != std::string::npos);
  CHECK(guard > fill);
  CHECK(s.find("#include") == std::string::npos);
  const std::string unrolled = te::generate_cuda(te::lower(cuda_matmul(37, 50, 29, 16, true).schedule, "mm")).source;
  CHECK_THAT(unrolled, Contains("#pragma unroll\n") && Contains("for (long long ki = 0; ki < 16; ++ki) {"));
}

TEST_CASE("generate_cuda: the matmul with a local accumulator, its shared tiles the block's", "[lab4][te_cuda]") {
  const CudaWorkload w = cuda_matmul_local(37, 50, 29);
  const te::CudaSource cu = te::generate_cuda(te::lower(w.schedule, "matmul"));
  INFO(cu.source);
  REQUIRE(cu.kernels.size() == 1);
  CHECK(cu.kernels[0].shared_bytes == 2048);  // two 16 x 16 tiles, not a thread's row and column
  CHECK(cu.kernels[0].dims.to_string() == "grid (4, 3, 1) x block (16, 16, 1)");
  CHECK_THAT(cu.source, Contains("float CL[1];"));
  CHECK_THAT(cu.source, Contains("A_shared[ax0*16 + ax1] = A[io*464 + ax0*29 + ko*16 + ax1];"));
  CHECK(count(cu.source, "__syncthreads();") == 2);
}

TEST_CASE("generate_cuda: softmax rows as three kernels with a workspace", "[lab4][te_cuda]") {
  const CudaWorkload w = cuda_softmax(45, 19);
  const te::CudaSource cu = te::generate_cuda(te::lower(w.schedule, "softmax"));
  INFO(cu.source);
  REQUIRE(cu.kernels.size() == 3);
  CHECK(cu.kernels[0].name == "softmax_M");
  CHECK(cu.kernels[1].name == "softmax_S");
  CHECK(cu.kernels[2].name == "softmax_Y");
  CHECK(cu.kernels[0].dims.grid[0] == 2);  // ceil(45 / 32)
  CHECK(cu.kernels[0].dims.block[0] == 32);
  CHECK(cu.kernels[2].dims.grid[0] == 7);  // ceil(45 * 19 / 128)
  CHECK(cu.kernels[2].dims.block[0] == 128);
  CHECK(cu.num_args == 2);
  REQUIRE(cu.params.size() == 4);  // X, Y, then the workspace M and S
  CHECK(cu.params[2]->name + cu.params[3]->name == "MS");
  CHECK_THAT(cu.source, Contains("(workspace)"));
  CHECK_THAT(cu.source, Contains("expf("));
  CHECK_THAT(cu.source, Contains("fmaxf("));
  CHECK(count(cu.source, "__global__") == 3);
  CHECK(count(cu.source, "__syncthreads") == 0);
}

TEST_CASE("generate_cuda: an elementwise chain in one kernel over a fused index", "[lab4][te_cuda]") {
  const CudaWorkload w = cuda_elementwise(13, 21);
  const te::CudaSource cu = te::generate_cuda(te::lower(w.schedule, "chain"));
  INFO(cu.source);
  REQUIRE(cu.kernels.size() == 1);
  CHECK(cu.kernels[0].name == "chain");
  CHECK(cu.kernels[0].dims.grid == std::array<std::int64_t, 3>{2, 1, 1});  // ceil(273 / 256)
  CHECK(cu.kernels[0].dims.block == std::array<std::int64_t, 3>{256, 1, 1});
  CHECK(cu.params.size() == 6);  // A, B, C, D, workspace T, R
  CHECK_THAT(cu.source, Contains("if (fo*256 + fi < 273) {"));
  CHECK_THAT(cu.source, Contains("fmaxf("));
}

TEST_CASE("bind: illegal requests are named errors", "[lab4][te_cuda]") {
  CudaWorkload w = cuda_matmul(32, 32, 32);
  te::Tensor C = w.outputs[0];
  te::Schedule s({C});
  auto [ko, ki] = s[C].split(C.reduce_axis(0), 8);
  REQUIRE_THROWS_WITH(s[C].bind(ki, ThreadTag::ThreadX),
                      Contains("bind: axis 'ki' of stage 'C' is a reduction axis") && Contains("rfactor"));
  REQUIRE_THROWS_WITH(s[C].bind(C.axis(0), ThreadTag::None), Contains("bind: axis 'i' of stage 'C'") &&
                                                                 Contains("ThreadTag::None is not a GPU index"));
  s[C].bind(C.axis(0), ThreadTag::ThreadX);
  REQUIRE_THROWS_WITH(s[C].bind(C.axis(1), ThreadTag::ThreadX),
                      Contains("bind: axis 'j' of stage 'C' cannot be bound to threadIdx.x: axis 'i'"));
  s[C].bind(C.axis(0), ThreadTag::ThreadY);  // rebinding the same axis is allowed
  s[C].bind(C.axis(1), ThreadTag::ThreadX);
  REQUIRE_THROWS_WITH(s[C].bind(ko, ThreadTag::ThreadZ), Contains("is a reduction axis"));
  te::Tensor AS = s.cache_read(w.inputs[0], s[C], ko, te::Scope::Shared);
  CHECK(AS.name() == "A_shared");
  REQUIRE_THROWS_WITH(s[AS].bind(s[AS].leaf_axes()[0], ThreadTag::ThreadX),
                      Contains("bind: stage 'A_shared' is a shared-memory copy"));
  REQUIRE_THROWS_WITH(s.cache_read(w.inputs[1], s[C], ko, te::Scope::Global),
                      Contains("cache_read: scope global for 'B' is not a cache"));
}

TEST_CASE("bind: the launch rule is checked when lowering", "[lab4][te_cuda]") {
  SECTION("a bound loop inside an unbound one of its stage") {
    CudaWorkload w = cuda_elementwise(16, 16);
    te::Tensor D = w.outputs[0];
    te::Schedule s({D});
    s[D].bind(D.axis(1), ThreadTag::ThreadX);
    REQUIRE_THROWS_WITH(te::lower(s), Contains("bind: axis 'j' of stage 'D' is bound to threadIdx.x but lies inside "
                                               "the unbound loop 'i'") &&
                                          Contains("reorder them outwards"));
  }
  SECTION("a bound loop of a stage computed inside another") {
    CudaWorkload w = cuda_elementwise(16, 16);
    te::Tensor D = w.outputs[0];
    te::Tensor R = te::topo_order({D})[4];
    REQUIRE(R.name() == "R");
    te::Schedule s({D});
    s[D].bind(D.axis(0), ThreadTag::BlockX);
    s[R].compute_at(s[D], D.axis(0));
    s[R].bind(R.axis(1), ThreadTag::ThreadX);
    REQUIRE_THROWS_WITH(te::lower(s), Contains("bind: axis 'j' of stage 'R' is bound to threadIdx.x, but the stage is "
                                               "computed inside 'D'"));
  }
}

TEST_CASE("generate_cuda and generate_cpp: what each refuses", "[lab4][te_cuda]") {
  SECTION("the C++ generator: bind is for CUDA") {
    const CudaWorkload w = cuda_elementwise(4, 4);
    REQUIRE_THROWS_WITH(te::generate_cpp(te::lower(w.schedule, "chain")),
                        Contains("generate_cpp: loop 'f") && Contains("of 'chain' is bound to") &&
                            Contains("bind is for CUDA"));
  }
  SECTION("threads that write the same element") {
    te::Tensor X = te::placeholder("X", {8, 8});
    te::IterVar k = te::reduce_axis(8, "k");
    te::Tensor M = te::compute("M", {8}, [&](te::Var i) { return te::max_reduce(X(i, k), {k}); }, {"i"});
    te::Tensor Y = te::compute("Y", {8, 8}, [&](te::Var i, te::Var j) { return X(i, j) - M(i); }, {"i", "j"});
    te::Schedule s({Y});
    s[Y].bind(Y.axis(0), ThreadTag::BlockX);
    s[Y].bind(Y.axis(1), ThreadTag::ThreadX);
    s[M].compute_at(s[Y], Y.axis(1));  // every thread j of the row recomputes M[i]
    REQUIRE_THROWS_WITH(te::generate_cuda(te::lower(s, "sub_max")),
                        Contains("generate_cuda: the threads of loop 'j' (threadIdx.x) of kernel 'sub_max' may write "
                                 "the same element of 'M'"));
  }
  SECTION("too many threads, too much shared memory") {
    const CudaWorkload big = cuda_matmul(64, 64, 64, 64);  // 4096 threads per block
    REQUIRE_THROWS_WITH(te::generate_cuda(te::lower(big.schedule, "mm")),
                        Contains("kernel 'mm' has 4096 threads per block"));
    te::Tensor A = te::placeholder("A", {1024, 256});
    te::Tensor B = te::compute("B", {256, 1024}, [&](te::Var i, te::Var j) { return A(j, i); }, {"i", "j"});
    te::Schedule s({B});
    auto [io, ii] = s[B].split(B.axis(0), 16);
    s[B].bind(io, ThreadTag::BlockX);
    s[B].bind(ii, ThreadTag::ThreadX);
    s.cache_read(A, s[B], ii, te::Scope::Shared);  // the block's window of A: 1024 x 16 floats
    REQUIRE_THROWS_WITH(te::generate_cuda(te::lower(s, "tr")),
                        Contains("kernel 'tr' needs 65536 bytes of __shared__ memory"));
  }
  SECTION("a bound loop with a non-constant extent or nested under a serial loop (hand-made IR)") {
    te::Tensor A = te::placeholder("A", {4});
    te::Var i("i"), n("n"), t("t");
    te::Stmt store = te::make_store(A.buffer(), {te::Expr(t)}, 1.0f);
    te::LoweredFunc f{"hand", {A.buffer()}, te::make_for(t, 0, te::Expr(n), te::ForKind::ThreadBinding, store,
                                                         ThreadTag::ThreadX)};
    REQUIRE_THROWS_WITH(te::generate_cuda(f), Contains("loop 't' of kernel 'hand' is bound to threadIdx.x with a "
                                                       "non-constant extent n"));
    f.body = te::make_for(i, 0, 2, te::ForKind::Serial, te::make_for(t, 0, 2, te::ForKind::ThreadBinding,
                                                                       te::make_store(A.buffer(), {te::Expr(i) * 2 + t}, 1.0f),
                                                                       ThreadTag::ThreadX));
    REQUIRE_THROWS_WITH(te::generate_cuda(f), Contains("loop 't' of kernel 'hand' is bound to threadIdx.x but lies "
                                                       "inside an unbound loop"));
  }
  SECTION("a tensorized tile") {
    const SlideMatmul m = slide_matmul(8);
    te::Schedule s({m.C});
    s[m.C].tensorize(m.C.axis(0), te::gemm_intrinsic(8, 8, 8));
    REQUIRE_THROWS_WITH(te::generate_cuda(te::lower(s, "t")), Contains("intrinsics are CPU code"));
  }
}

TEST_CASE("shared cache_read on the CPU: the C++ generator makes it a local tile", "[lab4][te_cuda]") {
  const SlideMatmul m = slide_matmul(24);
  te::Schedule s({m.C});
  auto t = s[m.C].tile(m.C.axis(0), m.C.axis(1), 8, 8);
  auto [ko, ki] = s[m.C].split(m.k, 8);
  s[m.C].reorder({t.outer0, t.outer1, ko, t.inner0, t.inner1, ki});
  s.cache_read(m.A, s[m.C], ko, te::Scope::Shared);
  const std::string src = te::generate_cpp(te::lower(s, "mm"));
  CHECK_THAT(src, Contains("float A_shared[64];  // A_shared: (8, 8), shared (local on the CPU)"));
  const auto in = random_inputs({m.A, m.B}, 7);
  require_close(run_schedule(s, {m.A, m.B}, in)[0], run_naive({m.A, m.B}, in, {m.C})[0], reduction_tol(24), "mm");
}

TEST_CASE("generate_cuda's source, emulated on the CPU (a thread per CUDA thread), equals the interpreter",
          "[lab4][te_cuda][emulated]") {
  // A C++ compiler runs (the JIT's); the threads of each block race for real, __syncthreads() is a barrier.
  std::uint64_t seed = 500;
  const std::vector<CudaWorkload> workloads = {
      cuda_matmul(37, 50, 29), cuda_matmul(1, 1, 1),    cuda_matmul(19, 23, 29, 8, true), cuda_matmul_local(17, 31, 13),
      cuda_matmul_local(1, 1, 1), cuda_softmax(45, 19), cuda_softmax(1, 1),         cuda_elementwise(13, 21),
      cuda_elementwise(1, 1)};
  for (const CudaWorkload& w : workloads) {
    const te::LoweredFunc f = te::lower(w.schedule, w.name);
    const te::CudaSource cu = te::generate_cuda(f);
    const auto in = random_inputs(w.inputs, seed++);
    const auto want = run_lowered(f, w.inputs, in, w.outputs);
    auto in_copy = in;
    const auto got = run_bound(w.inputs, in_copy, w.outputs, [&](te::Bindings& b) {
      std::vector<std::span<float>> args;
      for (const auto& a : f.args) args.push_back(*b.find(a.get()));
      emulate_cuda(cu, args);
    });
    for (std::size_t o = 0; o < got.size(); ++o)
      require_close(got[o], want[o], reduction_tol(w.reduction), "emulated " + w.name + " " + w.outputs[o].name());
  }
}


TEST_CASE("the register-tiled matmul's loop nest: block, thread and micro-tile loops, its sums in registers",
          "[lab4][te_cuda]") {
  const CudaWorkload w = cuda_matmul_regtile(256, 256, 64, {128, 128, 8, 8, 8});
  const std::string text = te::to_string(te::lower(w.schedule, "mm"));
  INFO(text);
  CHECK_THAT(text, Contains("for by in thread_binding(2, \"blockIdx.y\"):"));
  CHECK_THAT(text, Contains("for bx in thread_binding(2, \"blockIdx.x\"):"));
  CHECK_THAT(text, Contains("for ty in thread_binding(16, \"threadIdx.y\"):"));
  CHECK_THAT(text, Contains("for tx in thread_binding(16, \"threadIdx.x\"):"));
  CHECK_THAT(text, Contains("CL = allocate((8, 8), local)"));  // the thread's micro-tile, exactly
  CHECK_THAT(text, Contains("A_shared = allocate((8, 128), shared)"));  // transposed: rows of k
  CHECK_THAT(text, Contains("B_shared = allocate((8, 128), shared)"));
  CHECK_THAT(text, Contains("A_shared[ax0][ax1] = A[by*128 + ax1][ko*8 + ax0]"));
  CHECK_THAT(text, Contains("CL[i][j] += A_shared[ki][ty*8 + i] * B_shared[ki][tx*8 + j]"));
  CHECK_THAT(text, Contains("for ki in unrolled(8):"));
  CHECK_THAT(text, Contains("for i in unrolled(8):"));
  CHECK_THAT(text, Contains("for xx in unrolled(8):"));
  CHECK(text.find("if ") == std::string::npos);  // every tile divides: no guard
}

TEST_CASE("cuda_matmul_by_name: the benchmark's schedules by name, bad names are named errors", "[lab4][te_cuda]") {
  CHECK(cuda_matmul_by_name("t16", 8, 8, 8).name == "matmul_local");
  CHECK(cuda_matmul_by_name("bm128x64_bk8_tm8x4", 8, 8, 8).name == "matmul_regtile_bm128x64_bk8_tm8x4");
  for (const auto& cfg : cuda_matmul_bench_configs()) CHECK_NOTHROW(cuda_matmul_by_name(cfg, 8, 8, 8));
  CHECK(cuda_matmul_by_name("bm64x64_bk8_tm4x4_db", 8, 8, 8).name == "matmul_regtile_bm64x64_bk8_tm4x4_db");
  for (const char* bad : {"t", "t0", "t16x", "bm12x", "bm64x64_bk8_tm4x4_", "bm64x64_bk8_tm4x4_dbx", "tile", ""})
    REQUIRE_THROWS_WITH(cuda_matmul_by_name(bad, 8, 8, 8),
                        Contains(std::string("--config '") + bad + "' is not a schedule"));
  REQUIRE_THROWS_WITH(cuda_matmul_by_name("bm64x64_bk8_tm3x4", 8, 8, 8),
                      Contains("--config 'bm64x64_bk8_tm3x4': expected positive sizes with TM dividing BM"));
}

TEST_CASE("generate_cuda: the register-tiled matmul, float4 fills where the rows allow", "[lab4][te_cuda]") {
  SECTION("aligned: every row a multiple of 4 floats") {
    const te::CudaSource cu = te::generate_cuda(te::lower(cuda_matmul_regtile(256, 256, 64, {128, 128, 8, 8, 8}).schedule, "mm"));
    INFO(cu.source);
    REQUIRE(cu.kernels.size() == 1);
    CHECK(cu.kernels[0].dims.to_string() == "grid (2, 2, 1) x block (16, 16, 1)");
    CHECK(cu.kernels[0].shared_bytes == 2 * 8 * 128 * 4);
    CHECK_THAT(cu.source, Contains("__launch_bounds__(256)"));
    CHECK_THAT(cu.source, Contains("float CL[64];  // CL: [8, 8], local (this thread's)"));
    CHECK_THAT(cu.source, Contains("__shared__ __align__(16) float A_shared[1024];"));
    // 1024 elements, 256 threads: one float4 each; A's is stored transposed (4 scalars), B's as a float4
    CHECK(count(cu.source, "for (long long mls_e = mls_tid; mls_e < 256; mls_e += 256) {") == 2);
    CHECK(count(cu.source, "const float4 mls_v = *reinterpret_cast<const float4*>(&") == 2);
    CHECK_THAT(cu.source, Contains("const long long ax0 = 4 * (mls_e % 2);"));  // A: k innermost, 2 float4s a row
    CHECK_THAT(cu.source, Contains("A_shared[ax0*128 + ax1 + 384] = mls_v.w;"));  // lane 3: row k + 3
    CHECK_THAT(cu.source, Contains("*reinterpret_cast<float4*>(&B_shared[ax0*128 + ax1]) = mls_v;"));
    CHECK_THAT(cu.source, Contains("(reinterpret_cast<unsigned long long>(A) & 15) == 0"));
    CHECK(count(cu.source, "#pragma unroll") >= 6);
    CHECK(count(cu.source, "__syncthreads();") == 2);
  }
  SECTION("K = 29: A's rows are not 16-byte aligned (scalar fill); B's are, with guarded tails") {
    const te::CudaSource cu = te::generate_cuda(te::lower(cuda_matmul_regtile(37, 52, 29, {16, 16, 8, 4, 4}).schedule, "mm"));
    INFO(cu.source);
    CHECK(count(cu.source, "reinterpret_cast<const float4*>") == 1);  // B's fill only
    CHECK_THAT(cu.source, Contains("A_shared[ax0*16 + ax1] = A[by*464 + ax1*29 + ko*8 + ax0];"));
    CHECK_THAT(cu.source, Contains("bx*16 + ax1 + 3 < 52"));  // the last lane's guard
    CHECK_THAT(cu.source, Contains("for (long long mls_q = 0; mls_q < 4; ++mls_q) {"));
  }
}

TEST_CASE("double_buffer: two copies of a shared tile, the next slice filled while this one is read", "[lab4][te_cuda]") {
  const CudaWorkload w = cuda_matmul_regtile(256, 256, 64, {128, 128, 8, 8, 8, true});
  const te::LoweredFunc f = te::lower(w.schedule, "mm");
  CHECK_THAT(te::to_string(f), Contains("A_shared = allocate((8, 128), shared, double_buffer)"));
  const te::CudaSource cu = te::generate_cuda(f);
  INFO(cu.source);
  CHECK(cu.kernels[0].shared_bytes == 2 * 2 * 8 * 128 * 4);
  CHECK_THAT(cu.source, Contains("__shared__ __align__(16) float A_shared[2048];"));
  CHECK_THAT(cu.source, Contains("two copies (double-buffered)"));
  CHECK(count(cu.source, "__syncthreads();") == 2);  // after the first fill, and once per slice
  CHECK_THAT(cu.source, Contains("const long long ko = 0;"));  // the prologue: slice 0 into copy 0
  CHECK_THAT(cu.source, Contains("if (ko + 1 < 8) {"));
  CHECK_THAT(cu.source, Contains("const long long ko_next = ko + 1;"));
  CHECK_THAT(cu.source, Contains("*reinterpret_cast<float4*>(&B_shared[((ko_next) & 1)*1024 + ax0*128 + ax1]) = mls_v;"));
  CHECK_THAT(cu.source, Contains("A_shared[((ko) & 1)*1024 + ki*128 + ty*8 + i]"));
  // The interpreter and the C++ generator ignore it; illegal on a stage that is not a shared copy.
  const auto in = random_inputs(w.inputs, 9);
  require_close(run_lowered(f, w.inputs, in, w.outputs)[0], run_naive(w.inputs, in, w.outputs)[0],
                reduction_tol(64), "double-buffered, interpreted");
  te::Schedule s = w.schedule;
  REQUIRE_THROWS_WITH(s[w.outputs[0]].double_buffer(),
                      Contains("double_buffer: stage 'C' is not a shared-memory copy"));
}

TEST_CASE("generate_cuda's register-tiled matmul, emulated on the CPU, equals the interpreter (tails, float4 fills, "
          "an unaligned pointer)",
          "[lab4][te_cuda][emulated]") {
  std::uint64_t seed = 700;
  struct Case {
    std::int64_t m, n, k;
    RegTile t;
  };
  const std::vector<Case> cases = {
      {37, 50, 29, {16, 16, 8, 4, 4}},  // nothing aligned: scalar fills, every tail
      {37, 52, 36, {16, 16, 8, 4, 4}},  // float4 fills; K's last slice half full: its groups element by element
      {64, 64, 32, {32, 32, 8, 4, 4}},  // every tile divides
      {1, 1, 1, {16, 16, 8, 4, 4}},
      {33, 20, 12, {32, 16, 4, 8, 2}},
      {130, 136, 20, {128, 128, 8, 8, 8}},  // the benchmark's tile: 256 threads, float4 fills, tails
      // double-buffered: several slices, a partial last one, one slice only, float4 and scalar fills
      {37, 50, 29, {16, 16, 8, 4, 4, true}},
      {37, 52, 36, {16, 16, 8, 4, 4, true}},
      {20, 24, 8, {16, 16, 8, 4, 4, true}},
      {1, 1, 1, {16, 16, 8, 4, 4, true}},
      {130, 136, 20, {128, 128, 8, 8, 8, true}}};
  for (const Case& c : cases) {
    const CudaWorkload w = cuda_matmul_regtile(c.m, c.n, c.k, c.t);
    const te::LoweredFunc f = te::lower(w.schedule, w.name);
    const te::CudaSource cu = te::generate_cuda(f);
    for (const bool shifted : {false, true}) {  // shifted: A one float past a 16-byte boundary
      INFO(w.name << " m=" << c.m << " n=" << c.n << " k=" << c.k << (shifted ? " (A unaligned)" : ""));
      const auto in = random_inputs(w.inputs, seed++);
      const auto want = run_lowered(f, w.inputs, in, w.outputs);
      std::vector<float> a(in[0].size() + 8), b = in[1], out(static_cast<std::size_t>(c.m * c.n), -7.0f);
      float* a0 = a.data();
      while (reinterpret_cast<std::uintptr_t>(a0) % 16 != 0) ++a0;
      if (shifted) ++a0;
      std::copy(in[0].begin(), in[0].end(), a0);
      std::vector<std::span<float>> args{std::span<float>(a0, in[0].size()), b, out};
      emulate_cuda(cu, args);
      require_close(out, want[0], reduction_tol(w.reduction), "emulated " + w.name);
    }
  }
}
