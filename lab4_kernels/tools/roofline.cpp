// mls-roofline: measures this machine's roofs (peak FMA GFLOP/s, memory GB/s) at 1 thread and at
// --threads, and places the lab 4 kernels under the roof of their own thread count (slides 002:
// arithmetic intensity = flops / bytes).
//
//   build/ci/bin/mls-roofline [--threads 2] [--n 1024] [--svg roofline.svg]
//
// Same footing for roofs and kernels (see mls/kernels/roofline.hpp):
//   - bytes are compulsory traffic for both: every input read once, every output written once
//     (SGEMM: 4 (2 n^2 + n^2) bytes for 2 n^3 flops);
//   - the DRAM roof is the best of five streaming patterns (memcpy, memcpy with streaming stores,
//     a read-only sum, the triad a = b + s c with plain and with streaming stores) over arrays
//     of 2x the last-level cache (64-128 MiB each); the memory-bound kernels run on arrays of
//     that size too. The streamed memcpy is what the fused kernels write with; glibc's memcpy
//     streams only copies above its non-temporal threshold, so on 2 threads its halves are
//     plain stores (a read-for-ownership per line) and the fused kernels went above its roof;
//   - a cache roof (the triad on 3 x 64 KiB, inside L2) is drawn dotted and labelled; no point
//     is placed against it;
//   - the DRAM roof is measured again after each memory-bound kernel and the best of all its
//     measurements kept: on a shared machine whose bandwidth swings from second to second, a roof
//     measured once, in a slow second, put kernels timed in a fast one above it
//     (MLS_ROOF_DEBUG=1 prints every pattern's figure);
//   - the compute roof is measured each run and kept, with the best of all runs, in this
//     machine's peak cache (peak_gflops_cached: ~/.cache/mlsys-labs), the peak lab 6's MFU uses;
//   - a point more than 5% above its roof is refused (printed, left out of the plot, exit 2).
// Prints one "ratio roofline_<kernel>_t<threads> <fraction of its roof>" line per kernel.
#include "mls/kernels/roofline.hpp"

#include <immintrin.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "mls/common/alloc.hpp"
#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/rng.hpp"
#include "mls/common/timer.hpp"
#include "mls/kernels/fused.hpp"
#include "mls/kernels/sgemm.hpp"

