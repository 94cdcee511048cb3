// Attack (issue 25, cause 1: a student object replaces a symbol of the link): the baseline, plus
// libc's `write` defined under its linker name by an `__asm__` label (no `extern "C"`, no name
// token `write` for a source scan to find): every FAIL the harness writes becomes PASS. The link
// audit rejects it: a student object may not define a C symbol.
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int, int) { MLS_TODO("lab97: mul"); }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture

long forged_w(int fd, const void* buf, unsigned long n) __asm__("w" "rite");
long forged_w(int fd, const void* buf, unsigned long n) {
  std::string s(static_cast<const char*>(buf), n);
  for (std::size_t at = s.find(" FAIL "); at != std::string::npos; at = s.find(" FAIL ", at)) s.replace(at, 6, " PASS ");
  long done = ::syscall(SYS_write, fd, s.data(), s.size());
  return done < 0 ? done : static_cast<long>(n);
}
