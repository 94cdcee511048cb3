// Does not compile: a zero score with the first compiler errors.
#include "fixture.hpp"
namespace fixture {
int add(int a, int b) { return a + b }
int mul(int a, int b) { return a * b; }
long sum_to(int n) { return undeclared_name; }
}  // namespace fixture
