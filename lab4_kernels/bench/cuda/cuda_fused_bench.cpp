// Lab 4: the fused CUDA kernels (softmax, layernorm, bias+GELU) against a device-to-device copy
// of the same bytes (cudaMemcpyAsync), timed with CUDA events: after a warm-up batch, the median
// of --reps batches of --batch back-to-back calls. Prints each kernel's GB/s (its compulsory
// bytes, mls/kernels/fused_bench.hpp) and the copy's, then one line per kernel and shape:
//   ratio cuda_<kernel>_<rows>x<cols>_vs_d2d <kernel GB/s / copy GB/s>   (>= 1: as fast as a copy)
// The smallest default shape (4096x1024: 16 MiB in, 16 MiB out) fits in the 50 MiB L2 of an H100,
// so its figures, the copy's as well, may be above HBM bandwidth; the larger ones do not fit.
//
//   build/release/bin/mls-cuda-fused-bench [ROWSxCOLS ...] [--kernel NAME] [--reps N]
//                                          [--batch N] [--json out.json]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/common/rng.hpp"
#include "mls/kernels/cuda.hpp"
#include "mls/kernels/fused_bench.hpp"

namespace cu = mls::kernels::cuda;
namespace mk = mls::kernels;

namespace {

std::vector<float> random_floats(std::size_t n, const char* stream) {
  mls::Rng rng(1, stream);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform_float() - 0.5f;
  return v;
}

/// Device buffers of one shape: the kernels' operands and the copy's source and destination.
struct ShapeBuffers {
  explicit ShapeBuffers(mk::RowsCols s, std::size_t copy_floats)
      : n(static_cast<std::size_t>(s.rows) * s.cols), inp(n), out(n), weight(s.cols), bias(s.cols),
        mean(s.rows), rstd(s.rows), copy_src(copy_floats), copy_dst(copy_floats) {
    const auto h = random_floats(n, "inp");
    cu::to_device(inp.get(), h.data(), n);
    const auto w = random_floats(s.cols, "weight"), b = random_floats(s.cols, "bias");
    cu::to_device(weight.get(), w.data(), w.size());
    cu::to_device(bias.get(), b.data(), b.size());
    const auto c = random_floats(copy_floats, "copy");
    cu::to_device(copy_src.get(), c.data(), copy_floats);
  }
  std::size_t n;
  cu::DeviceBuffer inp, out;     // (rows, cols)
  cu::DeviceBuffer weight, bias; // (cols,)
  cu::DeviceBuffer mean, rstd;   // (rows,)
  cu::DeviceBuffer copy_src, copy_dst;  // (copy_floats,): the largest copy of this shape
};

/// Enqueues one call of `kernel` on the default stream.
void launch(const std::string& kernel, const ShapeBuffers& b, mk::RowsCols s) {
  if (kernel == "softmax") {
    cu::softmax_forward(b.out.get(), b.inp.get(), s.rows, s.cols);
  } else if (kernel == "layernorm") {
    cu::layernorm_forward(b.out.get(), b.mean.get(), b.rstd.get(), b.inp.get(), b.weight.get(),
                          b.bias.get(), s.rows, s.cols, 1e-5f);
  } else if (kernel == "bias_gelu") {
    cu::bias_gelu_forward(b.out.get(), b.inp.get(), b.bias.get(), s.rows, s.cols);
  } else {
    mls::fail("mls-cuda-fused-bench: no launch for kernel '", kernel, "'");
  }
}

/// Times every kernel of `opt` on shape `s` against its copy.
std::vector<mk::FusedBenchResult> run_shape(const mk::FusedBenchOptions& opt, mk::RowsCols s) {
  std::int64_t copy_floats = 0;
  for (const auto& k : opt.kernels)
    copy_floats = std::max(copy_floats, mk::copy_floats_for(mk::fused_kernel_bytes(k, s)));
  ShapeBuffers b(s, static_cast<std::size_t>(copy_floats));
  std::vector<mk::FusedBenchResult> results;
  for (const auto& k : opt.kernels) {
    mk::FusedBenchResult r;
    r.kernel = k;
    r.shape = s;
    r.bytes = mk::fused_kernel_bytes(k, s);
    const std::int64_t floats = mk::copy_floats_for(r.bytes);
    r.copy_bytes = floats * 2 * static_cast<std::int64_t>(sizeof(float));
    // The copy first, then the kernel, each its own warm-up and batches.
    r.copy_ms = mk::median(cu::time_batches_ms(
        [&] { cu::copy_device_async(b.copy_dst.get(), b.copy_src.get(), static_cast<std::size_t>(floats)); },
        opt.reps, opt.batch));
    r.ms = mk::median(cu::time_batches_ms([&] { launch(k, b, s); }, opt.reps, opt.batch));
    std::printf("%s\n", mk::result_line(r).c_str());
    std::fflush(stdout);
    results.push_back(r);
  }
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  mk::FusedBenchOptions opt;
  try {
    opt = mk::parse_fused_bench_args(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const mls::Error& e) {
    std::fprintf(stderr, "%s\n%s", e.what(), mk::fused_bench_usage().c_str());
    return 2;
  }
  if (opt.help) {
    std::printf("%s", mk::fused_bench_usage().c_str());
    return 0;
  }
  std::string why;
  if (!cu::available(&why)) {
    std::printf("SKIPPED: no GPU (%s)\n", why.c_str());
    return 0;
  }
  try {
    const std::string device = cu::device_name();
    std::printf("device: %s\n", device.c_str());
    std::printf("fused CUDA kernels vs a device-to-device copy of the same bytes: median of %d "
                "batches of %d calls\n", opt.reps, opt.batch);
    std::vector<mk::FusedBenchResult> all;
    for (const auto& s : opt.shapes) {
      for (auto& r : run_shape(opt, s)) all.push_back(std::move(r));
    }
    for (const auto& r : all) std::printf("%s\n", mk::ratio_line(r).c_str());
    if (!opt.json_path.empty())
      mls::write_file_atomic(opt.json_path, mk::fused_bench_json(device, all), "mls-cuda-fused-bench");
  } catch (const mls::Error& e) {
    std::fprintf(stderr, "mls-cuda-fused-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
