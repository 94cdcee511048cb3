// Loops forever in sum_to: the sum tests time out, the group is killed, the rest pass.
#include "fixture.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int a, int b) { return a * b; }
long sum_to(int n) {
  volatile long spin = 0;
  while (true) spin = spin + 1;
  return n;
}
}  // namespace fixture
