// The group check (`mls-grader check-groups`, group_check.hpp): every solution region belongs to
// one group, a group's variant stubs only its functions, and the verdict of a variant's grading.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "mls/common/error.hpp"
#include "mls/grader/group_check.hpp"
#include "mls/grader/report.hpp"
#include "mls/grader/strip.hpp"

// The marker comments, split so that this file has none of its own.
#define MLS_BEGIN "// BEGIN " "SOLUTION"
#define MLS_END "// END " "SOLUTION"

using namespace mls::grader;

namespace {

Manifest three_groups() {
  return parse_manifest(nlohmann::json::parse(R"({
    "lab": 7, "dir": "lab7_x", "title": "X", "test_binary": "t", "student_files": ["lab7_x/src/a.cpp"],
    "groups": [
      {"name": "base", "match": "[base]", "points": 1, "functions": ["base_fn"]},
      {"name": "mid", "match": "[mid]", "points": 1, "functions": ["mid_fn"], "needs": ["base"]},
      {"name": "top", "match": "[top]", "points": 1, "needs": ["mid"]},
      {"name": "other", "match": "[other]", "points": 1, "functions": ["other_fn"]},
      {"name": "free", "match": "[free]", "points": 1, "given": true}
    ]})"));
}

TestResult test(const std::string& name, const std::string& group, Outcome o, bool counted = true) {
  TestResult t;
  t.name = name;
  t.group = group;
  t.outcome = o;
  t.counted = counted;
  return t;
}

}  // namespace

TEST_CASE("strip: a region's function is named past attributes and else-blocks", "[grader][strip][groups]") {
  const std::vector<std::string> attr = {
      "[[maybe_unused]] __attribute__((target(\"avx512f\"))) static void ukernel_avx512(",
      "    const float* a, float* c) {", "  " MLS_BEGIN, "  c[0] = a[0];", "  " MLS_END, "}"};
  CHECK(enclosing_function(attr, 2) == "ukernel_avx512");
  const std::vector<std::string> els = {"void Var::backward(int g) const {", "  if (g) {", "    g = 1;", "  } else {",
                                        "    g = 2;", "  }", "  " MLS_BEGIN};
  CHECK(enclosing_function(els, 6) == "Var::backward");
  const std::vector<std::string> inner_else = {"int f(int x) {", "  if (x) {", "  } else {", "    " MLS_BEGIN};
  CHECK(enclosing_function(inner_else, 3) == "f");
  CHECK(enclosing_function({"namespace a {", MLS_BEGIN}, 1).empty());
}

TEST_CASE("strip: a filter stubs only the picked functions and keeps the others' code without markers",
          "[grader][strip][groups]") {
  const std::string text =
      "int f() {\n  " MLS_BEGIN "\n  return 1;\n  " MLS_END "\n}\n"
      "int g() {\n  " MLS_BEGIN "\n  return 2;\n  " MLS_END "\n}\n";
  StripResult s = strip_solutions(text, "a.cpp", "lab7", [](const std::string& fn) { return fn == "g"; });
  CHECK(s.functions == std::vector<std::string>{"f", "g"});
  CHECK(s.stubbed == std::vector<std::string>{"g"});
  CHECK(s.text == "int f() {\n  return 1;\n}\nint g() {\n  MLS_TODO(\"lab7: g\");\n}\n");
  CHECK_FALSE(contains_marker_text(s.text));
  StripResult all = strip_solutions(text, "a.cpp", "lab7");
  CHECK(all.stubbed == all.functions);
  StripResult none = strip_solutions(text, "a.cpp", "lab7", [](const std::string&) { return false; });
  CHECK(none.text == unmark_solutions(text, "a.cpp"));
}

TEST_CASE("check-groups: every region in exactly one group, every named function a region", "[grader][groups]") {
  Manifest m = three_groups();
  const std::vector<SolutionRegion> regions = {{"lab7_x/src/a.cpp", "base_fn"}, {"lab7_x/src/a.cpp", "mid_fn"},
                                               {"lab7_x/src/a.cpp", "other_fn"}};
  CHECK(check_group_functions(m, regions).empty());
  auto more = regions;
  more.push_back({"lab7_x/src/a.cpp", "lonely"});
  auto p = check_group_functions(m, more);
  REQUIRE(p.size() == 1);
  CHECK_THAT(p[0], Catch::Contains("'lonely' belongs to no group") && Catch::Contains("lab7_x/lab.json"));
  m.groups[3].functions.push_back("base_fn");
  m.groups[4].functions.push_back("ghost");
  p = check_group_functions(m, regions);
  CHECK_THAT(p[0] + p[1] + p[2], Catch::Contains("'base_fn' is named by several groups (base, other)") &&
                                     Catch::Contains("group 'free' is given") &&
                                     Catch::Contains("names 'ghost', which is no solution region"));
}

