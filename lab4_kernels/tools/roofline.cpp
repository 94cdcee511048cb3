// mls-roofline: measures this machine's roofs (peak FMA GFLOP/s, streaming GB/s) and places the
// lab 4 kernels under them (slides 002: arithmetic intensity = flops / bytes).
//
//   build/ci/bin/mls-roofline [--threads N] [--n 1024] [--svg roofline.svg]
//
// Arithmetic intensity (AI) uses compulsory traffic: every input read once, every output written
// once (SGEMM: 4 (2 n^2 + n^2) bytes for 2 n^3 flops). The attainable roof at AI is
// min(peak, AI * bandwidth); "% roof" is achieved / attainable.
#include <CLI/CLI.hpp>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "mls/common/parallel.hpp"
#include "mls/common/rng.hpp"
#include "mls/common/timer.hpp"
#include "mls/kernels/fused.hpp"
#include "mls/kernels/roofline.hpp"
#include "mls/kernels/sgemm.hpp"

namespace {

using mls::kernels::peak_gflops;

/// Streaming bandwidth: a[i] = b[i] + s * c[i] over arrays far larger than L3 (3 x 4 bytes).
double stream_gbs(int threads) {
  const long n = 16L << 20;
  static std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 3.0f);
  mls::ThreadCountGuard guard(threads);
  const double s = mls::time_min([&] {
    mls::parallel_for(0, n, 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
      for (auto i = lo; i < hi; ++i) a[i] = b[i] + 0.5f * c[i];
    });
  }, 5);
  return 3.0 * 4 * n / s * 1e-9;
}

struct Point {
  std::string name;
  double ai, gflops;
};

