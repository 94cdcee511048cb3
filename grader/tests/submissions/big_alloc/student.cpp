// Allocates 64 GiB in mul (and touches it): the address-space limit stops it; MEMORY.
#include <cstring>

#include "fixture.hpp"
namespace fixture {
char* volatile g_keep = nullptr;  // the allocation escapes: the compiler cannot elide it
int add(int a, int b) { return a + b; }
int mul(int a, int b) {
  std::size_t n = std::size_t(64) << 30;
  char* p = new char[n];
  g_keep = p;
  std::memset(p, 1, n);
  int r = p[n - 1] * a * b;
  delete[] p;
  return r;
}
long sum_to(int n) { return n <= 0 ? 0 : static_cast<long>(n) * (n + 1) / 2; }
}  // namespace fixture
