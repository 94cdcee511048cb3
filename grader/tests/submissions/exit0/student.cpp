// Calls exit(0) in sum_to, mid-test: NO_RESULT (exit status 0 is not a pass).
#include <cstdlib>

#include "fixture.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int a, int b) { return a * b; }
long sum_to(int n) { std::exit(0); }
}  // namespace fixture
