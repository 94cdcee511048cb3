#pragma once
/// Lab 4: the roofline model (slides 002): this machine's compute roof, the memory roofs, and
/// kernels placed under them. Shared by mls-roofline and the tools that report a model-FLOP
/// utilisation (lab 6's mls-gpt), which read the peak from one cache (peak_gflops_cached).
///
/// Honesty rules the model enforces (a student reads the picture to decide what to optimise):
///   - a kernel's bytes are its compulsory traffic (every input read once, every output written
///     once), and the memory roof is measured with bytes counted the same way, on working sets
///     well beyond the last-level cache, as the best of several streaming patterns (a kernel that
///     streams its stores must not beat a roof measured with plain ones);
///   - a point belongs to the roof of its own thread count;
///   - a point more than `kRoofSlack` above its roof is an error (mls::Error naming the point,
///     its GFLOP/s and the roof), never a dot drawn above the line;
///   - a cache roof (working set inside L2), when given, is drawn as its own labelled line and
///     no point is placed against it.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace mls::kernels {

/// Peak float32 FMA GFLOP/s of `threads` threads (each runs 12 independent FMA chains, 2 flops
/// per lane), with AVX-512 or AVX2 vectors; best of 3 runs. `iters` sets the loop length.
double peak_gflops(bool avx512, int threads, long iters = 20'000'000);
/// peak_gflops with the widest vectors this CPU has.
double peak_gflops_best(int threads, long iters = 20'000'000);

/// The peak, measured once per machine and kept, so that figures divided by it (lab 6's MFU)
/// compare across runs: a measurement on a shared machine varies by 2x run to run. The cache is a
/// small text file per (CPU model, vector width, thread count) in `dir`, written atomically
/// (write_file_atomic); a missing, unreadable or foreign file is measured again and rewritten,
/// and where the folder cannot be written the peak is measured and used uncached (the source
/// says why). mls-roofline re-measures (`remeasure`) and keeps the larger: the cached peak is
/// the best this machine has reached.
struct PeakCacheOptions {
  std::filesystem::path dir{};                 ///< empty: default_peak_cache_dir()
  bool remeasure = false;                      ///< measure even when cached; keep the larger
  std::function<double(int threads)> measure{};  ///< empty: the best of 5 peak_gflops_best(threads)
  std::string cpu{};                           ///< empty: cpu_model_name()
  bool avx512 = false;                         ///< part of the key; set from the CPU when cpu is empty
};
struct CachedPeak {
  double gflops = 0;
  std::filesystem::path file{};  ///< the cache file (empty: no cache folder)
  bool from_cache = false;       ///< read from `file`, not measured in this run
  std::string source{};          ///< for a report: "cached in <file>", "measured now, cached in <file>", ...
};
/// $XDG_CACHE_HOME/mlsys-labs, else $HOME/.cache/mlsys-labs, else empty (no cache).
std::filesystem::path default_peak_cache_dir();
/// The CPU's "model name" from /proc/cpuinfo ("unknown CPU" where there is none).
std::string cpu_model_name();
/// The cache file name of a key: "peak-gflops-<cpu, letters and digits>-<avx512|avx2>-t<threads>.txt".
std::string peak_cache_name(const std::string& cpu, bool avx512, int threads);
/// The peak of `threads` threads (>= 1; mls::Error otherwise), from the cache or measured.
CachedPeak peak_gflops_cached(int threads, const PeakCacheOptions& opt = {});

/// Relative amount a measured point may exceed its roof by (timing noise) before it is an error.
inline constexpr double kRoofSlack = 0.05;

/// One roof: compute peak and memory bandwidth at a thread count.
struct Roof {
  int threads = 1;
  double peak_gflops = 0;  // compute roof
  double dram_gbs = 0;     // memory roof (working sets beyond the last-level cache)
  double cache_gbs = 0;    // optional cache roof (L2-resident working set); 0: not drawn
  /// Attainable GFLOP/s at arithmetic intensity `ai` (flop/byte): min(peak, ai * dram_gbs).
  double attainable(double ai) const;
};

/// A measured kernel: what it did and how long it took.
struct Measurement {
  std::string name;
  int threads = 1;
  double flops = 0;    // floating-point operations per run
  double bytes = 0;    // compulsory bytes per run (inputs read once, outputs written once)
  double seconds = 0;  // best time per run
};

/// A measurement placed under its roof.
struct RooflinePoint {
  std::string name;
  int threads = 1;
  double ai = 0;           // flops / bytes
  double gflops = 0;       // achieved
  double gbs = 0;          // achieved compulsory bandwidth
  double roof_gflops = 0;  // attainable at ai with the roof of `threads`
  double fraction = 0;     // gflops / roof_gflops, <= 1 + kRoofSlack
};

/// Places `m` under the roof with m.threads (clamping fraction to 1 within kRoofSlack). Throws
/// mls::Error when no roof has that thread count, when a value is not positive and finite, or
/// when the point is more than kRoofSlack above its roof.
RooflinePoint place(const Measurement& m, const std::vector<Roof>& roofs);

/// Log-log plot geometry of roofline_svg (public so that tests can check where things land).
struct RooflinePlot {
  double width = 760, height = 500, left = 70, right = 20, top = 30, bottom = 50;
  double ai_min = 1e-2, ai_max = 1e3, gflops_min = 1e-1, gflops_max = 1e4;
  double x(double ai) const;      // SVG x of an arithmetic intensity
  double y(double gflops) const;  // SVG y of a GFLOP/s value (larger y is lower)
  /// The plot for these roofs: gflops_max the decade above the highest peak.
  static RooflinePlot for_roofs(const std::vector<Roof>& roofs);
};

/// The roofline as an SVG document: one DRAM roof per entry of `roofs` (solid for 1 thread,
/// dashed otherwise, labelled with its thread count, GB/s and peak), a dotted cache roof where
/// cache_gbs > 0, and each point in its roof's colour. Throws mls::Error if a point lies above
/// its roof (see place) or names a thread count without a roof.
std::string roofline_svg(const std::vector<Roof>& roofs, const std::vector<RooflinePoint>& points,
                         const std::string& title);

}  // namespace mls::kernels
