// The adversarial suite: sample submissions of the fixture lab, each graded end to end (intake,
// build, isolated runs), with the expected outcome of every test case. The grader must stay up,
// stay within its time bound, and leave no process behind.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>

#include "helpers.hpp"
#include "mls/grader/report.hpp"
#include "mls/grader/sandbox.hpp"

using namespace mls::grader;

namespace {

const std::vector<std::string> kTests = {"add small", "add negative", "mul small", "mul zero", "sum to ten",
                                         "sum, with [brackets] and \"quotes\"", "gpu kernel"};

/// Grades `sub` and checks each test's outcome: those named in `expect`, PASS for the rest
/// (or `rest`); the GPU-style test is always SKIPPED (no GPU, before any student code runs).
LabResult grade_and_check(const fs::path& sub, const std::map<std::string, Outcome>& expect,
                          Outcome rest = Outcome::Pass, double max_seconds = 60) {
  Manifest m = testing::fixture_manifest();
  testing::ScopedTmpdir tmp;  // every path of this grading run is under it
  auto t0 = std::chrono::steady_clock::now();
  LabResult r = grade_submission(m, sub, testing::fixture_grade_options());
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(format_table(r, m, false) << format_failures(r) << r.output);
  CHECK(s < max_seconds);
  REQUIRE(r.tests.size() == kTests.size());
  for (const auto& t : r.tests) {
    auto it = expect.find(t.name);
    Outcome want = it == expect.end() ? (t.group == "gpu" ? Outcome::Skipped : rest) : it->second;
    INFO("test '" << t.name << "': " << t.message);
    CHECK(to_string(t.outcome) == std::string(to_string(want)));
    CHECK(t.score == (t.outcome == Outcome::Pass ? t.max_score : 0.0));
  }
  // No process of the run survives it (its programs all live under this run's TMPDIR).
  CHECK(testing::processes_mentioning(tmp.dir.string()) == 0);
  return r;
}

/// Grades `sub`, which scores 0 for `why` (said once, in the result's headline).
LabResult grade_zero(const fs::path& sub, const std::string& why) {
  Manifest m = testing::fixture_manifest();
  LabResult r = grade_submission(m, sub, testing::fixture_grade_options());
  INFO(r.headline << r.output);
  CHECK(r.score() == 0);
  // The maximum of a submission that passes: the GPU group is not counted on this machine.
  CHECK(r.max_score() == 10);
  CHECK_THAT(r.headline, Catch::Contains(why));
  return r;
}

}  // namespace

TEST_CASE("adversarial: the correct submission scores full marks", "[grader][adversarial]") {
  LabResult r = grade_and_check(testing::submission("correct"), {});
  CHECK(r.score() == 10);
  CHECK(r.max_score() == 10);  // the 3 points of the SKIPPED GPU group are left out
  CHECK(r.uncounted_points() == 3);
  CHECK_THAT(format_table(r, testing::fixture_manifest(), false),
             Catch::Contains("SKIPPED=1") && Catch::Contains("(3.00 points of GPU tests not counted"));
}

TEST_CASE("adversarial: the reference solution scores full marks, the empty submission is NOT_IMPLEMENTED",
          "[grader][adversarial]") {
  fs::path sub = make_temp_dir("mls-grader-test");
  grade_and_check(sub, {}, Outcome::NotImplemented);
  Manifest m = testing::fixture_manifest();
  fs::copy_file(testing::repo_root() / m.student_files[0], sub / "student.cpp");
  grade_and_check(sub, {});
  remove_tree(sub);
}

TEST_CASE("adversarial: a submission that does not compile scores 0 with the compiler errors", "[grader][adversarial]") {
  LabResult r = grade_zero(testing::submission("no_compile"), "did not build");
  CHECK_THAT(r.headline, Catch::Contains("error: expected ';'"));
  CHECK_FALSE(r.built);
}

