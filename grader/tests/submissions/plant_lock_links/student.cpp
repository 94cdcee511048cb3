// Plants symbolic links at the grader's old predictable lock paths in /tmp, pointing at a file
// a later grading run as root would have created (and locked) wherever the links point. The
// grader keeps no files in /tmp (uid reservations are abstract socket names), and this /tmp is
// the test's own: nothing outside is touched. The functions stay stubs: 0.
#include <unistd.h>

#include <string>

#include "fixture.hpp"
#include "mls/common/error.hpp"

namespace fixture {
int add(int a, int b) {
  for (int k = 0; k < 8; ++k) {
    std::string link = "/tmp/mls-grader-uid-" + std::to_string(62000 + k) + ".lock";
    ::symlink("/tmp/mls-attack-pwned", link.c_str());
  }
  MLS_TODO("lab99: add");
}
int mul(int a, int b) { MLS_TODO("lab99: mul"); }
long sum_to(int n) { MLS_TODO("lab99: sum_to"); }
}  // namespace fixture
