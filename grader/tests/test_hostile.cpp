// The hostile suite of issue 25: submissions written against differential grading, one root
// cause each (at least two per cause), graded end to end on the fixture lab's hostile manifest
// (lab_hostile.json). Each attack is an honest submission (the baseline: add right, mul and
// sum_to the stubs; or the stubs) plus its attack, and must score no more than that submission
// without it, graded in the same test as a control. The old, forgeable verdict (the student
// process's own report) is graded too, for the table in handouts/README.md.
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>

#include "helpers.hpp"
#include "mls/grader/report.hpp"

using namespace mls::grader;

namespace {

Manifest hostile_manifest() { return load_manifest(testing::repo_root() / "grader/tests/fixture_lab/lab_hostile.json"); }

struct Graded {
  LabResult r;
  double seconds = 0;
  std::string all;  ///< everything the student sees
};

Graded grade(const std::string& name, bool differential = true, const Manifest& m = hostile_manifest()) {
  GradeOptions go = testing::fixture_grade_options();
  go.differential = differential;
  auto t0 = std::chrono::steady_clock::now();
  Graded g;
  g.r = grade_submission(m, testing::submission(name), go);
  g.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  g.all = format_table(g.r, m, false) + format_failures(g.r) + g.r.output;
  return g;
}

/// Grades the attack and its honest control; the attack scores no more than the control.
Graded attack_vs(const std::string& attack, const std::string& control) {
  testing::ScopedTmpdir tmp;
  Graded before = grade(attack, false), after = grade(attack), base = grade(control);
  INFO(after.all);
  std::printf("[hostile table] %-26s before %5.2f  after %5.2f  (control %s: %5.2f of %5.2f)\n", attack.c_str(),
              before.r.score(), after.r.score(), control.c_str(), base.r.score(), base.r.max_score());
  CHECK(after.r.score() <= base.r.score());
  CHECK(testing::processes_mentioning(tmp.dir.string()) == 0);
  return after;
}

/// The grader's own peak resident memory so far, in MiB.
double peak_mib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

}  // namespace

TEST_CASE("adversarial: hostile: the baseline and the reference score what they should", "[grader][adversarial][hostile]") {
  testing::ScopedTmpdir tmp;
  Graded base = grade("hostile_baseline");
  INFO(base.all);
  CHECK(base.r.score() == 5);  // add (4) and the big test (1); the truth-only test gives no points
  CHECK(base.r.max_score() == 14);
  bool said = false;
  for (const auto& t : base.r.tests)
    if (t.group == "weak") {
      CHECK(t.outcome == Outcome::NoResult);
      said = t.message.find("only truth values") != std::string::npos;
    }
  CHECK(said);
  Graded ref = grade("correct");
  CHECK(ref.r.score() == 13);  // all but the truth-only test
}

TEST_CASE("adversarial: hostile, cause 1: an __asm__-labelled libc write() is refused by the link audit", "[grader][adversarial][hostile]") {
  Graded g = attack_vs("hostile_asm_write", "hostile_baseline");
  CHECK_FALSE(g.r.built);
  CHECK_THAT(g.all, Catch::Contains("error: link audit:") && Catch::Contains("student.cpp: `write`") &&
                        Catch::Contains("defines the C symbol"));
}

TEST_CASE("adversarial: hostile, cause 1: a strong observe.hpp function under its linker name is refused", "[grader][adversarial][hostile]") {
  Graded g = attack_vs("hostile_asm_observe", "hostile_baseline");
  CHECK_FALSE(g.r.built);
  CHECK_THAT(g.all, Catch::Contains("mls::testing::observing()") && Catch::Contains("a symbol of the tests"));
}

TEST_CASE("adversarial: hostile, cause 2: replacing Catch2's printing of the checked value is refused", "[grader][adversarial][hostile]") {
  Graded g = attack_vs("hostile_stringmaker", "hostile_baseline");
  CHECK_FALSE(g.r.built);
  CHECK_THAT(g.all, Catch::Contains("Catch::StringMaker<int, void>::convert(int)"));
}

