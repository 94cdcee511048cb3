// A translation unit whose compilation needs gigabytes: an array initializer of 10^9 elements
// from nested macros. The build is held to the manifest's build_memory_limit_mb per process
// (and to CPU time, processes, output and wall clock): a clean 0 with the first errors.
#include "fixture.hpp"

#define MLS_X1 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
#define MLS_X2 MLS_X1, MLS_X1, MLS_X1, MLS_X1, MLS_X1, MLS_X1, MLS_X1, MLS_X1, MLS_X1, MLS_X1
#define MLS_X3 MLS_X2, MLS_X2, MLS_X2, MLS_X2, MLS_X2, MLS_X2, MLS_X2, MLS_X2, MLS_X2, MLS_X2
#define MLS_X4 MLS_X3, MLS_X3, MLS_X3, MLS_X3, MLS_X3, MLS_X3, MLS_X3, MLS_X3, MLS_X3, MLS_X3
#define MLS_X5 MLS_X4, MLS_X4, MLS_X4, MLS_X4, MLS_X4, MLS_X4, MLS_X4, MLS_X4, MLS_X4, MLS_X4
#define MLS_X6 MLS_X5, MLS_X5, MLS_X5, MLS_X5, MLS_X5, MLS_X5, MLS_X5, MLS_X5, MLS_X5, MLS_X5
#define MLS_X7 MLS_X6, MLS_X6, MLS_X6, MLS_X6, MLS_X6, MLS_X6, MLS_X6, MLS_X6, MLS_X6, MLS_X6
#define MLS_X8 MLS_X7, MLS_X7, MLS_X7, MLS_X7, MLS_X7, MLS_X7, MLS_X7, MLS_X7, MLS_X7, MLS_X7
#define MLS_X9 MLS_X8, MLS_X8, MLS_X8, MLS_X8, MLS_X8, MLS_X8, MLS_X8, MLS_X8, MLS_X8, MLS_X8

namespace fixture {
static const int kHuge[] = {MLS_X9};
int add(int a, int b) { return a + b + kHuge[0] - 1; }
int mul(int a, int b) { return a * b; }
long sum_to(int n) { return n <= 0 ? 0 : static_cast<long>(n) * (n + 1) / 2; }
}  // namespace fixture
