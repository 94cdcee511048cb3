#pragma once
/// Wall-clock timing for tools and demos (never for test assertions).
#include <chrono>

namespace mls {

class Timer {
 public:
  Timer() : start_(Clock::now()) {}
  void reset() { start_ = Clock::now(); }
  /// Seconds since construction or the last reset.
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double millis() const { return seconds() * 1e3; }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

/// Runs `f` `repeats` times and returns the smallest time in seconds (a robust estimate).
template <class F>
double time_min(F&& f, int repeats = 5) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    Timer t;
    f();
    const double s = t.seconds();
    if (s < best) best = s;
  }
  return best;
}

}  // namespace mls
