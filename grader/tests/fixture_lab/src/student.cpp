#include "fixture.hpp"

#include "mls/common/error.hpp"

namespace fixture {

/// Returns a + b.
int add(int a, int b) {
  // BEGIN SOLUTION
  return a + b;
  // END SOLUTION
}

/// Returns a * b.
int mul(int a, int b) {
  // BEGIN SOLUTION
  return a * b;
  // END SOLUTION
}

/// Returns 1 + 2 + ... + n. Hint: a loop, or Gauss.
long sum_to(int n) {
  // BEGIN SOLUTION
  long s = 0;
  for (int i = 1; i <= n; ++i) s += i;
  return s;
  // END SOLUTION
}

}  // namespace fixture
