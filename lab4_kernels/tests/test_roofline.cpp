// Lab 4: the roofline model of mls-roofline (mls/kernels/roofline.hpp) on given measurements:
// arithmetic, refusal of points above their roof, and where the SVG puts roofs and points.
// No timing: every measurement here is made up (the peak cache's measurement is injected).
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "mls/common/file.hpp"
#include "mls/kernels/roofline.hpp"
#include "mls/testing.hpp"

using mls::kernels::Measurement;
using mls::kernels::Roof;
using mls::kernels::RooflinePlot;

namespace {

// 1 thread: 50 GFLOP/s, 20 GB/s (ridge 2.5); 2 threads: 100 GFLOP/s, 25 GB/s (ridge 4).
std::vector<Roof> two_roofs() {
  Roof r1, r2;
  r1.threads = 1;
  r1.peak_gflops = 50;
  r1.dram_gbs = 20;
  r1.cache_gbs = 200;
  r2.threads = 2;
  r2.peak_gflops = 100;
  r2.dram_gbs = 25;
  return {r1, r2};
}

/// Number of (non-overlapping) occurrences of `needle` in `s`.
long count(const std::string& s, const std::string& needle) {
  long n = 0;
  for (auto p = s.find(needle); p != std::string::npos; p = s.find(needle, p + needle.size())) ++n;
  return n;
}

/// The value of attribute `attr` of the k-th element starting with `tag` in `svg`.
double attr_of(const std::string& svg, const std::string& tag, long k, const std::string& attr) {
  auto p = svg.find(tag);
  for (long i = 0; i < k; ++i) p = svg.find(tag, p + 1);
  REQUIRE(p != std::string::npos);
  const auto a = svg.find(" " + attr + "='", p);
  REQUIRE(a != std::string::npos);
  return std::stod(svg.substr(a + attr.size() + 3));
}

}  // namespace

TEST_CASE("roofline: place computes AI, GFLOP/s and the fraction of the roof of its thread count",
          "[lab4][roofline]") {
  const auto roofs = two_roofs();
  // Memory-bound, 1 thread: 1 GFLOP in 1 GB over 0.1 s -> AI 1, 10 GFLOP/s, roof 20 -> 50%.
  const auto mem = mls::kernels::place({"stream", 1, 1e9, 1e9, 0.1}, roofs);
  CHECK(mem.ai == Approx(1.0));
  CHECK(mem.gflops == Approx(10.0));
  CHECK(mem.gbs == Approx(10.0));
  CHECK(mem.roof_gflops == Approx(20.0));
  CHECK(mem.fraction == Approx(0.5));
  // The same measurement on 2 threads sits under the 2-thread roof (25 GB/s): 40%.
  const auto mem2 = mls::kernels::place({"stream", 2, 1e9, 1e9, 0.1}, roofs);
  CHECK(mem2.roof_gflops == Approx(25.0));
  CHECK(mem2.fraction == Approx(0.4));
  // Compute-bound: AI 100, 45 GFLOP/s under the 50 GFLOP/s peak -> 90%.
  const auto gemm = mls::kernels::place({"gemm", 1, 45e9, 4.5e8, 1.0}, roofs);
  CHECK(gemm.ai == Approx(100.0));
  CHECK(gemm.roof_gflops == Approx(50.0));
  CHECK(gemm.fraction == Approx(0.9));
  // Within the timing slack above the roof: placed on it (fraction 1), not above.
  const auto edge = mls::kernels::place({"edge", 1, 1e9, 1e9, 1.0 / 20.5}, roofs);
  CHECK(edge.fraction == 1.0);
  mls::testing::observe(
      "fractions", std::vector<double>{mem.fraction, mem2.fraction, gemm.fraction, edge.fraction},
      {1e-12, 0.0});
  mls::testing::observe("ai", std::vector<double>{mem.ai, gemm.ai}, {1e-12, 0.0});
}

