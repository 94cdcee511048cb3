// The feedback a student reads for a test that did not pass (feedback.hpp), and the Catch2
// XML parse that feeds it (INFO messages kept with their failed check).
#include <catch2/catch.hpp>

#include "mls/grader/feedback.hpp"
#include "mls/grader/manifest.hpp"
#include "mls/grader/result.hpp"
#include "mls/grader/util.hpp"
#include "helpers.hpp"

using namespace mls::grader;

namespace {
std::vector<std::string> lines_of(const std::string& s) { return split(s, '\n'); }
}  // namespace

TEST_CASE("feedback: what differed first, repeats said once, a few lines, then the local command", "[grader][feedback]") {
  std::string msg = "differs from the reference build: observation 2 of 2, 'add(a, b)' (i64 117): value [0]: "
                    "expected 117, got 0 (exact); 3 more observation(s) differ\n";
  for (int i = 0; i < 116; ++i) msg += "ok_  with expansion: false\n";
  std::string f = format_feedback(msg, "build/release/lab1_tensor/mls_lab1_tests \"sum\"");
  auto l = lines_of(f);
  REQUIRE(l.size() == 3);
  CHECK_THAT(l[0], Catch::StartsWith("differs from the reference build: ") && Catch::Contains("expected 117, got 0"));
  CHECK(l[1] == "ok_  with expansion: false  (x116)");
  CHECK(l[2] == "run it locally: build/release/lab1_tensor/mls_lab1_tests \"sum\"");
}

TEST_CASE("feedback: at most five lines of the message, the rest counted", "[grader][feedback]") {
  std::string msg;
  for (int i = 0; i < 40; ++i) msg += "case " + std::to_string(i) + ": got " + std::to_string(i) + ", want 1\n";
  std::string f = format_feedback(msg, "cmd");
  auto l = lines_of(f);
  REQUIRE(l.size() == 7);
  CHECK(l[0] == "case 0: got 0, want 1");
  CHECK(l[4] == "case 4: got 4, want 1");
  CHECK(l[5] == "(35 more line(s) left out: run it locally)");
  CHECK(l[6] == "run it locally: cmd");
  // No command: the lines alone.
  CHECK(format_feedback("one\n\n  \none\n", "") == "one  (x2)");
}

TEST_CASE("feedback: each line and the whole are capped, the first lines kept", "[grader][feedback]") {
  std::string msg = std::string(5000, 'x') + "\nsecond\n";
  std::string f = format_feedback(msg, "cmd");
  auto l = lines_of(f);
  REQUIRE(l.size() == 3);
  CHECK(l[0] == std::string(300, 'x') + " ...");
  CHECK(l[1] == "second");
  FeedbackLimits small;
  small.bytes = 200;
  small.line_bytes = 150;
  std::string g = format_feedback("a\n" + std::string(140, 'b') + "\n" + std::string(140, 'c') + "\n", "cmd", small);
  CHECK(g.size() <= 200);
  CHECK_THAT(g, Catch::StartsWith("a\n") && Catch::EndsWith("run it locally: cmd"));
}

TEST_CASE("feedback: only failures get it, and the command names the ordinary program and the escaped test", "[grader][feedback]") {
  Manifest m;
  m.dir = "lab1_tensor";
  CHECK(rerun_command(m, "g", "mls_lab1_tests", "sum, with [brackets]") ==
        "build/release/lab1_tensor/mls_lab1_tests \"sum\\, with \\[brackets\\]\"");
  CHECK(rerun_command(m, "g", "mls_lab1_tests", "t", "asan") == "build/asan/lab1_tensor/mls_lab1_tests \"t\"");
  TestResult fail;
  fail.outcome = Outcome::Fail;
  fail.message = "x\nx";
  add_feedback(fail, "cmd");
  CHECK(fail.message == "x  (x2)\nrun it locally: cmd");
  for (Outcome o : {Outcome::Pass, Outcome::NoResult, Outcome::NotImplemented, Outcome::Skipped}) {
    TestResult t;
    t.outcome = o;
    t.message = "x\nx";
    add_feedback(t, "cmd");
    CHECK(t.message == "x\nx");
  }
}

