// Prints 1 GB to stdout in add: OUTPUT_LIMIT, the grader stays within its memory.
#include <cstdio>
#include <cstring>

#include "fixture.hpp"
namespace fixture {
int add(int a, int b) {
  static char buf[1 << 20];
  std::memset(buf, 'x', sizeof buf);
  for (int i = 0; i < 1024; ++i) std::fwrite(buf, 1, sizeof buf, stdout);
  return a + b;
}
int mul(int a, int b) { return a * b; }
long sum_to(int n) { return n <= 0 ? 0 : static_cast<long>(n) * (n + 1) / 2; }
}  // namespace fixture
