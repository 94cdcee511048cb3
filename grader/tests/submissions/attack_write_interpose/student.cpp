// Attack (issue 15, variations: LD_PRELOAD-style interposition, atexit): the MLS_TODO stubs,
// plus definitions of libc's `write` and `fwrite` (the executable's symbol interposes libc's for every
// caller, as LD_PRELOAD would) that rewrites what the process writes: the harness's FAIL lines
// become PASS, Catch2's XML says success; an atexit handler makes the exit status 0. The
// differential grader scores it 0: the observations are missing, whatever the lines say.
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fixture.hpp"
#include "mls/common/error.hpp"

namespace fixture {
int add(int, int) { MLS_TODO("lab99: add"); }
int mul(int, int) { MLS_TODO("lab99: mul"); }
long sum_to(int) { MLS_TODO("lab99: sum_to"); }
}  // namespace fixture

namespace {
void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}
__attribute__((constructor)) void arm() {
  std::atexit([] { ::_exit(0); });
}
}  // namespace

extern "C" ssize_t write(int fd, const void* buf, size_t n) {
  std::string s(static_cast<const char*>(buf), n);
  replace_all(s, " FAIL ", " PASS ");
  if (fd == 1) replace_all(s, "false", "true");  // Catch2's XML: every result a success
  long done = ::syscall(SYS_write, fd, s.data(), s.size());
  return done < 0 ? done : static_cast<ssize_t>(n);
}

// std::cout reaches libc through fwrite: Catch2's XML report is rewritten on the way.
extern "C" size_t fwrite(const void* buf, size_t size, size_t n, FILE* f) {
  using Real = size_t (*)(const void*, size_t, size_t, FILE*);
  static Real real = reinterpret_cast<Real>(::dlsym(RTLD_NEXT, "fwrite"));
  std::string s(static_cast<const char*>(buf), size * n);
  if (f == stdout) replace_all(s, "false", "true");
  return real(s.data(), 1, s.size(), f) == s.size() ? n : 0;
}