namespace {
std::size_t occurrences(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("adversarial: a compile error comes first, once, and no test repeats the intake notes",
          "[grader][adversarial]") {
  // no_compile with an extra file: the intake names it in a note.
  testing::ScopedTmpdir tmp;
  fs::path sub = tmp.dir / "no_compile";
  fs::create_directories(sub);
  fs::copy_file(testing::submission("no_compile") / "student.cpp", sub / "student.cpp");
  testing::put(sub, "notes.txt", "my notes");
  Manifest m = testing::fixture_manifest();
  LabResult r = grade_submission(m, sub, testing::fixture_grade_options());
  const std::string error = "error: expected ';'";
  INFO(r.headline << "\n---\n" << r.output);
  REQUIRE_THAT(r.output, Catch::Contains("intake: ") && Catch::Contains("notes.txt"));
  for (const auto& t : r.tests) {
    INFO(t.name << ": " << t.message);
    CHECK_THAT(t.message, Catch::StartsWith("not run: the submission did not build") && !Catch::Contains("intake") &&
                              !Catch::Contains(error));
  }
  // The terminal report: the compiler's errors right under the title, before the table.
  std::string table = format_table(r, m, false) + format_failures(r) + r.output;
  CHECK(occurrences(table, error) == 1);
  CHECK(occurrences(table, "notes.txt") == 1);
  CHECK(table.find(error) < table.find("group "));
  CHECK(split(table, '\n')[2] == "The submission did not build. The compiler's first errors:");
  // results.json: the errors at the top of the output (after the isolation line and the score), once.
  nlohmann::json j = to_gradescope(r, m);
  const std::string out = j["output"].get<std::string>();
  CHECK(occurrences(out, error) == 1);
  CHECK(occurrences(out, "notes.txt") == 1);
  CHECK(out.find(error) < out.find("intake: "));
  CHECK_THAT(split(out, '\n')[2], Catch::StartsWith("Score 0.00 / 10.00"));
  CHECK_THAT(split(out, '\n')[3], Catch::StartsWith("The submission did not build"));
  for (const auto& t : j["tests"]) CHECK_THAT(t["output"].get<std::string>(), !Catch::Contains(error) && !Catch::Contains("intake"));
}

TEST_CASE("adversarial: a segfault loses only that test", "[grader][adversarial]") {
  grade_and_check(testing::submission("segfault"), {{"mul zero", Outcome::Crash}});
}

TEST_CASE("adversarial: an infinite loop times out", "[grader][adversarial]") {
  grade_and_check(testing::submission("infinite_loop"),
                  {{"sum to ten", Outcome::Timeout}, {"sum, with [brackets] and \"quotes\"", Outcome::Timeout}}, Outcome::Pass,
                  30);
}

TEST_CASE("adversarial: a fork bomb times out and leaves no process", "[grader][adversarial]") {
  grade_and_check(testing::submission("fork_bomb"), {{"add small", Outcome::Timeout}, {"add negative", Outcome::Timeout}},
                  Outcome::Pass, 30);
}

TEST_CASE("adversarial: a 64 GiB allocation is MEMORY", "[grader][adversarial]") {
  grade_and_check(testing::submission("big_alloc"), {{"mul small", Outcome::Memory}, {"mul zero", Outcome::Memory}});
}

TEST_CASE("adversarial: 1 GB to stdout is OUTPUT_LIMIT", "[grader][adversarial]") {
  grade_and_check(testing::submission("big_output"),
                  {{"add small", Outcome::OutputLimit}, {"add negative", Outcome::OutputLimit}}, Outcome::Pass, 30);
}

TEST_CASE("adversarial: exit(0) mid-test is NO_RESULT", "[grader][adversarial]") {
  grade_and_check(testing::submission("exit0"),
                  {{"sum to ten", Outcome::NoResult}, {"sum, with [brackets] and \"quotes\"", Outcome::NoResult}});
}

TEST_CASE("adversarial: _exit(0) mid-test is NO_RESULT", "[grader][adversarial]") {
  grade_and_check(testing::submission("underscore_exit0"), {{"mul small", Outcome::NoResult}, {"mul zero", Outcome::NoResult}});
}

TEST_CASE("adversarial: printed forged Catch2 XML success is NO_RESULT", "[grader][adversarial]") {
  grade_and_check(testing::submission("forged_xml"), {{"add small", Outcome::NoResult}, {"add negative", Outcome::NoResult}});
}

TEST_CASE("adversarial: a wrong answer is FAIL with the assertion, a stub is NOT_IMPLEMENTED", "[grader][adversarial]") {
  LabResult r = grade_and_check(testing::submission("partial"),
                                {{"mul small", Outcome::Fail},
                                 {"mul zero", Outcome::Fail},
                                 {"sum to ten", Outcome::NotImplemented},
                                 {"sum, with [brackets] and \"quotes\"", Outcome::NotImplemented}});
  CHECK_THAT(r.tests[2].message, Catch::Contains("7 == 12"));
}

TEST_CASE("adversarial: a submission that defines main is rejected", "[grader][adversarial]") {
  grade_zero(testing::submission("defines_main"), "defines or names `main`");
}

TEST_CASE("adversarial: a symlink to the results file is refused and results.json is written safely",
          "[grader][adversarial]") {
  fs::path dir = make_temp_dir("mls-grader-test");
  fs::path results = dir / "results.json";
  testing::put(dir, "results.json", "{\"score\": 0}");
  testing::put(dir, "precious.txt", "keep me");
  fs::path sub = dir / "sub";
  fs::create_directories(sub);
  REQUIRE(::symlink(results.c_str(), (sub / "student.cpp").c_str()) == 0);
  LabResult r = grade_and_check(sub, {}, Outcome::NotImplemented);
  CHECK_THAT(r.output, Catch::Contains("symbolic link"));
  // The results path itself is a symlink to another file: the write replaces the link, never
  // writes through it.
  fs::remove(results);
  REQUIRE(::symlink((dir / "precious.txt").c_str(), results.c_str()) == 0);
  write_file_atomic(results, to_gradescope(r, testing::fixture_manifest()).dump());
  CHECK(fs::is_regular_file(fs::symlink_status(results)));
  CHECK(read_file(dir / "precious.txt") == "keep me");
  CHECK(nlohmann::json::parse(read_file(results))["score"] == 0.0);
  remove_tree(dir);
}
