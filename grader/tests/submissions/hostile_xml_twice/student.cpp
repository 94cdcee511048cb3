// Attack (issue 25, cause 3: the result XML was trusted by test name, last one wins): the
// stubs, plus a static destructor that prints a second Catch2 <TestCase> of the test that ran,
// claiming success, after the real report. The XML must report exactly one test case: it says
// nothing here, and the stubs score 0.
#include <cstdio>
#include <cstring>
#include <string>

#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int, int) { MLS_TODO("lab97: add"); }
int mul(int, int) { MLS_TODO("lab97: mul"); }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture

namespace {
std::string ran() {
  FILE* f = std::fopen("/proc/self/cmdline", "rb");
  if (!f) return "";
  char buf[4096];
  std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  std::size_t a = std::strlen(buf) + 1;
  return a < n ? std::string(buf + a) : "";
}
struct Forge {
  ~Forge() {
    std::printf("<Catch><Group><TestCase name=\"%s\"><OverallResult success=\"true\"/></TestCase></Group></Catch>\n",
                ran().c_str());
  }
} forge;
}  // namespace
