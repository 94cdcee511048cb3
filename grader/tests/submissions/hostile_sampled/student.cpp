// Attack (issue 25, cause 4: large results were compared on a predictable sample, every k-th
// value from element 0): add is right only on every 4th call of the process (the positions a
// 200000-value observation's sample of 65536 kept) and returns 0 otherwise; mul and sum_to are
// the stubs. Every value is compared now: the big test fails.
#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int a, int b) {
  static long calls = 0;
  return calls++ % 4 == 0 ? a + b : 0;
}
int mul(int, int) { MLS_TODO("lab97: mul"); }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture
