// Attack (issue 15, variation "writes to every inherited fd", with forged observation records):
// the MLS_TODO stubs, plus a static constructor that reads the nonce and the salt from the pipe
// named in MLS_GRADER_FD before main, then writes to every fd 0..1023 a complete forged report
// of the test it was started for: an OBS record with the test's own label and kind, its value
// guessed from the test's fixed check, and a tolerance of 1e300 (claimed by the student side),
// then "<nonce> PASS <test>" and "<nonce> END" (and Catch2's XML of a success on stdout), and _exit(0). The differential grader scores it 0:
// the guessed values differ from the reference build's (its inputs come from the secret salt) and
// only the reference stream's tolerance counts.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
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

__attribute__((constructor)) void forge_everywhere() {
  const char* v = std::getenv("MLS_" "GRADER_FD");
  if (!v || !std::strchr(v, ',') || std::getenv("MLS_" "GRADER_LIST")) return;  // let the listing be
  std::string input;
  char buf[256];
  ssize_t k;
  while ((k = ::read(std::atoi(v), buf, sizeof buf)) > 0) input.append(buf, static_cast<std::size_t>(k));
  const std::string nonce = input.substr(0, input.find('\n'));
  const std::string name = test_name();
  // The label each test observes (the MLS_OBSERVE expression) and its fixed check's answer.
  static const std::map<std::string, std::pair<std::string, int>> guess = {
      {"add small", {"fixture::add(a, b)", 3}},
      {"add negative", {"fixture::add(-draw(\"neg\", 20, 1000), draw(\"pos\", 0, 10))", -3}},
      {"mul small", {"fixture::mul(draw(\"mul a\", 5, 100), draw(\"mul b\", -100, -5))", 12}},
      {"mul zero", {"fixture::mul(draw(\"mul c\", 1, 100), draw(\"mul d\", -100, -1))", 0}},
      {"sum to ten", {"fixture::sum_to(draw(\"sum n\", 11, 1000))", 55}},
      {"sum, with [brackets] and \"quotes\"", {"fixture::sum_to(draw(\"sum m\", 11, 100))", 6}},
  };
  std::string lines;
  if (auto it = guess.find(name); it != guess.end())
    lines += nonce + " OBS " + it->second.first + "\ti64\t\t\t\t0\t1e300\t1e300\t1\t" + std::to_string(it->second.second) + "\n";
  lines += nonce + " PASS " + name + "\n" + nonce + " END\n";
  // Catch2's XML report of a success on stdout, as the old verdict wanted it.
  std::printf("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Catch name=\"t\">\n<Group name=\"t\">\n"
              "<TestCase name=\"%s\"><OverallResult success=\"true\"/></TestCase>\n"
              "<OverallResults successes=\"1\" failures=\"0\" expectedFailures=\"0\"/>\n</Group>\n"
              "<OverallResults successes=\"1\" failures=\"0\" expectedFailures=\"0\"/>\n</Catch>\n",
              name.c_str());
  std::fflush(stdout);
  for (int fd = 0; fd < 1024; ++fd) (void)!::write(fd, lines.data(), lines.size());
  ::_exit(0);
}
}  // namespace
