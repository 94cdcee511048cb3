#pragma once
/// Hand-timed Google Benchmark iterations, for the benchmark programs of every lab (include it only
/// from a program linked with benchmark::benchmark; the common library itself does not use it).
/// The interleaved timing (seconds_of, interleaved_ratio) lives in mls/common/interleaved_timing.hpp,
/// which needs no Google Benchmark (lab 4's autotuner times candidates with it); included here.
#include <benchmark/benchmark.h>

#include "mls/common/interleaved_timing.hpp"  // seconds_of, interleaved_ratio

#include <chrono>

namespace mls::bench {

/// Runs `fn` once to warm up (page faults, lazy init), then once per benchmark iteration, timing
/// each run by hand (use with ->UseManualTime()). Returns the seconds of all timed runs together.
template <class F>
double timed_iterations(benchmark::State& state, F&& fn) {
  fn();
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    benchmark::ClobberMemory();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    seconds += s;
  }
  return seconds;
}

}  // namespace mls::bench
