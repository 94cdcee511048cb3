// Lab 4: the compute roof (peak FMA throughput), measured with register-resident FMA chains.
#include "mls/kernels/roofline.hpp"

#include <immintrin.h>

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

}  // namespace mls::kernels

// ---- the model and its plot ---------------------------------------------------------------------

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "mls/common/error.hpp"

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

/// Text for an SVG element (names and titles may hold <, > or &).
std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '\'')
      out += "&apos;";
    else
      out += c;
  }
  return out;
}

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
  std::ostringstream f;
  f << "<svg xmlns='http://www.w3.org/2000/svg' width='" << P.width << "' height='" << P.height
    << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' "
       "fill='white'/>\n";
  for (double d = P.ai_min; d <= P.ai_max * 1.001; d *= 10) {
    f << "<line x1='" << num(P.x(d)) << "' y1='" << P.top << "' x2='" << num(P.x(d)) << "' y2='"
      << P.height - P.bottom << "' stroke='#ddd'/><text x='" << num(P.x(d)) << "' y='"
      << P.height - P.bottom + 15 << "' text-anchor='middle'>" << d << "</text>\n";
  }
  for (double d = P.gflops_min; d <= P.gflops_max * 1.001; d *= 10) {
    f << "<line x1='" << P.left << "' y1='" << num(P.y(d)) << "' x2='" << P.width - P.right
      << "' y2='" << num(P.y(d)) << "' stroke='#ddd'/><text x='" << P.left - 5 << "' y='"
      << num(P.y(d) + 4) << "' text-anchor='end'>" << d << "</text>\n";
  }
  int row = 0;
  for (const auto& r : roofs) {
    const char* col = color(r.threads);
    const double ridge = r.peak_gflops / r.dram_gbs;
    const double ai0 = std::max(P.ai_min, P.gflops_min / r.dram_gbs);
    f << "<polyline class='roof' data-threads='" << r.threads << "' fill='none' stroke='" << col
      << "' stroke-width='2'" << (r.threads == 1 ? "" : " stroke-dasharray='8,4'") << " points='"
      << num(P.x(ai0)) << "," << num(P.y(ai0 * r.dram_gbs)) << " " << num(P.x(ridge)) << ","
      << num(P.y(r.peak_gflops)) << " " << num(P.x(P.ai_max)) << "," << num(P.y(r.peak_gflops))
      << "'/>\n";
    if (r.cache_gbs > 0) {
      const double cridge = r.peak_gflops / r.cache_gbs;
      const double c0 = std::max(P.ai_min, P.gflops_min / r.cache_gbs);
      f << "<polyline class='cache-roof' data-threads='" << r.threads << "' fill='none' stroke='"
        << col << "' stroke-width='1' stroke-dasharray='2,3' points='" << num(P.x(c0)) << ","
        << num(P.y(c0 * r.cache_gbs)) << " " << num(P.x(cridge)) << "," << num(P.y(r.peak_gflops))
        << "'/>\n";
    }
    f << "<text x='" << P.left + 10 << "' y='" << P.top + 14 * (++row) << "' fill='" << col << "'>"
      << r.threads << " thread" << (r.threads == 1 ? "" : "s") << ": peak " << num(r.peak_gflops)
      << " GFLOP/s, DRAM " << num(r.dram_gbs) << " GB/s"
      << (r.cache_gbs > 0 ? ", L2 cache " + num(r.cache_gbs) + " GB/s (dotted, no point uses it)"
                          : std::string())
      << "</text>\n";
  }
  int i = 0;
  for (const auto& p : points) {
    const char* col = color(p.threads);
    const double cy = P.y(std::max(p.gflops, P.gflops_min));
    const bool near_right = P.x(p.ai) > P.width - 170;  // label to the left of the dot there
    f << "<circle class='point' data-threads='" << p.threads << "' cx='" << num(P.x(p.ai))
      << "' cy='" << num(cy) << "' r='4' fill='" << col << "'/><text x='"
      << num(P.x(p.ai) + (near_right ? -6 : 6)) << "' y='" << num(cy + (i++ % 2 ? -4 : 10))
      << (near_right ? "' text-anchor='end" : "") << "' fill='" << col << "'>" << xml_escape(p.name)
      << " (" << static_cast<int>(std::lround(100 * p.fraction)) << "%)</text>\n";
  }
  f << "<text x='" << P.width / 2 << "' y='" << P.height - 10
    << "' text-anchor='middle'>arithmetic intensity (flop per compulsory byte)</text><text x='15' "
       "y='"
    << P.height / 2 << "' transform='rotate(-90 15 " << P.height / 2
    << ")' text-anchor='middle'>GFLOP/s</text><text x='" << P.width / 2
    << "' y='18' text-anchor='middle'>" << xml_escape(title) << "</text>\n</svg>\n";
  return f.str();
}

}  // namespace mls::kernels