TEST_CASE("adversarial: hostile, cause 2: reaching the harness's channel (nonce, fd) is refused", "[grader][adversarial][hostile]") {
  Graded g = attack_vs("hostile_harness_channel", "hostile_baseline");
  CHECK_FALSE(g.r.built);
  CHECK_THAT(g.all, Catch::Contains("mls_grader_harness::channel()") && Catch::Contains("uses a symbol of the tests"));
}

TEST_CASE("adversarial: hostile, cause 2: the expected value found on the stack: the oracle-free tests hold none",
          "[grader][adversarial][hostile]") {
  Graded after = attack_vs("hostile_stack_want", "hostile_stack_control");
  for (const auto& t : after.r.tests)
    if (t.group == "oracle") CHECK(t.outcome == Outcome::Fail);
  // The attack is real: linked with the tests as students build them (oracles in the process),
  // the same submission takes the oracle test's points.
  testing::ScopedTmpdir tmp;
  Manifest with_oracles = hostile_manifest();
  with_oracles.oracle_free = false;
  Graded leaky = grade("hostile_stack_want", true, with_oracles), control = grade("hostile_stack_control", true, with_oracles);
  INFO(leaky.all);
  std::printf("[hostile table] %-26s tests with oracles %5.2f, oracle-free %5.2f (control %5.2f)\n", "hostile_stack_want",
              leaky.r.score(), after.r.score(), control.r.score());
  CHECK(leaky.r.score() == control.r.score() + 2);
}

TEST_CASE("adversarial: hostile, cause 3: a truth-only test gives no points to a submission that makes it true", "[grader][adversarial][hostile]") {
  Graded g = attack_vs("hostile_truth", "hostile_baseline");
  CHECK(g.r.score() == 0);
}

TEST_CASE("adversarial: hostile, cause 3: a second, forged XML report of the test says nothing", "[grader][adversarial][hostile]") {
  Graded g = attack_vs("hostile_xml_twice", "hostile_baseline");
  CHECK(g.r.count(Outcome::Pass) == 0);
}

TEST_CASE("adversarial: hostile, cause 4: right on every 4th value only (the old sample) fails the big test", "[grader][adversarial][hostile]") {
  Graded g = attack_vs("hostile_sampled", "hostile_baseline");
  for (const auto& t : g.r.tests)
    if (t.group == "big") {
      CHECK(t.outcome == Outcome::Fail);
      CHECK_THAT(t.message, Catch::Contains("value [1]: expected") && Catch::Contains("compared of 200000 values"));
    }
}

TEST_CASE("adversarial: hostile, cause 4: wrong only in the last values (outside the old sample) fails the big test",
          "[grader][adversarial][hostile]") {
  Graded g = attack_vs("hostile_sampled_tail", "hostile_baseline");
  for (const auto& t : g.r.tests)
    if (t.group == "big") {
      CHECK(t.outcome == Outcome::Fail);
      CHECK_THAT(t.message, Catch::Contains("value [199997]: expected"));
    }
  CHECK(g.r.score() == 4);
}

TEST_CASE("adversarial: hostile, cause 5: 1 GiB without a line break on the channel is an OUTPUT_LIMIT in seconds, in bounded memory",
          "[grader][adversarial][hostile]") {
  Graded g = attack_vs("hostile_flood_line", "hostile_baseline");
  CHECK(g.seconds < 60);
  CHECK(g.r.count(Outcome::OutputLimit) == 4);  // every test that calls add
  CHECK_THAT(g.all, Catch::Contains("result channel's limit"));
  CHECK(peak_mib() < 300);
}

TEST_CASE("adversarial: hostile, cause 5: 1 GiB observation records with the run's nonce are decoded streaming, in bounded memory",
          "[grader][adversarial][hostile]") {
  Graded g = attack_vs("hostile_flood_records", "hostile_baseline");
  CHECK(g.seconds < 60);
  CHECK(g.r.count(Outcome::Pass) == 0);
  CHECK(peak_mib() < 300);
}
