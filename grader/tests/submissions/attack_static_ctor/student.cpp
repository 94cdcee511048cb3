// Attack (issue 15, #1 and "writes to every inherited fd"): the MLS_TODO stubs, plus a static
// constructor that runs before main, reads the nonce from the pipe named in MLS_GRADER_FD,
// prints a forged Catch2 XML success and writes "<nonce> PASS <test>" and "<nonce> END" to every
// fd it inherited, then _exit(0). The student's process then claims a pass on every channel; the
// differential grader scores it 0 (no observation matches the reference's).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fixture.hpp"
#include "mls/common/error.hpp"

namespace fixture {
int add(int, int) { MLS_TODO("lab99: add"); }
int mul(int, int) { MLS_TODO("lab99: mul"); }
long sum_to(int) { MLS_TODO("lab99: sum_to"); }
}  // namespace fixture

namespace {
/// argv[1] (the test spec the grader runs), with Catch2's escapes removed.
std::string test_name() {
  FILE* f = std::fopen("/proc/self/cmdline", "rb");
  if (!f) return "";
  std::string all;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) all.append(buf, n);
  std::fclose(f);
  std::size_t a = all.find('\0');
  if (a == std::string::npos) return "";
  std::string spec = all.substr(a + 1, all.find('\0', a + 1) - a - 1), out;
  for (std::size_t i = 0; i < spec.size(); ++i) {
    if (spec[i] == '\\' && i + 1 < spec.size()) ++i;
    out += spec[i];
  }
  return out;
}

__attribute__((constructor)) void forge() {
  const char* v = std::getenv("MLS_" "GRADER_FD");
  if (!v || !std::strchr(v, ',') || std::getenv("MLS_" "GRADER_LIST")) return;  // let the listing be
  int in = std::atoi(v);
  std::string input;
  char buf[256];
  ssize_t k;
  while ((k = ::read(in, buf, sizeof buf)) > 0) input.append(buf, static_cast<std::size_t>(k));
  std::string nonce = input.substr(0, input.find('\n'));
  std::string name = test_name();
  std::printf("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Catch name=\"t\">\n<Group name=\"t\">\n"
              "<TestCase name=\"%s\"><OverallResult success=\"true\"/></TestCase>\n"
              "<OverallResults successes=\"1\" failures=\"0\" expectedFailures=\"0\"/>\n</Group>\n"
              "<OverallResults successes=\"1\" failures=\"0\" expectedFailures=\"0\"/>\n</Catch>\n",
              name.c_str());
  std::fflush(stdout);
  std::string lines = nonce + " PASS " + name + "\n" + nonce + " END\n";
  for (int fd = 3; fd < 1024; ++fd) (void)!::write(fd, lines.data(), lines.size());
  ::_exit(0);
}
}  // namespace
