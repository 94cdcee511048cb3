// Attack (issue 15, #2 and "static destructors"): the MLS_TODO stubs, plus a strong definition
// of the harness listener's `send`, a function its header defines inline (the linker keeps this
// one: an inline function is a weak symbol). A static constructor copies the nonce from the
// channel and puts it back in a fresh pipe at the same fd, so the real listener runs as usual;
// the overriding `send` turns every FAIL into PASS, and a static destructor prints a forged
// Catch2 XML success and _exit(0)s. The differential grader scores it 0.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "fixture.hpp"
#include "mls/common/error.hpp"

namespace fixture {
int add(int, int) { MLS_TODO("lab99: add"); }
int mul(int, int) { MLS_TODO("lab99: mul"); }
long sum_to(int) { MLS_TODO("lab99: sum_to"); }
}  // namespace fixture

namespace {
std::string g_nonce, g_name;
int g_out = -1;

void steal() {
  const char* v = std::getenv("MLS_" "GRADER_FD");
  if (!v || !std::strchr(v, ',')) return;
  int in = std::atoi(v);
  g_out = std::atoi(std::strchr(v, ',') + 1);
  std::string input;
  char buf[256];
  ssize_t k;
  while ((k = ::read(in, buf, sizeof buf)) > 0) input.append(buf, static_cast<std::size_t>(k));
  g_nonce = input.substr(0, input.find('\n'));
  int p[2];
  if (::pipe(p) != 0) return;
  (void)!::write(p[1], input.data(), input.size());
  ::close(p[1]);
  ::dup2(p[0], in);
  ::close(p[0]);
}

// A static object's constructor (after the globals above are initialized) runs before main.
struct Stealer {
  Stealer() { steal(); }
} stealer;

struct ForgeAtExit {
  ~ForgeAtExit() {
    if (g_nonce.empty()) return;
    std::printf("<?xml version=\"1.0\"?>\n<Catch name=\"t\"><Group name=\"t\">\n<TestCase name=\"%s\">"
                "<OverallResult success=\"true\"/></TestCase>\n</Group></Catch>\n",
                g_name.c_str());
    std::fflush(stdout);
    ::_exit(0);
  }
} forge_at_exit;
}  // namespace

// The harness's inline `send(std::string_view verb, const std::string& payload)`, by its
// linker name (a string: nothing here names the harness).
void forged_send(std::string_view verb, const std::string& payload) __asm__(
    "_ZN18mls_grader_harness4sendESt17basic_string_viewIcSt11char_traitsIcEERKNSt7__cxx1112basic_stringIcS2_SaIcEEE");
void forged_send(std::string_view verb, const std::string& payload) {
  if (g_out < 0) return;
  std::string v(verb == "FAIL" ? std::string_view("PASS") : verb);
  if (v == "PASS") g_name = payload;
  if (v == "OBS") return;
  std::string line = g_nonce + " " + v + (payload.empty() ? "" : " " + payload) + "\n";
  (void)!::write(g_out, line.data(), line.size());
}
