// A bounded fork bomb in add: at most 200 children that sleep, and a parent that spins. The
// grader must time the tests out and kill every process (none may survive the run).
#include <unistd.h>

#include "fixture.hpp"
namespace fixture {
int add(int a, int b) {
  for (int i = 0; i < 200; ++i) {
    pid_t p = fork();
    if (p == 0) {
      setsid();  // try to leave the process group, too
      sleep(60);
      _exit(0);
    }
    if (p < 0) break;
  }
  volatile long spin = 0;
  while (true) spin = spin + 1;
  return a + b;
}
int mul(int a, int b) { return a * b; }
long sum_to(int n) { return n <= 0 ? 0 : static_cast<long>(n) * (n + 1) / 2; }
}  // namespace fixture
