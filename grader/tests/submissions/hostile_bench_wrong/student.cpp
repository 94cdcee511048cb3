// Attack (issue 25, cause 6: a program that skips work only when benchmarking): mul is right on
// the fixed inputs of the tests' own checks and returns 0 (no work) on any other input, as a
// kernel would when it detects a timing run. The grader times only runs whose results it
// validates against the reference: the timed run's results differ, so there is no figure.
#include "fixture.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int a, int b) { return (a == 3 && b == 4) || a == 0 ? a * b : 0; }
long sum_to(int n) {
  long s = 0;
  for (int i = 1; i <= n; ++i) s += i;
  return s;
}
}  // namespace fixture