TEST_CASE("roofline: a point above its roof, or without one, is a clear error",
          "[lab4][roofline]") {
  const auto roofs = two_roofs();
  // 30 GB/s at AI 1 on 1 thread: 150% of the 20 GB/s roof (what a cache-resident kernel against
  // a DRAM roof looks like).
  mls::testing::require_error(
      [&] {
        mls::kernels::place({"fused in cache", 1, 3e9, 3e9, 0.1}, roofs);
      },
      "150% of its roof");
  mls::testing::require_error(
      [&] {
        mls::kernels::place({"fused in cache", 1, 3e9, 3e9, 0.1}, roofs);
      },
      "'fused in cache'");
  // The same rate on 2 threads is still above the 2-thread roof: 30 > 25 GB/s, 120%; 20 GB/s
  // is under it (80%).
  mls::testing::require_error(
      [&] {
        mls::kernels::place({"k", 2, 3e9, 3e9, 0.1}, roofs);
      },
      "120% of its roof");
  const double under = mls::kernels::place({"k", 2, 2e9, 2e9, 0.1}, roofs).fraction;
  CHECK(under == Approx(0.8));
  mls::testing::observe("fraction under the 2-thread roof", under, {1e-12, 0.0});
  mls::testing::require_error(
      [&] {
        mls::kernels::place({"k", 4, 1e9, 1e9, 1.0}, roofs);
      },
      "no roof for 4 thread(s)");
  mls::testing::require_error(
      [&] {
        mls::kernels::place({"k", 1, 1e9, 0.0, 1.0}, roofs);
      },
      "positive finite flops, bytes and seconds");
  mls::testing::require_error(
      [&] {
        mls::kernels::place({"k", 1, 1e9, 1e9, -1.0}, roofs);
      },
      "positive finite");
  mls::testing::require_error([&] { mls::kernels::roofline_svg({}, {}, "t"); }, "no roofs");
  // A point built by hand above its roof is refused by the plot too.
  mls::kernels::RooflinePoint bad;
  bad.name = "hand-made";
  bad.threads = 1;
  bad.ai = 1.0;
  bad.gflops = 30.0;  // roof 20
  mls::testing::require_error([&] { mls::kernels::roofline_svg(roofs, {bad}, "t"); },
                              "lies above its roof");
}

TEST_CASE("roofline: the SVG draws one roof per thread count and every point under its roof",
          "[lab4][roofline]") {
  const auto roofs = two_roofs();
  std::vector<mls::kernels::RooflinePoint> pts;
  for (int t : {1, 2}) {
    pts.push_back(mls::kernels::place({"mem <a&b>", t, 1e9, 1e9, 0.2}, roofs));
    pts.push_back(mls::kernels::place({"ridge", t, 2e9, 1e9, 0.11}, roofs));
    pts.push_back(mls::kernels::place({"gemm", t, 40e9, 4e8, 1.0}, roofs));
  }
  const std::string svg = mls::kernels::roofline_svg(roofs, pts, "test <plot>");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(count(svg, "<polyline class='roof'") == 2);
  CHECK(count(svg, "<polyline class='cache-roof'") == 1);  // only the 1-thread roof has one
  CHECK(count(svg, "<circle class='point'") == static_cast<long>(pts.size()));
  CHECK(svg.find("1 thread: peak 50.0 GFLOP/s, DRAM 20.0 GB/s, L2 cache 200.0 GB/s") !=
        std::string::npos);
  CHECK(svg.find("2 threads: peak 100.0 GFLOP/s, DRAM 25.0 GB/s") != std::string::npos);
  CHECK(svg.find("mem &lt;a&amp;b&gt;") != std::string::npos);  // names are escaped
  CHECK(svg.find("test &lt;plot&gt;") != std::string::npos);
  const RooflinePlot plot = RooflinePlot::for_roofs(roofs);
  CHECK(plot.gflops_max == Approx(1000.0));
  std::vector<double> cys;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const auto& p = pts[i];
    const Roof& roof = roofs[p.threads == 1 ? 0 : 1];
    const double cx = attr_of(svg, "<circle class='point'", static_cast<long>(i), "cx");
    const double cy = attr_of(svg, "<circle class='point'", static_cast<long>(i), "cy");
    cys.push_back(cy);
    CHECK(cx == Approx(plot.x(p.ai)).margin(0.06));
    CHECK(cy == Approx(plot.y(p.gflops)).margin(0.06));
    // On or under the roof: SVG y grows downwards (0.06: the printed rounding).
    CHECK(cy >= plot.y(roof.attainable(p.ai)) - 0.06);
  }
  mls::testing::observe("cy", cys, {0.0, 0.06});
  // The roofs' corners: the ridge of each roof at (peak / bandwidth, peak).
  for (long k = 0; k < 2; ++k) {
    auto at = svg.find("<polyline class='roof'");
    for (long i = 0; i < k; ++i) at = svg.find("<polyline class='roof'", at + 1);
    const auto first = svg.find("points='", at) + 8;
    const auto second = svg.find(' ', first) + 1;  // the ridge is the second vertex
    const double rx = std::stod(svg.substr(second));
    const double ry = std::stod(svg.substr(svg.find(',', second) + 1));
    CHECK(rx == Approx(plot.x(roofs[k].peak_gflops / roofs[k].dram_gbs)).margin(0.06));
    CHECK(ry == Approx(plot.y(roofs[k].peak_gflops)).margin(0.06));
  }
}

namespace {
/// A fresh folder under the temporary directory, removed at the end of the test.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / ("mls_lab4_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
}  // namespace

