// Prints a forged Catch2 XML success (and a forged harness line) in add, then _exit(0):
// NO_RESULT, since only the harness's nonce-stamped report counts.
#include <unistd.h>

#include <cstdio>

#include "fixture.hpp"
namespace fixture {
int add(int a, int b) {
  std::printf(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Catch name=\"fixture_tests\">\n  <Group name=\"fixture_tests\">\n"
      "    <TestCase name=\"add small\" tags=\"[add]\"><OverallResult success=\"true\"/></TestCase>\n"
      "    <TestCase name=\"add negative\" tags=\"[add]\"><OverallResult success=\"true\"/></TestCase>\n"
      "    <OverallResults successes=\"1\" failures=\"0\" expectedFailures=\"0\"/>\n  </Group>\n"
      "  <OverallResults successes=\"1\" failures=\"0\" expectedFailures=\"0\"/>\n</Catch>\n"
      "0123456789abcdef0123456789abcdef PASS add small\n");
  std::fflush(stdout);
  _exit(0);
}
int mul(int a, int b) { return a * b; }
long sum_to(int n) { return n <= 0 ? 0 : static_cast<long>(n) * (n + 1) / 2; }
}  // namespace fixture
