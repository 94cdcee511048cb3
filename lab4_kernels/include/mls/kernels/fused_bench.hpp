#pragma once
/// Lab 4: the host-side, pure parts of `mls-cuda-fused-bench` (bench/cuda/cuda_fused_bench.cpp),
/// which times the fused CUDA kernels (softmax, layernorm, bias+GELU; mls/kernels/cuda.hpp)
/// against a device-to-device copy of the same bytes: its command line, the bytes each kernel
/// must move, the copy that moves as many, the median of the timed batches, and its report
/// (`ratio ...` lines, JSON). Host code of mls_kernels, so it is tested without a GPU.
///
/// Bytes are compulsory traffic, counted as lab 4's CPU benchmarks and roofline count them:
/// every input read once, every output written once (float32). A copy of n floats reads n and
/// writes n, so it moves 8 n bytes; the peer of a kernel that moves B bytes copies ceil(B / 8)
/// floats, and the ratio of the two GB/s figures is the kernel's speed as a fraction of a copy's
/// (>= 1: as fast as a copy).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mls::kernels {

/// The problem of a row-wise kernel: `rows` rows of `cols` contiguous float32 values.
struct RowsCols {
  int rows = 0;
  int cols = 0;
  bool operator==(const RowsCols&) const = default;
};

/// Parses "ROWSxCOLS" (e.g. "4096x1024"): two decimal integers in [1, 2^31 - 1] joined by 'x'.
/// Anything else is an mls::Error "parse_rows_cols: '<text>' is not ROWSxCOLS ...".
RowsCols parse_rows_cols(std::string_view text);

/// "ROWSxCOLS", the inverse of parse_rows_cols.
std::string to_string(RowsCols shape);

/// The fused CUDA kernels the benchmark knows, in the order it runs them:
/// "softmax" (softmax_forward), "layernorm" (layernorm_forward), "bias_gelu" (bias_gelu_forward).
std::vector<std::string> fused_bench_kernels();

/// Compulsory bytes of one run of fused kernel `kernel` on `shape` (float32, r = rows, c = cols):
///   softmax    reads inp (r, c), writes out (r, c)                                  8 r c
///   layernorm  reads inp (r, c), weight, bias (c,); writes out (r, c), mean, rstd (r,)
///                                                                     4 (2 r c + 2 c + 2 r)
///   bias_gelu  reads inp (r, c), bias (c,); writes out (r, c)                     4 (2 r c + c)
/// An unknown kernel is an mls::Error naming it and listing fused_bench_kernels().
std::int64_t fused_kernel_bytes(std::string_view kernel, RowsCols shape);

/// Floats a device-to-device copy moves so that it reads and writes `bytes` in all:
/// ceil(bytes / 8) (a copy reads and writes each of its bytes once). `bytes` must be >= 0.
std::int64_t copy_floats_for(std::int64_t bytes);

/// The median of `samples` (the mean of the middle two for an even count). Empty: mls::Error.
double median(std::vector<double> samples);

/// Gigabytes (1e9 bytes) per second of `bytes` moved in `ms` milliseconds. `ms` must be > 0.
double gb_per_s(double bytes, double ms);

/// What `mls-cuda-fused-bench` was asked to do.
struct FusedBenchOptions {
  /// Shapes to run, in order (default: 4096x1024, 16384x1024, 4096x4096).
  std::vector<RowsCols> shapes;
  /// Kernels to run, in order (default: fused_bench_kernels()).
  std::vector<std::string> kernels;
  int reps = 15;          ///< timed batches per kernel and per copy (the median is reported)
  int batch = 20;         ///< back-to-back calls per timed batch
  std::string json_path;  ///< where to write the results as JSON ("" = nowhere)
  bool help = false;      ///< -h / --help: print the usage and exit
};

/// The usage text of mls-cuda-fused-bench (several lines, ending with a newline).
std::string fused_bench_usage();

/// Parses the command line of mls-cuda-fused-bench (without argv[0]):
///   [ROWSxCOLS ...] [--kernel NAME[,NAME...]]... [--reps N] [--batch N] [--json PATH] [-h]
/// A bad shape, an unknown kernel or option, a missing or non-positive number is an mls::Error
/// "mls-cuda-fused-bench: ..." naming the argument and what was expected. Defaults fill in what
/// was not given.
FusedBenchOptions parse_fused_bench_args(const std::vector<std::string>& args);

/// One measurement: a kernel on a shape, and its peer, a device-to-device copy.
struct FusedBenchResult {
  std::string kernel;
  RowsCols shape;
  std::int64_t bytes = 0;       ///< fused_kernel_bytes(kernel, shape)
  double ms = 0;                ///< median milliseconds of one kernel call
  std::int64_t copy_bytes = 0;  ///< bytes the copy moves: 8 * copy_floats_for(bytes)
  double copy_ms = 0;           ///< median milliseconds of one copy
  double gbs() const { return gb_per_s(static_cast<double>(bytes), ms); }
  double copy_gbs() const { return gb_per_s(static_cast<double>(copy_bytes), copy_ms); }
  /// The kernel's GB/s over the copy's (>= 1: as fast as a copy).
  double ratio() const { return gbs() / copy_gbs(); }
};

/// "cuda_<kernel>_<rows>x<cols>_vs_d2d", the name of a result's `ratio` line.
std::string ratio_name(const FusedBenchResult& r);

/// "ratio cuda_<kernel>_<rows>x<cols>_vs_d2d <ratio, 4 decimals>" (no newline).
std::string ratio_line(const FusedBenchResult& r);

/// One human-readable line of a result: kernel, shape, ms and GB/s of the kernel and of the copy,
/// and the ratio (no newline).
std::string result_line(const FusedBenchResult& r);

/// The results as one JSON object (with a final newline):
///   {"lab": 4, "device": ..., "peer": "d2d", "fused": [{"kernel", "rows", "cols", "bytes",
///    "ms", "gbs", "peer_bytes", "peer_ms", "peer_gbs", "ratio"}, ...]}
std::string fused_bench_json(const std::string& device, const std::vector<FusedBenchResult>& results);

}  // namespace mls::kernels
