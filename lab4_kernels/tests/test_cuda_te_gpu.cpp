// Lab 4 part 2: generated CUDA kernels (generate_cuda, NVRTC, the driver) run on the GPU and compared
// with the interpreter of the same loop nest, on random inputs of awkward sizes (1, primes, tails of
// every tile). Without a GPU every test says "SKIPPED: no GPU" (CTest reports it as skipped).
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "mls/kernels/cuda.hpp"
#include "mls/kernels/cuda_jit.hpp"
#include "mls/testing.hpp"
#include "te_check.hpp"
#include "te_cuda_workloads.hpp"

using namespace kernels_test;
namespace cu = mls::kernels::cuda;

#define REQUIRE_GPU() MLS_REQUIRE_GPU(cu::available)

namespace {
/// Runs the workload's generated kernels and its interpreter on the same random inputs and checks
/// every output element: |gpu - interpreter| <= tol (1 + |interpreter|). A failure names the
/// workload, the kernels and their launch, the first differing elements (flat index and row/column),
/// and shows the generated source. `reference`: the outputs on these inputs when known (the
/// interpreter is not run then).
void check_on_gpu(const CudaWorkload& w, std::uint64_t seed, const std::string& size,
                  const std::vector<std::vector<float>>* reference = nullptr) {
  const te::LoweredFunc f = te::lower(w.schedule, w.name);
  const te::CudaJitKernel k = te::compile_cuda(f);
  const auto in = random_inputs(w.inputs, seed);
  const auto want = reference ? *reference : run_lowered(f, w.inputs, in, w.outputs);
  auto in_copy = in;
  const auto got = run_bound(w.inputs, in_copy, w.outputs, [&](te::Bindings& b) { k.run(b); });
  const double tol = reduction_tol(w.reduction);
  std::ostringstream kernels;
  for (const auto& ki : k.cuda().kernels) kernels << " " << ki.name << " [" << ki.dims.to_string() << "]";
  for (std::size_t o = 0; o < w.outputs.size(); ++o) {
    const std::vector<std::int64_t>& shape = w.outputs[o].shape();
    const std::int64_t cols = shape.back();
    std::ostringstream bad;
    long nbad = 0;
    for (std::size_t i = 0; i < got[o].size(); ++i) {
      const double g = got[o][i], r = want[o][i];
      if (std::isfinite(g) && std::fabs(g - r) <= tol * (1.0 + std::fabs(r))) continue;
      if (nbad++ < 5)
        bad << "  " << w.outputs[o].name() << "[" << i << "] (row " << static_cast<std::int64_t>(i) / cols << ", col "
            << static_cast<std::int64_t>(i) % cols << "): gpu " << g << ", interpreter " << r << "\n";
    }
    INFO(w.name << " " << size << " (kernels" << kernels.str() << "): " << nbad << " of " << got[o].size()
                << " elements of " << w.outputs[o].name() << " differ by more than " << tol
                << " (relative):\n" << bad.str() << "The generated source (" << w.name << ".cu):\n" << k.cuda().source);
    CHECK(nbad == 0);
  }
}
}  // namespace

TEST_CASE("cuda te: matmul with shared tiles of A and B, awkward sizes, tiles 16 and 32", "[lab4][gpu][te_cuda]") {
  REQUIRE_GPU();
  const std::int64_t sizes[][3] = {{1, 1, 1}, {7, 7, 7}, {17, 31, 13}, {37, 50, 29}, {64, 64, 64},
                                   {127, 129, 257}, {1, 256, 33}, {256, 1, 64}};
  std::uint64_t seed = 100;
  for (std::int64_t tile : {16, 32})
    for (const auto& s : sizes) {
      const std::string size = "m=" + std::to_string(s[0]) + " n=" + std::to_string(s[1]) + " k=" +
                               std::to_string(s[2]) + " tile=" + std::to_string(tile);
      check_on_gpu(cuda_matmul(s[0], s[1], s[2], tile), seed++, size);
      check_on_gpu(cuda_matmul_local(s[0], s[1], s[2], tile), seed++, size);
    }
  check_on_gpu(cuda_matmul(37, 50, 29, 16, true), seed++, "m=37 n=50 k=29 tile=16 (ki unrolled)");
}