void write_svg(const std::string& path, double peak, double bw, const std::vector<Point>& pts) {
  const double W = 720, H = 480, L = 70, R = 20, T = 30, B = 50;
  const double xmin = 1e-2, xmax = 1e3, ymin = 1e-1, ymax = std::pow(10, std::ceil(std::log10(peak * 2)));
  auto X = [&](double ai) { return L + (std::log10(ai) - std::log10(xmin)) / (std::log10(xmax) - std::log10(xmin)) * (W - L - R); };
  auto Y = [&](double g) { return H - B - (std::log10(g) - std::log10(ymin)) / (std::log10(ymax) - std::log10(ymin)) * (H - T - B); };
  std::ofstream f(path);
  f << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n";
  for (double d = xmin; d <= xmax * 1.001; d *= 10) {
    f << "<line x1='" << X(d) << "' y1='" << T << "' x2='" << X(d) << "' y2='" << H - B << "' stroke='#ddd'/>"
      << "<text x='" << X(d) << "' y='" << H - B + 15 << "' text-anchor='middle'>" << d << "</text>\n";
  }
  for (double d = ymin; d <= ymax * 1.001; d *= 10) {
    f << "<line x1='" << L << "' y1='" << Y(d) << "' x2='" << W - R << "' y2='" << Y(d) << "' stroke='#ddd'/>"
      << "<text x='" << L - 5 << "' y='" << Y(d) + 4 << "' text-anchor='end'>" << d << "</text>\n";
  }
  const double ridge = peak / bw;
  f << "<polyline fill='none' stroke='black' stroke-width='2' points='" << X(xmin) << "," << Y(xmin * bw) << " "
    << X(ridge) << "," << Y(peak) << " " << X(xmax) << "," << Y(peak) << "'/>\n";
  f << "<text x='" << X(xmax) - 5 << "' y='" << Y(peak) - 6 << "' text-anchor='end'>peak " << static_cast<int>(peak)
    << " GFLOP/s</text><text x='" << X(0.03) << "' y='" << Y(0.03 * bw) - 8 << "'>" << static_cast<int>(bw) << " GB/s</text>\n";
  const char* colors[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  int i = 0;
  for (const auto& p : pts) {
    const char* col = colors[i++ % 8];
    f << "<circle cx='" << X(p.ai) << "' cy='" << Y(std::max(p.gflops, ymin)) << "' r='4' fill='" << col << "'/>"
      << "<text x='" << X(p.ai) + 6 << "' y='" << Y(std::max(p.gflops, ymin)) + (i % 2 ? -4 : 10) << "' fill='" << col << "'>"
      << p.name << "</text>\n";
  }
  f << "<text x='" << W / 2 << "' y='" << H - 10 << "' text-anchor='middle'>arithmetic intensity (flop/byte)</text>"
    << "<text x='15' y='" << H / 2 << "' transform='rotate(-90 15 " << H / 2 << ")' text-anchor='middle'>GFLOP/s</text>"
    << "<text x='" << W / 2 << "' y='18' text-anchor='middle'>lab 4 roofline (this machine, measured)</text>\n</svg>\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-roofline: measured roofs and the lab 4 kernels under them"};
  int threads = mls::num_threads();
  long n = 1024;
  std::string svg;
  app.add_option("--threads", threads, "threads for the peak, the bandwidth and packed_mt")->check(CLI::PositiveNumber);
  app.add_option("--n", n, "SGEMM size (square)")->check(CLI::Range(16L, 8192L));
  app.add_option("--svg", svg, "write the roofline plot to this SVG file");
  CLI11_PARSE(app, argc, argv);

  const bool has512 = __builtin_cpu_supports("avx512f");
  const bool has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  double peak1 = 0, peakT = 0;
  if (has2) {
    std::printf("peak FMA  AVX2     1 thread : %8.1f GFLOP/s\n", peak_gflops(false, 1));
  }
  if (has512) {
    std::printf("peak FMA  AVX-512  1 thread : %8.1f GFLOP/s\n", peak1 = peak_gflops(true, 1));
    std::printf("peak FMA  AVX-512  %d threads: %8.1f GFLOP/s\n", threads, peakT = peak_gflops(true, threads));
  } else if (has2) {
    peak1 = peak_gflops(false, 1);
    peakT = peak_gflops(false, threads);
    std::printf("peak FMA  AVX2     %d threads: %8.1f GFLOP/s\n", threads, peakT);
  }
  const double bw1 = stream_gbs(1), bwT = stream_gbs(threads);
  std::printf("stream    a = b + s*c  1 thread : %6.1f GB/s,  %d threads: %6.1f GB/s\n", bw1, threads, bwT);
  std::printf("ridge point (1 thread): %.1f flop/byte\n\n", peak1 / bw1);

  std::vector<Point> pts;
  std::printf("%-22s %8s %10s %10s %8s %7s\n", "kernel", "AI", "GFLOP/s", "GB/s", "roof", "%roof");
  auto report = [&](const std::string& name, double flops, double bytes, double seconds, bool mt) {
    const double ai = flops / bytes, g = flops / seconds * 1e-9, gbs = bytes / seconds * 1e-9;
    const double roof = std::min(mt ? peakT : peak1, ai * (mt ? bwT : bw1));
    std::printf("%-22s %8.2f %10.2f %10.2f %8.1f %6.1f%%\n", name.c_str(), ai, g, gbs, roof, 100 * g / roof);
    pts.push_back({name, ai, g});
  };

  // SGEMM ladder at n (naive and reordered at min(n, 512): they are slow).
  for (const auto& k : mls::kernels::cpu_kernels()) {
    const std::string name = k.name;
    const bool mt = name == "lab4_packed_mt";
    const long m = (name == "lab4_naive" || name == "lab4_reordered") ? std::min(n, 512L) : n;
    std::vector<float> A(m * m), B(m * m), C(m * m);
    mls::Rng rng(3, "roofline");
    for (auto& x : A) x = rng.uniform_float();
    for (auto& x : B) x = rng.uniform_float();
    mls::ThreadCountGuard guard(mt ? threads : 1);
    try {
      const double s = mls::time_min([&] { k.fn(false, false, m, m, m, 1.0f, A.data(), m, B.data(), m, 0.0f, C.data(), m); }, 3);
      report(name + (mt ? "" : "") + " n=" + std::to_string(m), 2.0 * m * m * m, 12.0 * m * m, s, mt);
    } catch (const std::exception& e) {
      std::printf("%-22s %s\n", name.c_str(), e.what());
    }
  }
  // Memory-bound kernels, 8 Mi floats per array.
  const long N = 8L << 20;
  std::vector<float> a(N, 0.5f), b(N, 0.25f), c(N, 2.0f), d(N, 1.0f), e(N), mean(N / 1024), rstd(N / 1024), w(1024, 1.0f), z(1024, 0.0f);
  auto t = [&](const std::function<void()>& f) { f(); return mls::time_min(f, 5); };
  try {
    report("fused E=D+(A+B)*C", 3.0 * N, 20.0 * N, t([&] { mls::kernels::fused_add_mul_add(N, a.data(), b.data(), c.data(), d.data(), e.data()); }), false);
    report("softmax 1024", 5.0 * N, 8.0 * N, t([&] { mls::kernels::softmax_forward(e.data(), a.data(), N / 1024, 1024); }), false);
    report("layernorm fwd 1024", 8.0 * N, 8.0 * N, t([&] { mls::kernels::layernorm_forward(e.data(), mean.data(), rstd.data(), a.data(), w.data(), z.data(), N / 1024, 1024, 1e-5f); }), false);
    report("gelu fwd", 20.0 * N, 8.0 * N, t([&] { mls::kernels::gelu_forward(e.data(), a.data(), N); }), false);
  } catch (const std::exception& ex) {
    std::printf("memory-bound kernels: %s\n", ex.what());
  }
  if (!svg.empty()) {
    write_svg(svg, peak1, bw1, pts);
    std::printf("\nwrote %s (single-thread roofs)\n", svg.c_str());
  }
  return 0;
}
