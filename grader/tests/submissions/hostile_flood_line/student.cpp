// Attack (issue 25, cause 5: the grader decoded an unbounded, student-written channel in its own
// process): mul and sum_to are the stubs; add writes 1 GiB without a line break to the result
// channel's fd (4) before answering. The grader stops reading at the channel's limit, kills the
// run (OUTPUT_LIMIT within seconds) and never holds more than a bounded part of it.
#include <unistd.h>

#include <vector>

#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int a, int b) {
  std::vector<char> junk(1 << 20, 'x');
  for (int i = 0; i < 1024; ++i)
    if (::write(4, junk.data(), junk.size()) < 0) break;
  return a + b;
}
int mul(int, int) { MLS_TODO("lab97: mul"); }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture
