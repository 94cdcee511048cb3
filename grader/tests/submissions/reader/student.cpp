// A test-time reader: tries to read the reference solution and the hidden test source (in the
// instructor's checkout at @REPO@, and in any grading copy it can find under /tmp), prints what
// it finds (so it would land in results.json) and answers correctly only if it read the
// reference. Isolated, it finds nothing: every test fails, 0.
#include <glob.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "fixture.hpp"
#include "mls/common/error.hpp"

namespace {
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}
std::string loot() {
  std::string all;
  const char* patterns[] = {"@REPO@/grader/tests/fixture_lab/src/student.cpp",
                            "@REPO@/grader/tests/fixture_lab/tests/test_hidden.cpp",
                            "/tmp/*/src/grader/tests/fixture_lab/tests/test_hidden.cpp",
                            "/tmp/*/*/src/grader/tests/fixture_lab/tests/test_hidden.cpp",
                            "/tmp/*/src/grader/tests/fixture_lab/src/student.cpp",
                            "/tmp/*/*/src/grader/tests/fixture_lab/src/student.cpp"};
  for (const char* p : patterns) {
    glob_t g{};
    if (::glob(p, 0, nullptr, &g) == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) all += slurp(g.gl_pathv[i]);
    ::globfree(&g);
  }
  return all;
}
bool leaked() {
  static const std::string text = loot();
  if (!text.empty()) {
    std::fprintf(stdout, "%s\n", text.c_str());
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  return text.find("s += i;") != std::string::npos;
}
}  // namespace

namespace fixture {
int add(int a, int b) {
  if (leaked()) return a + b;
  throw mls::Error("add: nothing to read" + loot());
}
int mul(int a, int b) { return leaked() ? a * b : -1; }
long sum_to(int n) { return leaked() ? static_cast<long>(n) * (n + 1) / 2 : -1; }
}  // namespace fixture
