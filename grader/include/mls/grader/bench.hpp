#pragma once
/// Benchmarks for the leaderboard: a lab's Google Benchmark program, run sandboxed, its student
/// benchmark and the peer from the same run, the median of repetitions.
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "mls/grader/manifest.hpp"
#include "mls/grader/result.hpp"

namespace mls::grader {

struct BenchResult {
  std::string name;
  bool ok = false;
  double value = 0;        ///< what enters the leaderboard
  double own = 0, peer = 0;///< the figures it comes from (time in ns for "ratio", else the counter)
  std::string message;
};

/// Median over the runs whose name matches `name_regex` (an aggregate "median" row wins if present)
/// of `field` ("real_time", "cpu_time" or a counter name); NaN when none.
double gbench_median(const nlohmann::json& report, const std::string& name_regex, const std::string& field);

/// Computes a benchmark's leaderboard value from a Google Benchmark JSON report.
BenchResult evaluate_benchmark(const nlohmann::json& report, const Benchmark& b);

/// Runs `binary` sandboxed with --benchmark_format=json and evaluates `b`.
BenchResult run_benchmark(const std::filesystem::path& binary, const Benchmark& b, double time_limit_s,
                          int repetitions = 5);

}  // namespace mls::grader
