// Attack (issue 25, causes 1 and 2: reaching the harness's state): the baseline, plus a use of
// the harness listener's `channel()` (its nonce and result fd) by its linker name, to write a
// PASS line for the stubbed tests. The link audit rejects it: a student object may reference
// nothing of the harness.
#include "fixture.hpp"
#include "mls/common/error.hpp"

void* harness_channel() __asm__("_ZN18mls_grader_harness7channelEv");

namespace fixture {
int add(int a, int b) {
  volatile void* c = harness_channel();
  (void)c;
  return a + b;
}
int mul(int, int) { MLS_TODO("lab97: mul"); }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture
