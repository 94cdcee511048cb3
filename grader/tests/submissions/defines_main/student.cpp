// Correct functions, but defines main: rejected at intake with a clear message, score 0.
#include "fixture.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int a, int b) { return a * b; }
long sum_to(int n) { return n <= 0 ? 0 : static_cast<long>(n) * (n + 1) / 2; }
}  // namespace fixture
int main() { return 0; }
