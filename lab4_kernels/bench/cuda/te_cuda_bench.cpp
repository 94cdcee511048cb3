// Lab 4 part 2: a generated CUDA matmul (tensor-expression schedule -> generate_cuda -> NVRTC) against
// cuBLAS (cublasSgemm, FP32). The schedule is tests/te_cuda_workloads.hpp's cuda_matmul_local: blocks
// of t x t outputs, a thread per output with its sum in a register, t x t tiles of A and B in shared
// memory (t = 16 and 32). Timed with CUDA events (cuda::time_batches_ms: one warm-up batch, then 5
// batches of 10 calls; the median). For each n, a line per tile size and
//   ratio cuda_te_matmul_t<t>_n<n>_vs_cublas <GFLOP/s ratio>
//   ratio cuda_te_matmul_n<n>_vs_cublas <the better tile's ratio>
// A benchmark, never a test. Without a GPU it prints "SKIPPED: no GPU (why)" and exits 0.
//
//   build/release/bin/mls-te-cuda-bench [n ...]        (default: 1024)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/rng.hpp"
#include "mls/kernels/cuda.hpp"
#include "mls/kernels/cuda_jit.hpp"
#include "te_cuda_workloads.hpp"

namespace cu = mls::kernels::cuda;
namespace te = mls::kernels::te;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) try {
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) {
    const int n = std::atoi(argv[i]);
    MLS_CHECK(n >= 1, "mls-te-cuda-bench: size '", argv[i], "' is not a positive integer");
    sizes.push_back(n);
  }
  if (sizes.empty()) sizes = {1024};
  std::string why;
  if (!cu::available(&why)) {
    std::printf("SKIPPED: no GPU (%s)\n", why.c_str());
    return 0;
  }
  std::printf("device: %s, %s, PTX for %s\n", cu::device_name().c_str(), te::nvrtc_version().c_str(),
              te::default_nvrtc_arch().c_str());
  for (const int n : sizes) {
    const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
    mls::Rng rng(1, "te_cuda_bench");
    std::vector<float> a(nn), b(nn), c(nn), ref(nn);
    for (auto& x : a) x = static_cast<float>(rng.uniform(-1.0, 1.0));
    for (auto& x : b) x = static_cast<float>(rng.uniform(-1.0, 1.0));
    cu::DeviceBuffer da(nn), db(nn), dc(nn), dref(nn);
    cu::to_device(da.get(), a.data(), nn);
    cu::to_device(db.get(), b.data(), nn);
    const double flop = 2.0 * n * static_cast<double>(n) * n;
    const double cublas_ms = median(cu::time_batches_ms(
        [&] { cu::sgemm("cublas", n, n, n, 1.0f, da.get(), db.get(), 0.0f, dref.get()); }, 5, 10));
    cu::synchronize();
    cu::to_host(ref.data(), dref.get(), nn);
    std::printf("n=%d cublas: %.3f ms, %.1f GFLOP/s\n", n, cublas_ms, flop / cublas_ms * 1e-6);
    double best = 0;
    for (const std::int64_t tile : {16, 32}) {
      const kernels_test::CudaWorkload w = kernels_test::cuda_matmul_local(n, n, n, tile);
      const te::CudaJitKernel k = te::compile_cuda(te::lower(w.schedule, "te_matmul"));
      const std::vector<float*> args{da.get(), db.get(), dc.get()};
      const double ms = median(cu::time_batches_ms([&] { k.run_device(args, false); }, 5, 10));
      cu::synchronize();
      cu::to_host(c.data(), dc.get(), nn);
      double err = 0;
      for (std::size_t i = 0; i < nn; ++i) err = std::max(err, static_cast<double>(std::fabs(c[i] - ref[i])));
      const double ratio = cublas_ms / ms;
      best = std::max(best, ratio);
      std::printf("n=%d te_matmul tile %lld (%s): %.3f ms, %.1f GFLOP/s, max |diff| vs cublas %.3g\n", n,
                  static_cast<long long>(tile), k.cuda().kernels[0].dims.to_string().c_str(), ms, flop / ms * 1e-6,
                  err);
      std::printf("ratio cuda_te_matmul_t%lld_n%d_vs_cublas %.3f\n", static_cast<long long>(tile), n, ratio);
    }
    std::printf("ratio cuda_te_matmul_n%d_vs_cublas %.3f\n", n, best);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mls-te-cuda-bench: %s\n", e.what());
  return 1;
}
