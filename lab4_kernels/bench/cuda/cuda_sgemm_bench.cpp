// Lab 4: the CUDA SGEMM ladder against cuBLAS (FP32, default math, no TF32), timed with CUDA
// events. Prints GFLOP/s and the ratio to cuBLAS for n = 2048, 4096, 8192 (or the sizes given).
//
//   build/ci/bin/mls-cuda-sgemm-bench [n ...] [--json out.json]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/rng.hpp"
#include "mls/kernels/cuda.hpp"

namespace cu = mls::kernels::cuda;

int main(int argc, char** argv) {
  std::vector<int> sizes;
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      sizes.push_back(std::atoi(argv[i]));
    }
  }
  if (sizes.empty()) sizes = {2048, 4096, 8192};
  std::string why;
  if (!cu::available(&why)) {
    std::printf("SKIPPED: no GPU (%s)\n", why.c_str());
    return 0;
  }
  try {
    std::printf("device: %s\n", cu::device_name().c_str());
    std::string json = "{\"lab\": 4, \"device\": \"" + cu::device_name() + "\", \"sgemm\": [";
    bool first = true;
    for (int n : sizes) {
      const size_t count = static_cast<size_t>(n) * n;
      std::vector<float> h(count);
      mls::Rng rng(1, "gpu_bench");
      for (auto& x : h) x = rng.uniform_float() - 0.5f;
      cu::DeviceBuffer A(count), B(count), C(count);
      cu::to_device(A.get(), h.data(), count);
      cu::to_device(B.get(), h.data(), count);
      const double flops = 2.0 * n * n * static_cast<double>(n);
      const int reps = n >= 8192 ? 3 : 10;
      const double cublas_ms = cu::time_sgemm_ms("cublas", n, n, n, A.get(), B.get(), C.get(), reps);
      const double cublas_gflops = flops / cublas_ms * 1e-6;
      for (const auto& name : cu::sgemm_kernels()) {
        if ((name == "naive" || name == "coalesced") && n > 4096) continue;  // minutes otherwise
        const double ms = name == "cublas" ? cublas_ms
                                           : cu::time_sgemm_ms(name, n, n, n, A.get(), B.get(), C.get(),
                                                               name == "naive" ? 1 : reps);
        const double gflops = flops / ms * 1e-6;
        std::printf("n=%-5d %-10s %9.3f ms %9.1f GFLOP/s  vs_cublas %.3f\n", n, name.c_str(), ms,
                    gflops, gflops / cublas_gflops);
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "%s{\"kernel\": \"%s\", \"n\": %d, \"gflops\": %.1f, \"peer\": \"cublas\", "
                      "\"peer_gflops\": %.1f, \"ratio\": %.4f}",
                      first ? "" : ", ", name.c_str(), n, gflops, cublas_gflops,
                      gflops / cublas_gflops);
        json += buf;
        first = false;
      }
    }
    json += "]}\n";
    if (json_path) {
      FILE* f = std::fopen(json_path, "w");
      MLS_CHECK(f != nullptr, "mls-cuda-sgemm-bench: cannot write ", json_path);
      std::fputs(json.c_str(), f);
      std::fclose(f);
    }
  } catch (const mls::Error& e) {
    std::fprintf(stderr, "mls-cuda-sgemm-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
