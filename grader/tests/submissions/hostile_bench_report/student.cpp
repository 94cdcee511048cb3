// Attack (issue 25, cause 6: leaderboard figures were the benchmark program's own words): a
// correct submission that also prints, at exit, a Google Benchmark JSON report claiming a speed
// of 10^6 times its peer. The figure is now the grader's own timing of its validated check runs;
// no report a submission prints is read.
#include <cstdio>

#include "fixture.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int a, int b) { return a * b; }
long sum_to(int n) {
  long s = 0;
  for (int i = 1; i <= n; ++i) s += i;
  return s;
}
}  // namespace fixture

namespace {
struct Report {
  ~Report() {
    std::printf("{\"benchmarks\": [{\"name\": \"BM_Mul\", \"run_name\": \"BM_Mul\", \"real_time\": 1e-6, "
                "\"aggregate_name\": \"median\"}, {\"name\": \"BM_Copy\", \"run_name\": \"BM_Copy\", "
                "\"real_time\": 1, \"aggregate_name\": \"median\"}]}\n");
  }
} report;
}  // namespace