TEST_CASE("check-groups: needs are followed transitively, unknown needs are manifest errors", "[grader][groups]") {
  Manifest m = three_groups();
  CHECK(groups_affected_by(m, "base") == std::set<std::string>{"base", "mid", "top"});
  CHECK(groups_affected_by(m, "mid") == std::set<std::string>{"mid", "top"});
  CHECK(groups_affected_by(m, "other") == std::set<std::string>{"other"});
  auto bad = [](const std::string& group) {
    return R"({"lab": 7, "dir": "d", "title": "X", "test_binary": "t", "student_files": ["d/a.cpp"], "groups": [)" +
           group + "]}";
  };
  CHECK_THROWS_WITH(parse_manifest(nlohmann::json::parse(bad(R"({"name": "a", "match": "[a]", "points": 1, "needs": ["zz"]})"))),
                    Catch::Contains("groups[0].needs") && Catch::Contains("'zz' is not a group of this lab"));
  CHECK_THROWS_WITH(parse_manifest(nlohmann::json::parse(bad(R"({"name": "a", "match": "[a]", "points": 1, "needs": ["a"]})"))),
                    Catch::Contains("'a' is the group itself"));
  CHECK_THROWS_WITH(parse_manifest(nlohmann::json::parse(bad(R"({"name": "a", "match": "[a]", "points": 1, "functions": ["f g"]})"))),
                    Catch::Contains("groups[0].functions") && Catch::Contains("'f g' is not a function name"));
}

TEST_CASE("check-groups: the verdict of one variant", "[grader][groups]") {
  Manifest m = three_groups();
  LabResult r;
  r.built = true;
  r.tests = {test("b1", "base", Outcome::NotImplemented), test("b2", "base", Outcome::Pass),
             test("m1", "mid", Outcome::Fail), test("t1", "top", Outcome::Crash), test("o1", "other", Outcome::Pass),
             test("f1", "free", Outcome::Pass)};
  GroupVerdict v = judge_group_variant(m, "base", r);
  CHECK(v.ok());
  CHECK(v.own_failed == 1);
  CHECK(v.own_tests == 2);
  CHECK(v.dependents_failed == std::set<std::string>{"mid", "top"});
  // The same failures with mid's functions stubbed: base's failing test is outside mid and its dependents.
  v = judge_group_variant(m, "mid", r);
  CHECK_FALSE(v.ok());
  REQUIRE(v.unexpected.count("base") == 1);
  CHECK(v.unexpected.at("base") == std::vector<std::string>{"b1"});
  CHECK_THAT(v.why, Catch::Contains("base (1)") && Catch::Contains("add \"mid\" to each such group's \"needs\""));
  // A group whose tests all pass without its functions does not test them.
  LabResult quiet;
  quiet.built = true;
  quiet.tests = {test("o1", "other", Outcome::Pass), test("b1", "base", Outcome::Pass)};
  v = judge_group_variant(m, "other", quiet);
  CHECK_FALSE(v.ok());
  CHECK_THAT(v.why, Catch::Contains("none of its 1 tests fails"));
  // Tests this machine cannot run: nothing to judge.
  LabResult gpu;
  gpu.built = true;
  gpu.tests = {test("o1", "other", Outcome::Skipped, false)};
  v = judge_group_variant(m, "other", gpu);
  CHECK(v.ok());
  CHECK(v.skipped);
  // A variant that does not build fails the check.
  LabResult broken;
  broken.headline = "a.cpp:3: error: expected ';'\nmore";
  v = judge_group_variant(m, "base", broken);
  CHECK_THAT(v.why, Catch::StartsWith("the variant did not build: a.cpp:3: error: expected ';'"));
  const std::string report = format_group_verdicts({judge_group_variant(m, "base", r), v});
  CHECK_THAT(report, Catch::Contains("ok   base") && Catch::Contains("FAIL base") &&
                         Catch::Contains("2 group(s) checked, 1 with problems"));
}

TEST_CASE("check-groups: the fixture lab's groups each need only their own functions", "[grader][groups][build]") {
  Manifest m = testing::fixture_manifest();
  testing::ScopedTmpdir tmp;
  const auto regions = solution_regions(m, testing::repo_root());
  CHECK(check_group_functions(m, regions).empty());
  const auto files = group_variant_files(m, testing::repo_root(), {"mul"});
  REQUIRE(files.size() == 1);
  const std::string& text = files.begin()->second;
  CHECK_THAT(text, Catch::Contains("MLS_TODO(\"lab99: mul\")") && Catch::Contains("return a + b;") &&
                       !Catch::Contains("return a * b;"));
  GradeOptions go = testing::fixture_grade_options();
  go.reference = prepare_reference(m, go);
  const auto verdicts = check_groups(m, testing::repo_root(), go, {}, 1);
  INFO(format_group_verdicts(verdicts));
  REQUIRE(verdicts.size() == 3);
  for (const auto& v : verdicts) CHECK(v.ok());
  CHECK(verdicts[0].group == "add");
  CHECK(verdicts[0].own_failed == 2);
  CHECK_THROWS_WITH(check_groups(m, testing::repo_root(), go, {"nope"}, 1), Catch::Contains("has no group 'nope'"));
}