TEST_CASE("feedback: an MPI test's local command is the one the lab documents (run_mpi.sh), not the bare program",
          "[grader][feedback]") {
  // Lab 5 as it is: its MPI groups name tests/run_mpi.sh 2 (lab.json run_with).
  const Manifest m = find_lab(testing::repo_root(), 5);
  CHECK(rerun_command(m, "mpi_train", "mls_lab5_mpi_tests", "mpi: data parallel, 2 ranks") ==
        "lab5_parallel/tests/run_mpi.sh 2 build/release/lab5_parallel/mls_lab5_mpi_tests \"mpi: data parallel\\, 2 ranks\"");
  CHECK(rerun_command(m, "mpi", "mls_lab5_mpi_tests", "t") ==
        "lab5_parallel/tests/run_mpi.sh 2 build/release/lab5_parallel/mls_lab5_mpi_tests \"t\"");
  // The simulated ranks' groups: the program alone; a test in no group too.
  CHECK(rerun_command(m, "tp", "mls_lab5_tests", "t") == "build/release/lab5_parallel/mls_lab5_tests \"t\"");
  CHECK(rerun_command(m, "(no group)", "mls_lab5_tests", "t") == "build/release/lab5_parallel/mls_lab5_tests \"t\"");
  // And it reaches the feedback's last line.
  TestResult t;
  t.outcome = Outcome::Fail;
  t.message = "differs from the reference build: observation 1 of 4, 'rank 1: losses' ...";
  add_feedback(t, rerun_command(m, "mpi_train", "mls_lab5_mpi_tests", "t"));
  CHECK_THAT(t.message, Catch::EndsWith("run it locally: lab5_parallel/tests/run_mpi.sh 2 "
                                        "build/release/lab5_parallel/mls_lab5_mpi_tests \"t\""));
}

TEST_CASE("xml: a failed check's INFO messages come with it, not a bare truth value", "[grader][feedback]") {
  const char* xml =
      "<Catch name=\"t\"><Group name=\"t\"><TestCase name=\"sum\" tags=\"[x]\">\n"
      "<Info>\n  sum N=2 n=1 float32 rank 0: element 0: got 1.293907, want 2.255238\n</Info>\n"
      "<Expression success=\"false\" type=\"CHECK\" filename=\"t.cpp\" line=\"9\">\n"
      "  <Original>\n    ok_\n  </Original>\n  <Expanded>\n    false\n  </Expanded>\n</Expression>\n"
      "<Info>add(a, b) == 7</Info><Info>case 3</Info>\n"
      "<Expression success=\"false\" type=\"CHECK\" filename=\"t.cpp\" line=\"12\">\n"
      "  <Original>mls_got_ == (want)</Original><Expanded>6 == 7</Expanded></Expression>\n"
      "<Expression success=\"false\" type=\"CHECK\" filename=\"t.cpp\" line=\"14\">\n"
      "  <Original>x == 1</Original><Expanded>2 == 1</Expanded></Expression>\n"
      "<Info>while loading</Info><Exception filename=\"t.cpp\" line=\"20\">not implemented: lab1: f</Exception>\n"
      "<OverallResult success=\"false\"/></TestCase></Group></Catch>\n";
  CatchXml x = parse_catch_xml(xml);
  REQUIRE(x.cases.size() == 1);
  const auto& f = x.cases[0].failures;
  REQUIRE(f.size() == 4);
  CHECK(f[0] == "sum N=2 n=1 float32 rank 0: element 0: got 1.293907, want 2.255238");
  CHECK(f[1] == "add(a, b) == 7; case 3: mls_got_ == (want)  with expansion: 6 == 7");
  CHECK(f[2] == "x == 1  with expansion: 2 == 1");  // no INFO: as before
  CHECK(f[3] == "while loading: Exception: not implemented: lab1: f");
}
