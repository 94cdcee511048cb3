// Segfaults in one test only ("mul zero"): only that test is lost.
#include "fixture.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int a, int b) {
  if (a == 0) {
    volatile int* p = nullptr;
    *p = 1;
  }
  return a * b;
}
long sum_to(int n) { return n <= 0 ? 0 : static_cast<long>(n) * (n + 1) / 2; }
}  // namespace fixture
