#pragma once
/// The project's interleaved timing: two programs doing the same work timed in alternating batches,
/// so that a shared machine's noise falls on both alike. Header-only, no Google Benchmark: the
/// benchmark programs get it through mls/common/bench_timing.hpp, lab 4's autotuner (mls-tune, the
/// `tuned` SGEMM) times its candidates with it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <type_traits>
#include <utility>
#include <vector>

namespace mls::bench {

/// A compiler barrier: every store before it is done (what benchmark::ClobberMemory does).
inline void clobber_memory() { asm volatile("" : : : "memory"); }

/// The clock `seconds_of` (and so `interleaved_ratio`) reads: the wall clock (steady_clock, the
/// default), or the process's CPU time (CLOCK_PROCESS_CPUTIME_ID: on a busy machine, the time the
/// program itself ran, less disturbed by other programs; meaningful for work on one thread, as
/// a waiting thread pool's spinning is CPU time too). A program sets it once, before timing.
enum class TimingClock { Wall, ProcessCpu };
inline TimingClock& timing_clock() {
  static TimingClock clock = TimingClock::Wall;
  return clock;
}
/// Now, in seconds, on `timing_clock()`.
inline double clock_seconds() {
  if (timing_clock() == TimingClock::ProcessCpu) {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
/// Seconds one call of `fn` takes (on `timing_clock()`).
template <class F>
double seconds_of(F&& fn) {
  const double t0 = clock_seconds();
  fn();
  clobber_memory();
  return clock_seconds() - t0;
}

namespace detail {
/// `MLS_BENCH_REPEAT`, when set, in place of `repeat` (at least 1).
inline int bench_repeat(int repeat) {
  if (const char* env = std::getenv("MLS_BENCH_REPEAT"); env && *env) return std::max(1, std::atoi(env));
  return repeat;
}
/// The rounds both interleaved timings are made of. Construction runs each program once (a, then
/// b) to size the batches: a batch repeats a program until it lasts about `batch_seconds`, each
/// preceded by `warm_seconds` of untimed runs when > 0. round(r) times a batch of each back to
/// back, a first in even rounds, and returns their seconds per call (MLS_BENCH_DEBUG=1 prints them).
template <class A, class B>
struct InterleavedRounds {
  A& run_a;
  B& run_b;
  double once = 0;  ///< the slower program's first run, seconds
  int calls = 1, warm_calls = 0;
  InterleavedRounds(A& a, B& b, double batch_seconds, double warm_seconds) : run_a(a), run_b(b) {
    const double once_a = seconds_of(run_a), once_b = seconds_of(run_b);  // in this order: a, then b
    once = std::max(once_a, once_b);
    calls = calls_for(batch_seconds);
    warm_calls = warm_seconds > 0 ? calls_for(warm_seconds) : 0;
  }
  int calls_for(double seconds) const { return static_cast<int>(std::clamp(seconds / std::max(once, 1e-9), 1.0, 1e6)); }
  template <class F>
  double batch(F& f) const {
    for (int i = 0; i < warm_calls; ++i) f();
    return seconds_of([&] {
             for (int i = 0; i < calls; ++i) f();
           }) /
           calls;
  }
  std::pair<double, double> round(int r) const {
    double ta = 0, tb = 0;
    if (r % 2 == 0) {
      ta = batch(run_a);
      tb = batch(run_b);
    } else {
      tb = batch(run_b);
      ta = batch(run_a);
    }
    if (std::getenv("MLS_BENCH_DEBUG")) std::fprintf(stderr, "  round %d: a %.1f us  b %.1f us\n", r, ta * 1e6, tb * 1e6);
    return {ta, tb};
  }
};
}  // namespace detail

/// The ratio time(run_b) / time(run_a) of two programs doing the same work, measured so that a
/// shared machine's noise falls on both alike: after a warm-up run of each, `repeat` rounds each
/// time a batch of run_a and a batch of run_b back to back (alternating which goes first), and
/// the median of the per-round ratios is returned. A batch repeats a run until it lasts about
/// `batch_seconds` (so microsecond kernels are not timed one call at a time). Where a and b run
/// on different thread pools (ours and OpenBLAS's), give `warm_seconds`: each batch is then
/// preceded by untimed runs of its own for that long, so the other pool's threads have gone
/// idle and this one's are awake, as they are in a program that uses one library.
/// `MLS_BENCH_REPEAT` overrides `repeat`; `MLS_BENCH_DEBUG=1` prints each round. (A slow pair,
/// over 0.1 s a run, gets at most 3 rounds.)
template <class A, class B>
double interleaved_ratio(A&& run_a, B&& run_b, int repeat = 9, double batch_seconds = 2e-3,
                         double warm_seconds = 0) {
  repeat = detail::bench_repeat(repeat);
  const detail::InterleavedRounds<std::remove_reference_t<A>, std::remove_reference_t<B>> rounds(run_a, run_b, batch_seconds,
                                                                                              warm_seconds);
  if (rounds.once > 0.1) repeat = std::min(repeat, 3);
  std::vector<double> ratios;
  for (int r = 0; r < repeat; ++r) {
    const auto [ta, tb] = rounds.round(r);
    ratios.push_back(tb / ta);
  }
  std::sort(ratios.begin(), ratios.end());
  const std::size_t m = ratios.size() / 2;
  return ratios.size() % 2 ? ratios[m] : 0.5 * (ratios[m - 1] + ratios[m]);
}

/// The best (smallest) seconds per call of each of two programs, timed interleaved as
/// interleaved_ratio does (one run of each to size the batches, then rounds of a batch of each back
/// to back, alternating which goes first; a batch lasts about `batch_seconds`). The minimum, not the
/// median: on a machine where other programs come and go, a program's best batch is the one least
/// disturbed, and of a streamed copy, the one nearest the memory's bandwidth, so the ratio of two
/// bests moves less between runs than the median of per-round ratios (mls-tune's vs_copy lines).
/// Rounds go on until neither best has improved by more than 1% in the last `repeat` rounds, or
/// `max_rounds` rounds have run (0: 4 x repeat; at least repeat): a burst of load that spoils one
/// program's batches is outlasted, as far as max_rounds goes. `MLS_BENCH_REPEAT` overrides `repeat`
/// (a slow pair, over 0.1 s a run, gets at most 3 rounds in all).
struct BestPair {
  double a = 0;    ///< run_a's best seconds per call
  double b = 0;    ///< run_b's best seconds per call
  int rounds = 0;  ///< rounds run
};
template <class A, class B>
BestPair interleaved_best(A&& run_a, B&& run_b, int repeat = 9, double batch_seconds = 2e-3, int max_rounds = 0) {
  repeat = detail::bench_repeat(repeat);
  max_rounds = std::max(repeat, max_rounds > 0 ? max_rounds : 4 * repeat);
  const detail::InterleavedRounds<std::remove_reference_t<A>, std::remove_reference_t<B>> rounds(run_a, run_b, batch_seconds, 0);
  if (rounds.once > 0.1) repeat = max_rounds = std::min(repeat, 3);
  BestPair best{1e300, 1e300, 0};
  int since = 0;  // rounds since either best last improved by more than 1%
  while (best.rounds < max_rounds && (best.rounds < repeat || since < repeat)) {
    const auto [ta, tb] = rounds.round(best.rounds);
    ++since;
    if (ta < 0.99 * best.a || tb < 0.99 * best.b) since = 0;
    best.a = std::min(best.a, ta);
    best.b = std::min(best.b, tb);
    ++best.rounds;
  }
  return best;
}

}  // namespace mls::bench
