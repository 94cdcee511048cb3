#pragma once
/// The grader's harness listener, compiled into the Catch2 main of every test program.
///
/// Inert unless the environment variable MLS_GRADER_FD="<in>,<out>" names two inherited pipe
/// fds (set only by `mls-grader`). The protocol on them is defined once, in
/// common/include/mls/common/grader_protocol.hpp. When the run starts the listener reads the
/// per-run nonce and the secret salt from <in> (never in argv or the environment), sets the salt
/// of every mls::Rng (`mls::set_rng_salt`), closes <in> and removes the variable. While a test
/// case runs it writes each observation (`mls::testing::observe`, and one per Catch2 assertion:
/// see `record_assertion`) as an OBS line; after each test case "PASS"/"FAIL <name>", at the end
/// "END". exit() during a test case writes "EXIT <name>" and ends the process at once. With
/// MLS_GRADER_LIST=1 it writes "NAME <name>" for each test case matching the command line, then
/// "END", and exits without running any.
///
/// None of this decides a grade: the process runs student code and can forge any line. The
/// grader compares the observation stream with the one the reference build produces with the
/// same salt, in its own process (handouts/README.md, "How a verdict is reached").
///
/// Ranks of a test that re-runs itself under mpirun (lab 5's tests/mpi_launch.hpp): the launcher
/// sets MLS_OBSERVE_RANKS=<folder> (and MLS_OBSERVE_SALT, the salt in hex); each rank writes its
/// observations, one encoded record per line, to <folder>/rank<R>.obs, and the launcher observes
/// them in the test's own stream, rank by rank (see `rank_sink`).
///
/// Include this header in exactly one translation unit, the one with CATCH_CONFIG_MAIN.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "mls/common/grader_protocol.hpp"
#include "mls/common/rng.hpp"
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

inline void send(std::string_view verb, const std::string& payload) {
  Channel& c = channel();
  if (!c.active) return;
  write_all(c.out, mls::grader_protocol::line(c.nonce, verb, payload));
}

/// Graded mode: an observation made while a test case runs goes to the channel.
inline void channel_sink(const mls::testing::Observation& o) {
  if (channel().running.empty()) return;
  const mls::grader_protocol::ObservationRecord r{o.label, o.kind, o.text, o.shape, o.strides, o.offset, o.values,
                                                  o.tol.rtol, o.tol.atol, static_cast<std::int64_t>(o.values.size())};
  send(mls::grader_protocol::kObs, mls::grader_protocol::encode_observation(r));
}

/// Every Catch2 assertion is an observation too (graded and audit modes), labelled with its
/// macro and source text. Of a binary comparison only the left side is recorded, the value the
/// code produced: Catch2 prints it as `lhs op rhs` (or with line breaks around `op`). `==` and `!=`
/// record the left side as text, or as a number within {1e-4, 1e-6} when the right side is an
/// `Approx`; an ordering (`<`, `>=`, ...), a comparison with `std::string::npos` (a `find`), a
/// comparison of pointers (an address differs from run to run), a unary check or a matcher
/// records only its truth (weak). The right side (the test's expected value) is never recorded.
inline void record_assertion(const Catch::AssertionResult& a) {
  if (!mls::testing::observing() || !a.hasExpression()) return;
  const std::string label = std::string(a.getTestMacroName()) + "( " + a.getExpression() + " )";
  const std::string expanded = a.hasExpandedExpression() ? a.getExpandedExpression() : "";
  const bool ok = a.isOk();
  std::string lhs, rhs, op;
  int hits = 0;
  for (const char* o : {"==", "!=", "<=", ">=", "<", ">"}) {
    for (const std::string& sep : {std::string(" ") + o + " ", std::string("\n") + o + "\n"}) {
      for (std::size_t at = expanded.find(sep); at != std::string::npos; at = expanded.find(sep, at + 1)) {
        // " < " is no part of " <= " (the spaces differ): each hit is one operator.
        ++hits;
        lhs = expanded.substr(0, at);
        rhs = expanded.substr(at + sep.size());
        op = o;
      }
    }
  }
  // `s.find(x) != std::string::npos` is an existence check: the position it prints depends on the
  // message's wording (and, across threads, on which message came first), so only its truth counts.
  // (Catch2 prints it as "18446744073709551615 (0xffffffffffffffff)".)
  const std::string npos = std::to_string(std::string::npos);
  const bool against_npos = lhs.rfind(npos, 0) == 0 || rhs.rfind(npos, 0) == 0;
  // Pointers (`t.data() == p`, `a.storage() == b.storage()`) print as their address, "0x7ffd...":
  // another number in every run (ASLR, another allocation order), so only their truth counts.
  const bool address = lhs.size() > 2 && lhs.rfind("0x", 0) == 0 &&
                       lhs.find_first_not_of("0123456789abcdefABCDEF", 2) == std::string::npos;
  const bool equality = hits == 1 && (op == "==" || op == "!=") && !against_npos && !address;
  if (!equality) {
    mls::testing::observe(label, ok);
    return;
  }
  if (rhs.rfind("Approx(", 0) == 0) {
    char* end = nullptr;
    double v = std::strtod(lhs.c_str(), &end);
    if (end && *end == '\0' && !lhs.empty()) {
      mls::testing::observe(label, v, mls::testing::Tolerance{1e-4, 1e-6});
      return;
    }
  }
  mls::testing::observe(label, std::string_view(lhs));
}