TEST_CASE("roofline: the peak is measured once per machine and thread count, then read from its cache",
          "[lab4][roofline]") {
  using mls::kernels::peak_gflops_cached;
  ScratchDir dir("peak_cache");
  int measured = 0;
  double next = 129.0;  // what the (made-up) measurement returns
  mls::kernels::PeakCacheOptions o;
  o.dir = dir.path / "mlsys-labs";  // made on first use
  o.cpu = "AMD EPYC 7B13 64-Core Processor";
  o.avx512 = true;
  o.measure = [&](int) {
    ++measured;
    return next;
  };
  const auto first = peak_gflops_cached(1, o);
  MLS_OBSERVE(first.gflops);
  MLS_OBSERVE(first.file.filename().string());
  CHECK(measured == 1);
  CHECK_FALSE(first.from_cache);
  CHECK(first.file.filename() == "peak-gflops-AMD_EPYC_7B13_64_Core_Processor-avx512-t1.txt");
  CHECK_THAT(first.source, Catch::StartsWith("measured now, cached in "));
  // The next run reads it: the same peak, whatever a measurement would say now.
  next = 232.0;
  const auto second = peak_gflops_cached(1, o);
  MLS_OBSERVE(second.gflops);
  CHECK(measured == 1);
  CHECK(second.from_cache);
  CHECK(second.gflops == first.gflops);
  CHECK_THAT(second.source, Catch::StartsWith("cached in ") && Catch::Contains("mls-roofline re-measures"));
  // Another thread count, another CPU or vector width: another key, measured.
  CHECK(peak_gflops_cached(2, o).gflops == 232.0);
  o.avx512 = false;
  CHECK(peak_gflops_cached(1, o).gflops == 232.0);
  CHECK(measured == 3);
  o.avx512 = true;
  // mls-roofline re-measures and keeps the larger: the best this machine has reached.
  o.remeasure = true;
  next = 240.0;
  CHECK(peak_gflops_cached(1, o).gflops == 240.0);
  next = 100.0;
  const auto lower = peak_gflops_cached(1, o);
  CHECK(lower.gflops == 240.0);
  CHECK_THAT(lower.source, Catch::Contains("this run measured 100.0 GFLOP/s, below it"));
  o.remeasure = false;
  CHECK(peak_gflops_cached(1, o).gflops == 240.0);
  CHECK(measured == 5);
  // A foreign or damaged file is measured again and rewritten.
  mls::write_file_atomic(first.file, "mlsys-labs peak_gflops 1\ncpu another CPU\nisa avx512\nthreads 1\ngflops 999\n");
  next = 150.0;
  CHECK(peak_gflops_cached(1, o).gflops == 150.0);
  mls::write_file_atomic(first.file, "garbage");
  CHECK(peak_gflops_cached(1, o).gflops == 150.0);
  CHECK(peak_gflops_cached(1, o).from_cache);
  CHECK(measured == 7);
}

TEST_CASE("roofline: the peak cache lives in XDG_CACHE_HOME or ~/.cache, and an unwritable one is measured, not fatal",
          "[lab4][roofline]") {
  ScratchDir dir("peak_cache_fallback");
  std::filesystem::create_directories(dir.path);
  mls::write_file_atomic(dir.path / "file", "not a folder");
  mls::kernels::PeakCacheOptions o;
  o.dir = dir.path / "file" / "mlsys-labs";  // under a regular file: cannot be made
  o.cpu = "Test CPU";
  o.measure = [](int) { return 50.0; };
  const auto r = mls::kernels::peak_gflops_cached(1, o);
  MLS_OBSERVE(r.gflops);
  CHECK(r.gflops == 50.0);
  CHECK_FALSE(r.from_cache);
  CHECK_THAT(r.source, Catch::StartsWith("measured now, not cached (") && Catch::Contains("varies run to run"));
  o.measure = [](int) { return std::nan(""); };
  mls::testing::require_error([&] { mls::kernels::peak_gflops_cached(1, o); }, "the measured peak of 1 thread(s) is nan");
  mls::testing::require_error([&] { mls::kernels::peak_gflops_cached(0, o); }, "peak_gflops_cached: threads = 0, expected >= 1");
  MLS_OBSERVE(mls::kernels::peak_cache_name("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", false, 4));
  CHECK(mls::kernels::peak_cache_name("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", false, 4) ==
        "peak-gflops-Intel_R_Xeon_R_Platinum_8481C_CPU_2_70GHz-avx2-t4.txt");
  // Where it lives: $XDG_CACHE_HOME/mlsys-labs, else $HOME/.cache/mlsys-labs, else nowhere.
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
  ::setenv("HOME", "/h", 1);
  CHECK(mls::kernels::default_peak_cache_dir() == "/x/cache/mlsys-labs");
  ::unsetenv("XDG_CACHE_HOME");
  CHECK(mls::kernels::default_peak_cache_dir() == "/h/.cache/mlsys-labs");
  ::unsetenv("HOME");
  CHECK(mls::kernels::default_peak_cache_dir().empty());
  o.dir.clear();
  o.measure = [](int) { return 60.0; };
  CHECK_THAT(mls::kernels::peak_gflops_cached(1, o).source, Catch::StartsWith("measured now, not cached (no $XDG_CACHE_HOME"));
  if (xdg) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (home) ::setenv("HOME", saved_home.c_str(), 1);
  CHECK_FALSE(mls::kernels::cpu_model_name().empty());
}