TEST_CASE("cuda te: register-tiled matmul (micro-tiles in registers, float4 fills, double-buffered), awkward sizes and tiles",
          "[lab4][gpu][te_cuda]") {
  REQUIRE_GPU();
  // Sizes: 1, primes (every tail, scalar fills), multiples of 4 with tails (float4 fills, their guarded
  // groups element by element), whole tiles; tiles: the benchmark's and small odd ones.
  const std::int64_t sizes[][3] = {{1, 1, 1},     {7, 7, 7},     {37, 50, 29},   {37, 52, 36},  {64, 64, 64},
                                   {127, 129, 257}, {1, 256, 33}, {256, 1, 64},  {132, 200, 44}, {128, 256, 64}};
  const RegTile tiles[] = {{64, 64, 8, 4, 4},       {128, 64, 8, 8, 4},  {128, 128, 8, 8, 8},
                           {128, 128, 8, 8, 8, true}, {64, 64, 8, 4, 4, true}, {128, 128, 16, 8, 8, true},
                           {32, 16, 4, 8, 2, true}};
  std::uint64_t seed = 400;
  for (const auto& s : sizes) {
    // One reference per size: every tile's nest sums k in the same order, so the interpreter of the
    // first tile's nest serves them all (the same inputs: the same seed).
    const CudaWorkload first = cuda_matmul_regtile(s[0], s[1], s[2], tiles[0]);
    const auto reference = run_lowered(te::lower(first.schedule, first.name), first.inputs,
                                       random_inputs(first.inputs, seed), first.outputs);
    for (const RegTile& t : tiles) {
      const std::string size = "m=" + std::to_string(s[0]) + " n=" + std::to_string(s[1]) + " k=" +
                               std::to_string(s[2]) + " " + t.name();
      check_on_gpu(cuda_matmul_regtile(s[0], s[1], s[2], t), seed, size, &reference);
    }
    ++seed;
  }
}

TEST_CASE("cuda te: softmax rows (three kernels, a workspace)", "[lab4][gpu][te_cuda]") {
  REQUIRE_GPU();
  const std::int64_t sizes[][2] = {{1, 1}, {1, 7}, {7, 1}, {45, 19}, {33, 1000}, {1000, 33}, {131, 257}};
  std::uint64_t seed = 200;
  for (const auto& s : sizes)
    check_on_gpu(cuda_softmax(s[0], s[1]), seed++, "rows=" + std::to_string(s[0]) + " cols=" + std::to_string(s[1]));
}

TEST_CASE("cuda te: an elementwise chain over a fused index", "[lab4][gpu][te_cuda]") {
  REQUIRE_GPU();
  const std::int64_t sizes[][2] = {{1, 1}, {13, 21}, {1, 257}, {257, 1023}, {512, 512}};
  std::uint64_t seed = 300;
  for (const auto& s : sizes)
    check_on_gpu(cuda_elementwise(s[0], s[1]), seed++, "rows=" + std::to_string(s[0]) + " cols=" + std::to_string(s[1]));
}

TEST_CASE("cuda te: run checks its arguments, run_device takes device arrays", "[lab4][gpu][te_cuda]") {
  REQUIRE_GPU();
  const CudaWorkload w = cuda_elementwise(3, 5);
  const te::CudaJitKernel k = te::compile_cuda(te::lower(w.schedule, "chain"));
  std::vector<float> a(15, 1.0f), b(15, 2.0f), c(15, -1.0f), d(15, 0.0f), short_d(14);
  REQUIRE_THROWS_WITH(k.run(std::vector<std::span<float>>{a, b, c}), Catch::Contains("'chain' takes 4 buffers, got 3"));
  REQUIRE_THROWS_WITH(k.run(std::vector<std::span<float>>{a, b, c, short_d}),
                      Catch::Contains("buffer 'D' of 'chain' has 14 floats, its shape needs 15"));
  cu::DeviceBuffer da(15), db(15), dc(15), dd(15);
  cu::to_device(da.get(), a.data(), 15);
  cu::to_device(db.get(), b.data(), 15);
  cu::to_device(dc.get(), c.data(), 15);
  const std::vector<float*> ptrs{da.get(), db.get(), dc.get(), dd.get()};
  k.run_device(ptrs);
  cu::to_host(d.data(), dd.get(), 15);
  for (float x : d) CHECK(x == 0.5f);  // relu(1 * 2 - 1) * 0.5
}