/// A rank of a relaunched MPI test: its observations go to a file the launcher reads.
inline int& rank_file() {
  static int fd = -1;
  return fd;
}
inline void rank_sink(const mls::testing::Observation& o) {
  if (channel().running.empty() || rank_file() < 0) return;
  const mls::grader_protocol::ObservationRecord r{o.label, o.kind, o.text, o.shape, o.strides, o.offset, o.values,
                                                  o.tol.rtol, o.tol.atol, static_cast<std::int64_t>(o.values.size())};
  write_all(rank_file(), mls::grader_protocol::encode_observation(r) + "\n");
}
inline void open_rank_file_from_env() {
  const char* dir = std::getenv("MLS_OBSERVE_RANKS");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = std::getenv("PMI_RANK");
  if (!dir || !*dir || !rank || channel().active) return;
  const std::string path = std::string(dir) + "/rank" + std::to_string(std::atoi(rank)) + ".obs";
  rank_file() = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (rank_file() < 0) return;
  if (const char* salt = std::getenv("MLS_OBSERVE_SALT")) mls::set_rng_salt(std::strtoull(salt, nullptr, 16));
  mls::testing::observation_sink() = rank_sink;
}

inline void open_from_env() {
  Channel& c = channel();
  const char* v = std::getenv(mls::grader_protocol::kFdEnv);
  if (!v || c.active) return;
  int in = -1, out = -1;
  char* end = nullptr;
  in = static_cast<int>(std::strtol(v, &end, 10));
  if (end && *end == ',') out = static_cast<int>(std::strtol(end + 1, nullptr, 10));
  ::unsetenv(mls::grader_protocol::kFdEnv);
  if (in < 0 || out < 0) return;
  // The grader writes the nonce and the salt, then closes its end: read to the end.
  std::string input;
  char buf[256];
  while (input.size() < 4096) {
    ssize_t n = ::read(in, buf, sizeof buf);
    if (n <= 0) break;
    input.append(buf, static_cast<std::size_t>(n));
  }
  ::close(in);
  std::string nonce;
  std::uint64_t salt = 0;
  mls::grader_protocol::parse_channel_input(input, nonce, salt);
  if (nonce.empty()) return;
  mls::set_rng_salt(salt);
  c.nonce = nonce;
  c.out = out;
  c.active = true;
}

/// exit() called while a test case runs: report it and leave at once, before static destructors
/// (Catch2's among them) run in the middle of a test.
inline void on_exit() {
  Channel& c = channel();
  if (c.active && !c.running.empty()) {
    send(mls::grader_protocol::kExit, c.running);
    std::_Exit(0);
  }
}

class Listener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  void testRunStarting(const Catch::TestRunInfo& info) override {
    TestEventListenerBase::testRunStarting(info);
    open_from_env();
    if (!channel().active) open_rank_file_from_env();  // a rank of a relaunched MPI test
    if (const char* a = std::getenv("MLS_OBSERVE_AUDIT"); a && std::string(a) == "1" && !mls::testing::observing()) {
      audit().on = true;
      mls::testing::observation_sink() = audit_sink;
    }
    if (channel().active) {
      std::atexit(on_exit);
      mls::testing::observation_sink() = channel_sink;
    }
    const char* list = std::getenv(mls::grader_protocol::kListEnv);
    if (channel().active && list && std::string(list) == "1") {
      const auto& all = Catch::getAllTestCasesSorted(*m_config);
      for (const auto& tc : Catch::filterTests(all, m_config->testSpec(), *m_config))
        send(mls::grader_protocol::kName, tc.name);
      send(mls::grader_protocol::kEnd, "");
      std::_Exit(0);
    }
  }

  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    TestEventListenerBase::testCaseStarting(info);
    channel().running = info.name;
    mls::testing::oracle_depth() = 0;  // a failed REQUIRE inside MLS_ORACLE skips its closing
  }

  void sectionStarting(const Catch::SectionInfo& info) override {
    TestEventListenerBase::sectionStarting(info);
    mls::testing::oracle_depth() = 0;
  }

  bool assertionEnded(const Catch::AssertionStats& stats) override {
    if (!channel().running.empty()) record_assertion(stats.assertionResult);
    return TestEventListenerBase::assertionEnded(stats);
  }

  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    TestEventListenerBase::testCaseEnded(stats);
    mls::testing::flush_rank_observations();  // the simulated ranks' last ones, in rank order
    channel().running.clear();
    if (audit().on) {
      std::fprintf(stderr, "[observe] %d strong, %d weak: %s\n", audit().strong, audit().weak, stats.testInfo.name.c_str());
      audit().strong = audit().weak = 0;
    }
    bool ok = stats.totals.assertions.allOk() && !stats.aborting;
    send(ok ? mls::grader_protocol::kPass : mls::grader_protocol::kFail, stats.testInfo.name);
  }

  void testRunEnded(const Catch::TestRunStats& stats) override {
    TestEventListenerBase::testRunEnded(stats);
    send(mls::grader_protocol::kEnd, "");
  }
};

}  // namespace mls_grader_harness

using MlsGraderHarnessListener = mls_grader_harness::Listener;
CATCH_REGISTER_LISTENER(MlsGraderHarnessListener)