namespace {

using mls::kernels::Measurement;
using mls::kernels::Roof;

/// Floats per array for the memory roof and the memory-bound kernels: 2x the last-level cache,
/// between 64 and 128 MiB.
long big_floats() {
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = 32L << 20;
  const long bytes = std::clamp(2 * llc, 64L << 20, 128L << 20);
  return bytes / static_cast<long>(sizeof(float));
}

/// Runs fn over [0, n) split over the current threads.
void split(long n, const std::function<void(long, long)>& fn) {
  mls::parallel_for(0, n, 1 << 16, [&](std::int64_t lo, std::int64_t hi) { fn(lo, hi); });
}

std::atomic<float> g_sink{0.0f};  // keeps the loads of the read-only patterns

/// Best GB/s (compulsory bytes) of five streaming patterns over arrays of n floats.
double dram_gbs(int threads, long n) {
  static std::vector<float> a, b, c;
  if (static_cast<long>(a.size()) != n) {
    a.assign(n, 1.0f);
    b.assign(n, 2.0f);
    c.assign(n, 3.0f);
  }
  mls::ThreadCountGuard guard(threads);
  const double bytes = 4.0 * n;
  double best = 0;
  auto measure = [&](double counted, const std::function<void()>& f) {
    f();
    const double g = counted * bytes / mls::time_min(f, 5) * 1e-9;
    if (std::getenv("MLS_ROOF_DEBUG"))
      std::fprintf(stderr, "  DRAM roof, %d thread(s): a pattern at %.1f GB/s\n", threads, g);
    best = std::max(best, g);
  };
  measure(2,
          [&] { split(n, [&](long lo, long hi) { std::memcpy(&a[lo], &b[lo], (hi - lo) * 4); }); });
  // the copy with streaming stores the fused kernels write their outputs with (mls::stream_copy)
  measure(2, [&] {
    split(n, [&](long lo, long hi) {
      mls::stream_copy(&a[lo], &b[lo], static_cast<std::size_t>(hi - lo) * 4);
    });
  });
  measure(1, [&] {
    split(n, [&](long lo, long hi) {
      float lanes[16] = {};
      long i = lo;
      for (; i + 16 <= hi; i += 16) {
        for (int l = 0; l < 16; ++l) lanes[l] += b[i + l];
      }
      for (; i < hi; ++i) lanes[0] += b[i];
      float s = 0;
      for (float l : lanes) s += l;
      g_sink.fetch_add(s, std::memory_order_relaxed);
    });
  });
  measure(3, [&] {
    split(n, [&](long lo, long hi) {
      for (long i = lo; i < hi; ++i) a[i] = b[i] + 0.5f * c[i];
    });
  });
  measure(3, [&] {
    split(n, [&](long lo, long hi) {
      long i = lo;
      for (; i < hi && (reinterpret_cast<std::uintptr_t>(&a[i]) & 15); ++i)
        a[i] = b[i] + 0.5f * c[i];
      for (; i + 4 <= hi; i += 4) {
        const __m128 v =
            _mm_add_ps(_mm_loadu_ps(&b[i]), _mm_mul_ps(_mm_set1_ps(0.5f), _mm_loadu_ps(&c[i])));
        _mm_stream_ps(&a[i], v);
      }
      for (; i < hi; ++i) a[i] = b[i] + 0.5f * c[i];
      _mm_sfence();
    });
  });
  return best;
}

/// GB/s of the triad on 3 x 64 KiB per thread (inside L2), many passes.
double cache_gbs(int threads) {
  const long n = 16 << 10;  // floats per array per thread
  mls::ThreadCountGuard guard(threads);
  std::vector<float> a(n * threads, 1.0f), b(n * threads, 2.0f), c(n * threads, 3.0f);
  const int passes = 200;
  auto f = [&] {
    mls::parallel_for(0, threads, 1, [&](std::int64_t t0, std::int64_t t1) {
      for (auto t = t0; t < t1; ++t) {
        float* pa = &a[t * n];
        const float* pb = &b[t * n];
        const float* pc = &c[t * n];
        for (int p = 0; p < passes; ++p) {
          for (long i = 0; i < n; ++i) pa[i] = pb[i] + 0.5f * pc[i];
          g_sink.fetch_add(pa[p], std::memory_order_relaxed);
        }
      }
    });
  };
  f();
  return 12.0 * n * threads * passes / mls::time_min(f, 3) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "mls-roofline: measured roofs (1 and --threads threads) and the lab 4 kernels under them"};
  int threads = mls::num_threads();
  long n = 1024;
  std::string svg;
  app.add_option("--threads", threads,
                 "the second thread count (roofs, packed_mt and the fused kernels)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--n", n, "SGEMM size (square)")->check(CLI::Range(16L, 8192L));
  app.add_option("--svg", svg, "write the roofline plot to this SVG file");
  CLI11_PARSE(app, argc, argv);

  const bool has512 = __builtin_cpu_supports("avx512f");
  const long big = big_floats();
  std::vector<int> counts = {1};
  if (threads > 1) counts.push_back(threads);
  std::vector<Roof> roofs;
  std::vector<std::string> peak_sources;
  for (int t : counts) {
    Roof r;
    r.threads = t;
    // Measured now; the roof is the best of this run and the machine's cache, which this run
    // updates (lab 6's MFU divides by the cached peak: mls/kernels/roofline.hpp).
    const mls::kernels::CachedPeak pk = mls::kernels::peak_gflops_cached(t, {.remeasure = true});
    r.peak_gflops = pk.gflops;
    peak_sources.push_back(pk.source);
    r.dram_gbs = dram_gbs(t, big);
    r.cache_gbs = cache_gbs(t);
    roofs.push_back(r);
  }

  std::vector<Measurement> ms;
  // SGEMM ladder at n (naive and reordered at min(n, 512): they are slow); one thread, and
  // packed_mt at --threads.
  for (const auto& k : mls::kernels::cpu_kernels()) {
    const std::string name = k.name;
    const int t = name == "lab4_packed_mt" ? threads : 1;
    const long m = (name == "lab4_naive" || name == "lab4_reordered") ? std::min(n, 512L) : n;
    std::vector<float> A(m * m), B(m * m), C(m * m);
    mls::Rng rng(3, "roofline");
    for (auto& x : A) x = rng.uniform_float();
    for (auto& x : B) x = rng.uniform_float();
    mls::ThreadCountGuard guard(t);
    try {
      const double s = mls::time_min(
          [&] { k.fn(false, false, m, m, m, 1.0f, A.data(), m, B.data(), m, 0.0f, C.data(), m); },
          3);
      ms.push_back({name + " n=" + std::to_string(m), t, 2.0 * m * m * m, 12.0 * m * m, s});
    } catch (const std::exception& e) {
      std::printf("%-24s %s\n", name.c_str(), e.what());
    }
  }
  // Memory-bound kernels on arrays as large as the DRAM roof's, at each thread count.
  const long N = big, rows = N / 1024;
  std::vector<float> a(N, 0.5f), b(N, 0.25f), c(N, 2.0f), d(N, 1.0f), e(N), mean(rows), rstd(rows),
      w(1024, 1.0f), z(1024, 0.0f);
  std::vector<int> roof_samples(counts.size(), 1);  // DRAM roof measurements per thread count
  for (std::size_t ti = 0; ti < counts.size(); ++ti) {
    const int t = counts[ti];
    mls::ThreadCountGuard guard(t);
    auto time = [&](const std::function<void()>& f) {
      f();
      const double s = mls::time_min(f, 5);
      roofs[ti].dram_gbs = std::max(roofs[ti].dram_gbs, dram_gbs(t, big));  // see the top
      ++roof_samples[ti];
      return s;
    };
    try {
      ms.push_back({"fused E=D+(A+B)*C", t, 3.0 * N, 20.0 * N, time([&] {
                      mls::kernels::fused_add_mul_add(N, a.data(), b.data(), c.data(), d.data(),
                                                      e.data());
                    })});
      ms.push_back({"softmax 1024", t, 5.0 * N, 8.0 * N,
                    time([&] { mls::kernels::softmax_forward(e.data(), a.data(), rows, 1024); })});
      ms.push_back({"layernorm fwd 1024", t, 8.0 * N, 8.0 * N, time([&] {
                      mls::kernels::layernorm_forward(e.data(), mean.data(), rstd.data(), a.data(),
                                                      w.data(), z.data(), rows, 1024, 1e-5f);
                    })});
      ms.push_back({"gelu fwd", t, 20.0 * N, 8.0 * N,
                    time([&] { mls::kernels::gelu_forward(e.data(), a.data(), N); })});
    } catch (const std::exception& ex) {
      std::printf("memory-bound kernels: %s\n", ex.what());
    }
  }

  for (std::size_t ti = 0; ti < roofs.size(); ++ti) {
    const Roof& r = roofs[ti];
    std::printf(
        "%d thread(s): peak FMA %s %8.1f GFLOP/s, DRAM %6.1f GB/s (best of memcpy, streamed "
        "memcpy, sum, triad, streamed triad over %ld MiB arrays, measured %d times), "
        "L2 cache %6.1f GB/s, ridge %.1f flop/byte\n",
        r.threads, has512 ? "AVX-512" : "AVX2", r.peak_gflops, r.dram_gbs, big * 4 >> 20,
        roof_samples[ti], r.cache_gbs, r.peak_gflops / r.dram_gbs);
    std::printf("  peak: %s\n", peak_sources[ti].c_str());
  }
  std::printf("\n");

  std::vector<mls::kernels::RooflinePoint> pts;
  int refused = 0;
  std::printf("%-24s %3s %8s %10s %10s %10s %7s\n", "kernel", "thr", "AI", "GFLOP/s", "GB/s",
              "roof", "%roof");
  for (const auto& m : ms) {
    try {
      const auto p = mls::kernels::place(m, roofs);
      std::printf("%-24s %3d %8.2f %10.2f %10.2f %10.1f %6.1f%%\n", p.name.c_str(), p.threads, p.ai,
                  p.gflops, p.gbs, p.roof_gflops, 100 * p.fraction);
      pts.push_back(p);
    } catch (const mls::Error& err) {
      std::printf("REFUSED %s\n", err.what());
      ++refused;
    }
  }
  std::printf("\n");
  for (const auto& p : pts) {
    std::string key = "roofline_" + p.name + "_t" + std::to_string(p.threads);
    for (char& ch : key) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') ch = '_';
    }
    std::printf("ratio %s %.4f\n", key.c_str(), p.fraction);
  }
  if (!svg.empty()) {
    mls::write_file_atomic(svg,
                           mls::kernels::roofline_svg(roofs, pts,
                                                      "lab 4 roofline (this machine, measured; 1 thread solid, " +
                                                          std::to_string(threads) + " threads dashed)"),
                           "mls-roofline --svg");
    std::printf("\nwrote %s\n", svg.c_str());
  }
  if (refused > 0) {
    std::printf("%d point(s) above their roof were left out: measure again on a quiet machine\n",
                refused);
    return 2;
  }
  return 0;
}
