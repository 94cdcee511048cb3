#pragma once
/// The grader's harness listener, compiled into the Catch2 main of every test program.
///
/// Inert unless the environment variable MLS_GRADER_FD="<in>,<out>" names two inherited pipe
/// fds (set only by `mls-grader`). Then, when the run starts, it reads the per-run nonce from
/// <in> (the nonce is never in argv or the environment), closes <in>, and removes the variable.
/// After each test case has ended — after its body returned and Catch2 counted its assertions —
/// it writes "<nonce> PASS <name>" or "<nonce> FAIL <name>" to <out>, and "<nonce> END" when the
/// run ends. A test body that calls exit() or _exit(), crashes, or prints a forged report never
/// reaches these lines, so the grader scores it zero.
/// exit() called during a test case writes "<nonce> EXIT <name>" and ends the process at once.
/// With MLS_GRADER_LIST=1 it instead writes "<nonce> NAME <name>" for each test case matching
/// the command line, then "<nonce> END", and exits without running any.
///
/// Include this header in exactly one translation unit, the one with CATCH_CONFIG_MAIN.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "mls/observe.hpp"

namespace mls_grader_harness {

struct Channel {
  bool active = false;
  int out = -1;
  std::string nonce;
  std::string running;  ///< the test case in progress ("" between test cases)
};

inline Channel& channel() {
  static Channel c;
  return c;
}

/// MLS_OBSERVE_AUDIT=1 (a test author's aid, not the grader's): counts each test case's
/// observations and prints "[observe] <strong> strong, <weak> weak: <name>" to stderr when it
/// ends. Truth values are weak (forgeable as "true"); every graded test needs a strong one.
struct Audit {
  bool on = false;
  int strong = 0, weak = 0;
};
inline Audit& audit() {
  static Audit a;
  return a;
}
inline void audit_sink(const mls::testing::Observation& o) {
  (o.kind == "bool" ? audit().weak : audit().strong) += 1;
}

inline void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

inline void send(const std::string& verb, const std::string& name) {
  Channel& c = channel();
  if (!c.active) return;
  std::string line = c.nonce + " " + verb;
  if (!name.empty()) line += " " + name;
  for (auto& ch : line)
    if (ch == '\n' || ch == '\r') ch = ' ';
  write_all(c.out, line + "\n");
}

inline void open_from_env() {
  Channel& c = channel();
  const char* v = std::getenv("MLS_GRADER_FD");
  if (!v || c.active) return;
  int in = -1, out = -1;
  char* end = nullptr;
  in = static_cast<int>(std::strtol(v, &end, 10));
  if (end && *end == ',') out = static_cast<int>(std::strtol(end + 1, nullptr, 10));
  ::unsetenv("MLS_GRADER_FD");
  if (in < 0 || out < 0) return;
  std::string nonce;
  char buf[128];
  while (nonce.size() < 256) {
    ssize_t n = ::read(in, buf, sizeof buf);
    if (n <= 0) break;
    nonce.append(buf, static_cast<std::size_t>(n));
    if (nonce.find('\n') != std::string::npos) break;
  }
  ::close(in);
  std::size_t nl = nonce.find('\n');
  if (nl != std::string::npos) nonce.resize(nl);
  if (nonce.empty()) return;
  c.nonce = nonce;
  c.out = out;
  c.active = true;
}

/// exit() called while a test case runs: report it and leave at once, before static destructors
/// (Catch2's among them) run in the middle of a test.
inline void on_exit() {
  Channel& c = channel();
  if (c.active && !c.running.empty()) {
    send("EXIT", c.running);
    std::_Exit(0);
  }
}

class Listener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  void testRunStarting(const Catch::TestRunInfo& info) override {
    TestEventListenerBase::testRunStarting(info);
    open_from_env();
    if (const char* a = std::getenv("MLS_OBSERVE_AUDIT"); a && std::string(a) == "1" && !mls::testing::observing()) {
      audit().on = true;
      mls::testing::observation_sink() = audit_sink;
    }
    if (channel().active) std::atexit(on_exit);
    const char* list = std::getenv("MLS_GRADER_LIST");
    if (channel().active && list && std::string(list) == "1") {
      const auto& all = Catch::getAllTestCasesSorted(*m_config);
      for (const auto& tc : Catch::filterTests(all, m_config->testSpec(), *m_config)) send("NAME", tc.name);
      send("END", "");
      std::_Exit(0);
    }
  }

  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    TestEventListenerBase::testCaseStarting(info);
    channel().running = info.name;
  }

  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    TestEventListenerBase::testCaseEnded(stats);
    channel().running.clear();
    if (audit().on) {
      std::fprintf(stderr, "[observe] %d strong, %d weak: %s\n", audit().strong, audit().weak, stats.testInfo.name.c_str());
      audit().strong = audit().weak = 0;
    }
    bool ok = stats.totals.assertions.allOk() && !stats.aborting;
    send(ok ? "PASS" : "FAIL", stats.testInfo.name);
  }

  void testRunEnded(const Catch::TestRunStats& stats) override {
    TestEventListenerBase::testRunEnded(stats);
    send("END", "");
  }
};

}  // namespace mls_grader_harness

using MlsGraderHarnessListener = mls_grader_harness::Listener;
CATCH_REGISTER_LISTENER(MlsGraderHarnessListener)
