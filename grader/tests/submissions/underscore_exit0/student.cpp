// Calls _exit(0) in mul, mid-test: NO_RESULT.
#include <unistd.h>

#include "fixture.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int a, int b) { _exit(0); }
long sum_to(int n) { return n <= 0 ? 0 : static_cast<long>(n) * (n + 1) / 2; }
}  // namespace fixture
