// Only add is right: mul is wrong (FAIL with the assertion text), sum_to is left as the stub.
#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int a, int b) { return a + b; }
long sum_to(int n) { MLS_TODO("lab99: sum_to"); }
}  // namespace fixture
