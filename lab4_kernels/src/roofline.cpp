// Lab 4: the compute roof (peak FMA throughput), measured with register-resident FMA chains.
#include "mls/kernels/roofline.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/timer.hpp"

namespace mls::kernels {

namespace {

// 12 independent accumulator chains hide the FMA latency (4 cycles x 2 or 3 pipes).
__attribute__((target("avx512f"))) float fma_loop_avx512(long iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  alignas(32) float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}

/// GFLOP/s of `threads` threads each running the FMA loop (flops = 2 * lanes * 12 per iter).
}  // namespace

double peak_gflops(bool avx512, int threads, long iters) {
  mls::ThreadCountGuard guard(threads);
  const double lanes = avx512 ? 16 : 8;
  volatile float sink = 0;
  const double s = mls::time_min(
      [&] {
        mls::parallel_for(0, threads, 1, [&](std::int64_t b, std::int64_t e) {
          for (auto t = b; t < e; ++t)
            sink = avx512 ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
        });
      },
      3);
  (void)sink;
  return threads * 2.0 * lanes * 12 * iters / s * 1e-9;
}

double peak_gflops_best(int threads, long iters) {
  return peak_gflops(__builtin_cpu_supports("avx512f"), threads, iters);
}

std::filesystem::path default_peak_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg == '/') return std::filesystem::path(xdg) / "mlsys-labs";
  const char* home = std::getenv("HOME");
  if (home && *home == '/') return std::filesystem::path(home) / ".cache" / "mlsys-labs";
  return {};
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.pop_back();
    if (!v.empty()) return v;
  }
  return "unknown CPU";
}

std::string peak_cache_name(const std::string& cpu, bool avx512, int threads) {
  std::string word;
  for (char c : cpu) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      word += c;
    else if (!word.empty() && word.back() != '_')
      word += '_';
  }
  while (!word.empty() && word.back() == '_') word.pop_back();
  if (word.size() > 80) word.resize(80);
  return "peak-gflops-" + (word.empty() ? std::string("cpu") : word) + (avx512 ? "-avx512" : "-avx2") + "-t" +
         std::to_string(threads) + ".txt";
}

namespace {
/// The cache file's text: the key in full (a file name can collide, its text cannot) and the peak.
std::string peak_cache_text(const std::string& cpu, bool avx512, int threads, double gflops) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", gflops);
  return "mlsys-labs peak_gflops 1\ncpu " + cpu + "\nisa " + (avx512 ? "avx512" : "avx2") + "\nthreads " +
         std::to_string(threads) + "\ngflops " + buf + "\n";
}

/// The cached peak of this key in `file`, or 0 when there is none (missing, unreadable, another key,
/// not a positive finite number).
double read_peak_cache(const std::filesystem::path& file, const std::string& cpu, bool avx512, int threads) {
  std::error_code ec;
  if (file.empty() || !std::filesystem::is_regular_file(file, ec)) return 0;
  std::string text;
  try {
    text = mls::read_file(file, "peak_gflops_cached");
  } catch (const std::exception&) {
    return 0;
  }
  const std::string head = peak_cache_text(cpu, avx512, threads, 0);
  const std::string key = head.substr(0, head.rfind("gflops "));
  if (text.rfind(key, 0) != 0) return 0;
  const std::string value = text.substr(key.size());
  if (value.rfind("gflops ", 0) != 0) return 0;
  char* end = nullptr;
  const double g = std::strtod(value.c_str() + 7, &end);
  return std::isfinite(g) && g > 0 && end && (*end == '\n' || *end == 0) ? g : 0;
}
}  // namespace

CachedPeak peak_gflops_cached(int threads, const PeakCacheOptions& opt) {
  MLS_CHECK(threads >= 1, "peak_gflops_cached: threads = ", threads, ", expected >= 1");
  const std::string cpu = opt.cpu.empty() ? cpu_model_name() : opt.cpu;
  const bool avx512 = opt.cpu.empty() ? __builtin_cpu_supports("avx512f") != 0 : opt.avx512;
  const std::filesystem::path dir = opt.dir.empty() ? default_peak_cache_dir() : opt.dir;
  CachedPeak r;
  if (!dir.empty()) r.file = dir / peak_cache_name(cpu, avx512, threads);
  const double cached = read_peak_cache(r.file, cpu, avx512, threads);
  if (cached > 0 && !opt.remeasure) {
    r.gflops = cached;
    r.from_cache = true;
    r.source = "cached in " + r.file.string() + "; mls-roofline re-measures";
    return r;
  }
  // Kept for every later run, so measured with more care than one figure: the best of 5 (each
  // the best of 3 loops; about half a second), as a shared machine's bursts only lower a figure.
  auto best_of_five = [](int t) {
    double best = 0;
    for (int k = 0; k < 5; ++k) best = std::max(best, peak_gflops_best(t));
    return best;
  };
  const double measured = opt.measure ? opt.measure(threads) : best_of_five(threads);
  MLS_CHECK(std::isfinite(measured) && measured > 0, "peak_gflops_cached: the measured peak of ", threads,
            " thread(s) is ", measured, " GFLOP/s, expected a positive finite number");
  r.gflops = std::max(measured, cached);
  if (r.file.empty()) {
    r.source = "measured now, not cached (no $XDG_CACHE_HOME or $HOME): it varies run to run";
    return r;
  }
  if (cached >= measured) {  // re-measured below the best this machine reached: keep that
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", measured);
    r.from_cache = true;
    r.source = "cached in " + r.file.string() + " (this run measured " + buf + " GFLOP/s, below it)";
    return r;
  }
  try {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    MLS_CHECK(!ec, "peak_gflops_cached: cannot create '", dir.string(), "': ", ec.message());
    mls::write_file_atomic(r.file, peak_cache_text(cpu, avx512, threads, r.gflops), "peak_gflops_cached");
    r.source = "measured now, cached in " + r.file.string();
  } catch (const std::exception& e) {
    r.source = std::string("measured now, not cached (") + e.what() + "): it varies run to run";
  }
  return r;
}

}  // namespace mls::kernels

// ---- the model and its plot ---------------------------------------------------------------------

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mls/common/error.hpp"
#include "mls/common/svg.hpp"

namespace mls::kernels {

double Roof::attainable(double ai) const { return std::min(peak_gflops, ai * dram_gbs); }

namespace {

const Roof& roof_of(int threads, const std::vector<Roof>& roofs, const std::string& who) {
  for (const auto& r : roofs) {
    if (r.threads == threads) return r;
  }
  fail("roofline: no roof for ", threads, " thread(s), needed by '", who, "' (", roofs.size(),
       " roof(s) given)");
}

bool positive(double v) { return std::isfinite(v) && v > 0; }

}  // namespace

RooflinePoint place(const Measurement& m, const std::vector<Roof>& roofs) {
  MLS_CHECK(positive(m.flops) && positive(m.bytes) && positive(m.seconds),
            "roofline: measurement '", m.name,
            "' needs positive finite flops, bytes and seconds, got ", m.flops, ", ", m.bytes, ", ",
            m.seconds);
  const Roof& roof = roof_of(m.threads, roofs, m.name);
  MLS_CHECK(positive(roof.peak_gflops) && positive(roof.dram_gbs), "roofline: the ", m.threads,
            "-thread roof needs a positive peak and bandwidth, got ", roof.peak_gflops,
            " GFLOP/s and ", roof.dram_gbs, " GB/s");
  RooflinePoint p;
  p.name = m.name;
  p.threads = m.threads;
  p.ai = m.flops / m.bytes;
  p.gflops = m.flops / m.seconds * 1e-9;
  p.gbs = m.bytes / m.seconds * 1e-9;
  p.roof_gflops = roof.attainable(p.ai);
  p.fraction = p.gflops / p.roof_gflops;
  MLS_CHECK(p.fraction <= 1.0 + kRoofSlack, "roofline: '", m.name, "' (", m.threads,
            " thread(s)) reaches ", p.gflops, " GFLOP/s at ", p.ai, " flop/byte, ",
            100.0 * p.fraction, "% of its roof (", p.roof_gflops, " GFLOP/s = min(peak ",
            roof.peak_gflops, ", ", roof.dram_gbs,
            " GB/s x AI)); expected at most 100%: the roof and the kernel were not measured on "
            "the same footing (bytes counted alike, working sets beyond the last-level cache)");
  p.fraction = std::min(p.fraction, 1.0);
  return p;
}

double RooflinePlot::x(double ai) const {
  return left + (std::log10(ai) - std::log10(ai_min)) / (std::log10(ai_max) - std::log10(ai_min)) *
                    (width - left - right);
}

double RooflinePlot::y(double gflops) const {
  return height - bottom -
         (std::log10(gflops) - std::log10(gflops_min)) /
             (std::log10(gflops_max) - std::log10(gflops_min)) * (height - top - bottom);
}

RooflinePlot RooflinePlot::for_roofs(const std::vector<Roof>& roofs) {
  RooflinePlot plot;
  double peak = 1;
  for (const auto& r : roofs) peak = std::max(peak, r.peak_gflops);
  plot.gflops_max = std::pow(10.0, std::ceil(std::log10(peak * 2)));
  return plot;
}

std::string roofline_svg(const std::vector<Roof>& roofs, const std::vector<RooflinePoint>& points,
                         const std::string& title) {
  MLS_CHECK(!roofs.empty(), "roofline_svg: no roofs to draw");
  const RooflinePlot P = RooflinePlot::for_roofs(roofs);
  // A point is drawn only under its own roof (re-checked: points may come from elsewhere).
  for (const auto& p : points) {
    const Roof& roof = roof_of(p.threads, roofs, p.name);
    MLS_CHECK(p.ai > 0 && p.gflops > 0 && p.gflops <= roof.attainable(p.ai) * (1.0 + kRoofSlack),
              "roofline_svg: point '", p.name, "' (", p.threads, " thread(s), AI ", p.ai, ", ",
              p.gflops, " GFLOP/s) lies above its roof (", roof.attainable(p.ai),
              " GFLOP/s); expected at most the roof");
  }
  auto num = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", v);
    return std::string(b);
  };
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
  auto color = [&](int threads) {
    for (std::size_t i = 0; i < roofs.size(); ++i) {
      if (roofs[i].threads == threads) return kColors[i % 4];
    }
    return "#000000";
  };
  auto dash = [](int threads) { return threads == 1 ? "" : "8,4"; };
  // The same mapping as P.x and P.y (log10 on both axes).
  const svg::Scale X(P.ai_min, P.ai_max, P.left, P.width - P.right, svg::Scale::Log);
  const svg::Scale Y(P.gflops_min, P.gflops_max, P.height - P.bottom, P.top, svg::Scale::Log);
  svg::Document d(P.width, P.height, {.font_size = 11});
  d.x_axis(X, P.height - P.bottom,
           {.tick_out = 0, .line = false, .grid = "#ddd", .grid_to = P.top, .label_gap = 15,
            .title = "arithmetic intensity (flop per compulsory byte)", .title_gap = P.bottom - 10});
  d.y_axis(Y, P.left,
           {.tick_out = 0, .line = false, .grid = "#ddd", .grid_to = P.width - P.right, .label_gap = 5,
            .title = "GFLOP/s", .title_gap = P.left - 15});
  std::vector<svg::LegendEntry> legend;
  for (const auto& r : roofs) {
    const char* col = color(r.threads);
    const double ridge = r.peak_gflops / r.dram_gbs;
    const double ai0 = std::max(P.ai_min, P.gflops_min / r.dram_gbs);
    d.polyline({{X(ai0), Y(ai0 * r.dram_gbs)}, {X(ridge), Y(r.peak_gflops)}, {X(P.ai_max), Y(r.peak_gflops)}},
               {.cls = "roof", .stroke = col, .stroke_width = 2, .dash = dash(r.threads),
                .extra = {{"data-threads", r.threads}}});
    if (r.cache_gbs > 0) {
      const double cridge = r.peak_gflops / r.cache_gbs;
      const double c0 = std::max(P.ai_min, P.gflops_min / r.cache_gbs);
      d.polyline({{X(c0), Y(c0 * r.cache_gbs)}, {X(cridge), Y(r.peak_gflops)}},
                 {.cls = "cache-roof", .stroke = col, .stroke_width = 1, .dash = "2,3",
                  .extra = {{"data-threads", r.threads}}});
    }
    legend.push_back({std::to_string(r.threads) + " thread" + (r.threads == 1 ? "" : "s") + ": peak " +
                          num(r.peak_gflops) + " GFLOP/s, DRAM " + num(r.dram_gbs) + " GB/s" +
                          (r.cache_gbs > 0 ? ", L2 cache " + num(r.cache_gbs) + " GB/s (dotted, no point uses it)"
                                           : std::string()),
                      col, svg::LegendEntry::Line, dash(r.threads)});
  }
  d.legend(P.left + 10, P.top + 16, legend, {.row = 15});
  int i = 0;
  for (const auto& p : points) {
    const char* col = color(p.threads);
    const double cx = X(p.ai), cy = Y(std::max(p.gflops, P.gflops_min));
    const bool near_right = cx > P.width - 170;  // label to the left of the dot there
    d.circle(cx, cy, 4, {.cls = "point", .fill = col, .extra = {{"data-threads", p.threads}}});
    d.text(cx + (near_right ? -6 : 6), cy + (i++ % 2 ? -4 : 10),
           p.name + " (" + std::to_string(std::lround(100 * p.fraction)) + "%)",
           {.anchor = near_right ? svg::Anchor::End : svg::Anchor::Start, .fill = col});
  }
  d.text(P.width / 2, 18, title, {.anchor = svg::Anchor::Middle, .size = 13});
  return d.str();
}

}  // namespace mls::kernels
