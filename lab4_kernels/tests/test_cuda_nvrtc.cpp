// Lab 4 part 2: NVRTC compiles the CUDA source of generate_cuda (no GPU needed: PTX for compute_80
// where there is none). Where NVRTC itself cannot run (its builtins library missing), each test says
// "SKIPPED: NVRTC ..." (CTest reports it as skipped).
#include <catch2/catch.hpp>

#include <string>

#include "mls/common/error.hpp"
#include "mls/kernels/cuda.hpp"
#include "mls/kernels/cuda_jit.hpp"
#include "te_cuda_workloads.hpp"

using namespace kernels_test;
using Catch::Contains;

#define REQUIRE_NVRTC()                                     \
  do {                                                      \
    std::string why_;                                       \
    if (!te::nvrtc_usable(&why_)) {                         \
      WARN("SKIPPED: NVRTC cannot compile here (" << why_ << ")"); \
      return;                                               \
    }                                                       \
  } while (0)

namespace {
/// NVRTC compiles the workload's source; its PTX has an entry per kernel.
void check_compiles(const CudaWorkload& w, const te::NvrtcOptions& options = {}) {
  const te::CudaSource cu = te::generate_cuda(te::lower(w.schedule, w.name));
  INFO(w.name << ": " << cu.source);
  const te::Ptx ptx = te::nvrtc_compile(cu.source, w.name + ".cu", options);
  CHECK_THAT(ptx.text, Contains(".version"));
  for (const auto& k : cu.kernels) CHECK_THAT(ptx.text, Contains(".entry " + k.name + "("));
}
}  // namespace

TEST_CASE("nvrtc: the version and the flags", "[lab4][nvrtc]") {
  REQUIRE_NVRTC();
  CHECK_THAT(te::nvrtc_version(), Contains("NVRTC "));
  const auto flags = te::nvrtc_flags({"compute_90", false, {"-lineinfo"}});
  REQUIRE(flags.size() == 4);
  CHECK(flags[0] == "--gpu-architecture=compute_90");
  CHECK(flags[2] == "--fmad=false");
  CHECK(flags[3] == "-lineinfo");
  CHECK(te::default_nvrtc_arch().rfind("compute_", 0) == 0);
}

TEST_CASE("nvrtc: every generated kernel compiles (matmul, softmax, elementwise)", "[lab4][nvrtc]") {
  REQUIRE_NVRTC();
  check_compiles(cuda_matmul(37, 50, 29));
  check_compiles(cuda_matmul(64, 64, 64, 32), {"compute_90", false, {}});
  check_compiles(cuda_matmul(37, 50, 29, 16, true));
  check_compiles(cuda_matmul_local(37, 50, 29));
  check_compiles(cuda_matmul_local(1, 1, 1, 32));
  check_compiles(cuda_softmax(45, 19));
  check_compiles(cuda_softmax(1, 1));
  check_compiles(cuda_elementwise(13, 21));
  check_compiles(cuda_elementwise(1, 1));
}

TEST_CASE("nvrtc: the register-tiled matmul compiles (float4 fills, unrolled micro-tiles, tails)", "[lab4][nvrtc]") {
  REQUIRE_NVRTC();
  check_compiles(cuda_matmul_regtile(1024, 1024, 1024, {128, 128, 8, 8, 8}));
  check_compiles(cuda_matmul_regtile(1024, 1024, 1024, {64, 64, 8, 4, 4}));
  check_compiles(cuda_matmul_regtile(37, 52, 36, {16, 16, 8, 4, 4}));
  check_compiles(cuda_matmul_regtile(37, 52, 36, {16, 16, 8, 4, 4, true}));
  check_compiles(cuda_matmul_regtile(37, 50, 29, {32, 16, 4, 8, 2}), {"compute_90", false, {}});
  for (const auto& cfg : cuda_matmul_bench_configs()) check_compiles(cuda_matmul_by_name(cfg, 2048, 2048, 2048));
}

TEST_CASE("nvrtc: a compile error shows NVRTC's log and the numbered source", "[lab4][nvrtc]") {
  REQUIRE_NVRTC();
  const std::string bad = "extern \"C\" __global__ void k(float* x) {\n    x[0] = undeclared_name;\n}\n";
  REQUIRE_THROWS_WITH(te::nvrtc_compile(bad, "bad.cu", {"compute_80", true, {}}),
                      Contains("nvrtc: cannot compile 'bad.cu' (--gpu-architecture=compute_80") &&
                          Contains("undeclared_name") && Contains("2 |     x[0] = undeclared_name;"));
  REQUIRE_THROWS_WITH(te::nvrtc_compile("__global__ void k() {}\n", "arch.cu", {"compute_1", true, {}}),
                      Contains("nvrtc: ") && Contains("arch.cu"));
}

TEST_CASE("compile_cuda: without a GPU, a named error", "[lab4][nvrtc]") {
  std::string why;
  if (mls::kernels::cuda::available(&why)) {
    WARN("SKIPPED: a GPU is present (this test checks the error without one)");
    return;
  }
  const CudaWorkload w = cuda_elementwise(4, 4);
  REQUIRE_THROWS_WITH(te::compile_cuda(te::lower(w.schedule, "chain")),
                      Contains("compile_cuda: no usable GPU for 'chain'"));
}
