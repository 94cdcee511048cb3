// Attack (issue 25, cause 1): the baseline, plus a strong definition of observe.hpp's inline
// `mls::testing::observing()` under its linker name (an `__asm__` label): returning false makes
// every test record nothing, so a stream-length check alone would see an empty stream; and a
// strong `mls::testing::observe(std::string_view, long)` that records a fixed value. The link
// audit rejects both: they are symbols of the tests' observation layer.
#include <string_view>

#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int, int) { MLS_TODO("lab97: mul"); }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture

bool never_observing() __asm__("_ZN3mls7testing9observingEv");
bool never_observing() { return false; }
