// The honest baseline of the hostile suite (issue 25): add is right, mul and sum_to are the
// stubs. Each hostile submission is this (or the stubs) plus one attack, and must score no more.
#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int, int) { MLS_TODO("lab97: mul"); }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture
