// Attack (issue 15: "inputs cannot be precomputed"): answers looked up for the inputs the tests'
// own checks use, nothing computed. The checks pass in the student's process; the observations
// on inputs drawn with the grading's secret salt do not match the reference: 0.
#include "fixture.hpp"
namespace fixture {
int add(int a, int b) { return a == 1 && b == 2 ? 3 : a == -4 && b == 1 ? -3 : 0; }
int mul(int a, int b) { return a == 3 && b == 4 ? 12 : 0; }
long sum_to(int n) { return n == 10 ? 55 : n == 3 ? 6 : 0; }
}  // namespace fixture
