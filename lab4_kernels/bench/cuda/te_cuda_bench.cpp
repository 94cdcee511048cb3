// Lab 4 part 2: a generated CUDA matmul (tensor-expression schedule -> generate_cuda -> NVRTC) against
// cuBLAS (cublasSgemm, FP32). The schedules are tests/te_cuda_workloads.hpp's:
//   t<T>                        cuda_matmul_local: blocks of T x T outputs, a thread per output with its
//                               sum in a register, T x T tiles of A and B in shared memory;
//   bm<BM>x<BN>_bk<BK>_tm<TM>x<TN>  cuda_matmul_regtile: blocks of BM x BN outputs, each thread a TM x TN
//                               micro-tile of sums in registers, BK-deep slices of A (transposed) and B
//                               in shared memory, filled with float4 loads; "_db": the shared tiles
//                               double-buffered (Stage::double_buffer).
// Timed with CUDA events (cuda::time_batches_ms: one warm-up batch, then 5 batches of 10 calls; the
// median). Each result is compared with cuBLAS's (a mismatch is reported and the exit status is 1).
// For each n, a line per schedule and
//   ratio te_cuda_matmul_<cfg>_vs_cublas_n<n> <GFLOP/s ratio>
//   ratio te_cuda_matmul_best_vs_cublas_n<n> <the best schedule's ratio>
// A benchmark, never a test. Without a GPU it prints "SKIPPED: no GPU (why)" and exits 0.
//
//   build/release/bin/mls-te-cuda-bench [n ...] [--config CFG,...]
//       n: default 1024; CFG: default cuda_matmul_bench_configs() (tests/te_cuda_workloads.hpp): t32,
//       bm64x64_bk8_tm4x4[_db], bm128x64_bk8_tm8x4, bm128x128_bk8_tm8x8[_db], bm128x128_bk16_tm8x8_db
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  std::vector<std::string> configs = kernels_test::cuda_matmul_bench_configs();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--config") {
      MLS_CHECK(i + 1 < argc, "--config needs a list, e.g. --config t32,bm128x128_bk8_tm8x8");
      configs.clear();
      const std::string list = argv[++i];
      for (std::size_t p = 0; p <= list.size();) {
        const std::size_t q = std::min(list.find(',', p), list.size());
        if (q > p) configs.push_back(list.substr(p, q - p));
        p = q + 1;
      }
      MLS_CHECK(!configs.empty(), "--config '", list, "' names no schedule");
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      std::printf("usage: mls-te-cuda-bench [n ...] [--config t<T>|bm<BM>x<BN>_bk<BK>_tm<TM>x<TN>[_db],...]\n");
      return 0;
    }
    char* end = nullptr;
    const long n = std::strtol(arg.c_str(), &end, 10);
    MLS_CHECK(end != arg.c_str() && *end == '\0' && n >= 1 && n <= 16384, "'", arg,
              "' is not a matrix size (1..16384) or an option (--config)");
    sizes.push_back(static_cast<int>(n));
  }
  if (sizes.empty()) sizes = {1024};
  for (const auto& cfg : configs) (void)kernels_test::cuda_matmul_by_name(cfg, 8, 8, 8);  // a bad name fails before the GPU is asked
  std::string why;
  if (!cu::available(&why)) {
    std::printf("SKIPPED: no GPU (%s)\n", why.c_str());
    return 0;
  }
  std::printf("device: %s, %s, PTX for %s\n", cu::device_name().c_str(), te::nvrtc_version().c_str(),
              te::default_nvrtc_arch().c_str());
  bool mismatch = false;
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
    // |a|, |b| <= 1: a sum of n products differs from cuBLAS's by rounding, well under 1e-5 n + 1e-3.
    const double tol = 1e-5 * n + 1e-3;
    double best = 0;
    for (const auto& cfg : configs) {
      const kernels_test::CudaWorkload w = kernels_test::cuda_matmul_by_name(cfg, n, n, n);
      const te::CudaJitKernel k = te::compile_cuda(te::lower(w.schedule, "te_matmul"));
      const std::vector<float*> args{da.get(), db.get(), dc.get()};
      cu::to_device(dc.get(), std::vector<float>(nn, std::nanf("")).data(), nn);  // unwritten outputs show
      k.run_device(args, false);
      cu::synchronize();
      cu::to_host(c.data(), dc.get(), nn);
      double err = 0;
      for (std::size_t i = 0; i < nn; ++i) {
        const double d = std::fabs(static_cast<double>(c[i]) - ref[i]);
        err = std::isfinite(d) ? std::max(err, d) : INFINITY;
      }
      const double ms = median(cu::time_batches_ms([&] { k.run_device(args, false); }, 5, 10));
      cu::synchronize();
      const double ratio = cublas_ms / ms;
      std::printf("n=%d te_matmul %s (%s, %lld B shared): %.3f ms, %.1f GFLOP/s, max |diff| vs cublas %.3g%s\n", n,
                  cfg.c_str(), k.cuda().kernels[0].dims.to_string().c_str(),
                  static_cast<long long>(k.cuda().kernels[0].shared_bytes), ms, flop / ms * 1e-6, err,
                  err <= tol ? "" : "  MISMATCH");
      if (err > tol) {
        mismatch = true;
        continue;  // a wrong kernel's speed is no result
      }
      best = std::max(best, ratio);
      std::printf("ratio te_cuda_matmul_%s_vs_cublas_n%d %.3f\n", cfg.c_str(), n, ratio);
    }
    std::printf("ratio te_cuda_matmul_best_vs_cublas_n%d %.3f\n", n, best);
  }
  if (mismatch) std::fprintf(stderr, "mls-te-cuda-bench: a generated kernel differs from cuBLAS (MISMATCH above)\n");
  return mismatch ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mls-te-cuda-bench: %s\n", e.what());
  return 1;
}
