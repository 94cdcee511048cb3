// Feedback end to end (issue 27): a planted wrong value in a fixture submission gives a result
// whose output (results.json's and the terminal's) names the function and both values within its
// first 5 lines, for a failing check of the student's own process and for a differential failure.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "mls/grader/report.hpp"

using namespace mls::grader;

namespace {

std::string first_lines(const std::string& s, std::size_t n) {
  std::string out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < n && start < s.size(); ++i) {
    std::size_t nl = s.find('\n', start);
    out += s.substr(start, nl == std::string::npos ? std::string::npos : nl - start + 1);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

/// Grades a one-file submission of the fixture lab, differentially.
LabResult grade_text(const std::string& student_cpp) {
  testing::ScopedTmpdir tmp;
  fs::path sub = tmp.dir / "sub";
  testing::put(sub, "student.cpp", student_cpp);
  return grade_submission(testing::fixture_manifest(), sub, testing::fixture_grade_options());
}

const nlohmann::json& result_of(const nlohmann::json& j, const std::string& name) {
  for (const auto& t : j["tests"])
    if (t["name"].get<std::string>().find(name) != std::string::npos) return t;
  FAIL("no test " << name << " in results.json");
  return j;
}

}  // namespace

TEST_CASE("feedback e2e: a failing check names the function and got/want first, then the local command",
          "[grader][feedback]") {
  // mul adds: its own check `fixture::mul(3, 4) == 12` fails with 7 == 12.
  LabResult r = grade_text(
      "#include \"fixture.hpp\"\nnamespace fixture {\nint add(int a, int b) { return a + b; }\n"
      "int mul(int a, int b) { return a + b; }\nlong sum_to(int n) { return 1L * n * (n + 1) / 2; }\n}\n");
  Manifest m = testing::fixture_manifest();
  nlohmann::json j = to_gradescope(r, m);
  const auto& t = result_of(j, "mul small");
  std::string out = t["output"].get<std::string>();
  INFO(out);
  CHECK(t["status"] == "failed");
  std::string head = first_lines(out, 5);
  CHECK_THAT(head, Catch::Contains("fixture::mul(3, 4) == 12") && Catch::Contains("7 == 12"));
  CHECK_THAT(out, Catch::Contains("run it locally: build/release/grader/tests/fixture_lab/fixture_tests \"mul small\""));
  CHECK(out.size() <= 2048);
  // The terminal says the same.
  std::string term = format_failures(r, 2048);
  CHECK_THAT(term, Catch::Contains("7 == 12"));
  CHECK(r.tests.size() >= 4);
}

TEST_CASE("feedback e2e: a differential failure names the observation, both values and the count of others first",
          "[grader][feedback]") {
  // mul is right on its check's fixed inputs only: the student's process passes, the values it
  // observes on the drawn inputs differ from the reference's by one.
  LabResult r = grade_text(
      "#include \"fixture.hpp\"\nnamespace fixture {\nint add(int a, int b) { return a + b; }\n"
      "int mul(int a, int b) { return (a == 3 && b == 4) || a == 0 ? a * b : a * b + 1; }\n"
      "long sum_to(int n) { return 1L * n * (n + 1) / 2; }\n}\n");
  Manifest m = testing::fixture_manifest();
  nlohmann::json j = to_gradescope(r, m);
  for (const char* name : {"mul small", "mul zero"}) {
    const auto& t = result_of(j, name);
    std::string out = t["output"].get<std::string>();
    INFO(name << ":\n" << out);
    CHECK(t["status"] == "failed");
    std::string head = first_lines(out, 5);
    CHECK_THAT(head, Catch::Contains("differs from the reference build") && Catch::Contains("fixture::mul(") &&
                         Catch::Contains("expected ") && Catch::Contains(", got "));
    CHECK_THAT(out, Catch::Contains("run it locally: build/release/grader/tests/fixture_lab/fixture_tests"));
  }
  CHECK(r.score() == 6);  // add (4) and sum (2)
}
