// The control of hostile_stack_want (issue 25, cause 2): add is right, mul answers 0, sum_to is
// the stub.
#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int, int) { return 0; }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture
