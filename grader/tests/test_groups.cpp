// Groups beyond the plain case: GPU tests (SKIPPED where there is no GPU), groups of a second test
// program, groups of given code, and the agreement of the manifest with the test programs
// (every test case in exactly one group, no empty group) that check-handouts and `test` enforce.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>

#include "helpers.hpp"
#include "mls/common/error.hpp"
#include "mls/grader/report.hpp"

using namespace mls::grader;
using nlohmann::json;

namespace {

// What lab 4's GPU test prints without a GPU: a WARN, then it returns (a Catch2 pass).
const char* kXmlSkip =
    "<Catch name=\"t\"><Group name=\"t\"><TestCase name=\"cuda\" tags=\"[gpu]\">\n"
    "<Warning>\n  SKIPPED: no GPU (cudaGetDeviceCount: no CUDA-capable device)\n</Warning>\n"
    "<OverallResult success=\"true\"/></TestCase></Group></Catch>\n";

SandboxResult ran(std::string out, std::string channel) {
  SandboxResult r;
  r.started = true;
  r.exited = true;
  r.exit_code = 0;
  r.out = std::move(out);
  r.channel = std::move(channel);
  return r;
}

bool has(const std::vector<std::string>& v, const std::string& needle) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& s) { return s.find(needle) != std::string::npos; });
}

/// The fixture lab's reference, built once per test case (direct build, cached objects).
fs::path build_fixture(const Manifest& m, const fs::path& dir) {
  GradeOptions go = testing::fixture_grade_options();
  BuildResult b = build_lab(m, testing::repo_root(), dir, go.build);
  INFO(b.log);
  REQUIRE(b.ok);
  REQUIRE(b.programs.built.count(m.test_binary) == 1);
  return b.binary;
}

}  // namespace

TEST_CASE("classify: a GPU test that reports no GPU is SKIPPED without a GPU, FAIL with one, a pass otherwise",
          "[grader][result][gpu]") {
  CatchXml x = parse_catch_xml(kXmlSkip);
  REQUIRE(x.cases.size() == 1);
  REQUIRE(x.cases[0].warnings.size() == 1);
  CHECK_THAT(x.cases[0].warnings[0], Catch::StartsWith("SKIPPED: no GPU"));
  SandboxResult r = ran(kXmlSkip, "N PASS cuda\nN END\n");
  TestResult allow = classify(r, "cuda", "N", SkipPolicy::Allow);
  CHECK(allow.outcome == Outcome::Skipped);
  CHECK_THAT(allow.message, Catch::Contains("skipped: no GPU on this machine"));
  TestResult refuse = classify(r, "cuda", "N", SkipPolicy::Refuse);
  CHECK(refuse.outcome == Outcome::Fail);
  CHECK_THAT(refuse.message, Catch::Contains("this machine has a GPU"));
  CHECK(classify(r, "cuda", "N", SkipPolicy::Ignore).outcome == Outcome::Pass);
  CHECK(classify(r, "cuda", "N").outcome == Outcome::Pass);
  // A skip is never a way around the nonce: without the harness's PASS line it is NO_RESULT.
  CHECK(classify(ran(kXmlSkip, ""), "cuda", "N", SkipPolicy::Allow).outcome == Outcome::NoResult);
  CHECK(outcome_from_string("SKIPPED") == Outcome::Skipped);
}

TEST_CASE("report: SKIPPED tests score 0 and leave the maximum, loudly, neutral in Gradescope", "[grader][report][gpu]") {
  Manifest m = testing::fixture_manifest();
  LabResult r;
  r.lab = 99;
  r.title = "Grader fixture";
  r.tests.push_back({"add small", "add", Visibility::Visible, Outcome::Pass, 4, 4, 0.01, ""});
  r.tests.push_back({"gpu kernel", "gpu", Visibility::Visible, Outcome::Skipped, 0, 3, 0.01,
                     "skipped: no GPU on this machine"});
  CHECK(r.score() == 4);
  CHECK(r.max_score() == 4);
  CHECK(r.uncounted_points() == 3);
  std::string t = format_table(r, m, false);
  CHECK_THAT(t, Catch::Contains("SKIPPED=1") && Catch::Contains("(3.00 points of GPU tests not counted"));
  json j = to_gradescope(r, m);
  CHECK(j["tests"][0]["status"] == "passed");
  CHECK(j["tests"][0]["max_score"] == 4.0);
  // Gradescope's informational test case: shown (visible), neither passed nor failed (no
  // status), not counted (no score, no max_score), and its output says so.
  const json& skipped = j["tests"][1];
  CHECK_FALSE(skipped.contains("status"));
  CHECK_FALSE(skipped.contains("score"));
  CHECK_FALSE(skipped.contains("max_score"));
  CHECK(skipped["visibility"] == "visible");
  CHECK_THAT(skipped["output"].get<std::string>(),
             Catch::StartsWith("SKIPPED") && Catch::Contains("not counted (neither passed nor failed)") &&
                 Catch::Contains("skipped: no GPU on this machine"));
  CHECK(skipped["tags"] == json::array({"gpu", "SKIPPED", "not counted"}));
  CHECK_THAT(j["output"].get<std::string>(), Catch::Contains("Score 4.00 / 4.00  (3.00 points of GPU tests not counted"));
  CHECK_THAT(to_junit(r, m), Catch::Contains("<skipped message=") && Catch::Contains("failures=\"0\" skipped=\"1\""));
  CHECK_THAT(to_csv({r}, m), Catch::Contains(",SKIPPED"));
}

TEST_CASE("count: a group the machine cannot run is not counted, whatever its tests did", "[grader][report][gpu]") {
  Manifest m = testing::fixture_manifest();
  auto result = [] {
    LabResult r;
    r.tests.push_back({"add small", "add", Visibility::Visible, Outcome::Fail, 0, 4, 0.01, "wrong"});
    r.tests.push_back({"gpu kernel", "gpu", Visibility::Visible, Outcome::Crash, 0, 3, 0.01, "crashed"});
    return r;
  };
  Machine none;  // no GPU, no mpirun
  LabResult r = result();
  count_points(r, m, none);
  CHECK(r.tests[0].counted);
  CHECK_FALSE(r.tests[1].counted);
  CHECK(r.max_score() == 4);
  CHECK(r.uncounted_points() == 3);
  CHECK_THAT(r.tests[1].message, Catch::Contains("crashed") && Catch::Contains("not counted: this machine has no GPU"));
  count_points(r, m, none);  // once is enough: said once
  CHECK(split(r.tests[1].message, '\n').size() == 2);
  // A PASS of a group that does not count scores nothing.
  r = result();
  r.tests[1].outcome = Outcome::Pass;
  r.tests[1].score = 3;
  count_points(r, m, none);
  CHECK(r.tests[1].score == 0);
  CHECK(r.score() == 0);
  // With a GPU the group counts, unless its program is not configured.
  Machine gpu;
  gpu.gpu = true;
  r = result();
  count_points(r, m, gpu);
  CHECK(r.max_score() == 7);
  gpu.not_configured.insert(m.test_binary);
  r = result();
  count_points(r, m, gpu);
  CHECK(r.max_score() == 4);
  CHECK_THAT(r.tests[1].message, Catch::Contains("no test program fixture_tests (no CUDA)"));
  // An MPI group counts where mpirun is.
  Manifest mpi = m;
  mpi.groups.back().gpu = false;
  mpi.groups.back().mpi = true;
  r = result();
  count_points(r, mpi, Machine{true, false, {}});
  CHECK_THAT(r.tests[1].message, Catch::Contains("not counted: this machine has no mpirun"));
  r = result();
  count_points(r, mpi, Machine{false, true, {}});
  CHECK(r.max_score() == 7);
}

TEST_CASE("manifest: group binary, gpu and given", "[grader][manifest][gpu]") {
  json j = json::parse(R"({"lab": 4, "dir": "lab4_kernels", "title": "t", "test_binary": "cpu_tests",
    "student_files": ["lab4_kernels/src/a.cpp"],
    "groups": [{"name": "a", "match": "[a]", "points": 1, "given": true},
               {"name": "g", "match": "[gpu]", "points": 2, "binary": "gpu_tests", "gpu": true},
               {"name": "h", "match": "[h]", "points": 2, "binary": "cpu_tests"}]})");
  Manifest m = parse_manifest(j);
  CHECK(m.groups[0].binary == "cpu_tests");
  CHECK(m.groups[0].given);
  CHECK_FALSE(m.groups[0].gpu);
  CHECK(m.groups[1].binary == "gpu_tests");
  CHECK(m.groups[1].gpu);
  CHECK(m.test_binaries() == std::vector<std::string>{"cpu_tests", "gpu_tests"});
  auto error_of = [](const json& bad) {
    try {
      parse_manifest(bad, "lab.json");
    } catch (const mls::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  json k = j;
  k["groups"][1]["gpu"] = "yes";
  CHECK_THAT(error_of(k), Catch::Contains("groups[1].gpu") && Catch::Contains("true or false"));
  k = j;
  k["groups"][0]["bianry"] = "x";
  CHECK_THAT(error_of(k), Catch::Contains("groups[0].bianry") && Catch::Contains("not a group field"));
  k = j;
  k["build"] = {{"sources", {"a.cpp"}}};
  CHECK_THAT(error_of(k), Catch::Contains("groups[1].binary") && Catch::Contains("one test program"));
  // An MPI group: parsed, needs the machine like a GPU group; both at once is refused.
  k = j;
  k["groups"][2]["mpi"] = true;
  Manifest mm = parse_manifest(k);
  CHECK(mm.groups[2].mpi);
  CHECK(mm.groups[2].needs_machine());
  CHECK_FALSE(mm.groups[0].needs_machine());
  CHECK(mm.groups[1].needs_machine());
  k["groups"][1]["mpi"] = true;
  CHECK_THAT(error_of(k), Catch::Contains("groups[1].mpi") && Catch::Contains("not both"));
}

TEST_CASE("machine: mpirun is looked up on the PATH, MLS_GRADER_MPI overrides", "[grader][manifest][gpu]") {
  struct Env {
    std::string name, old;
    bool had;
    Env(const char* n, const char* v) : name(n), had(std::getenv(n) != nullptr) {
      if (had) old = std::getenv(n);
      if (v) ::setenv(n, v, 1); else ::unsetenv(n);
    }
    ~Env() {
      if (had) ::setenv(name.c_str(), old.c_str(), 1); else ::unsetenv(name.c_str());
    }
  };
  {
    Env e("MLS_GRADER_MPI", "0");
    CHECK_FALSE(machine_has_mpirun());
  }
  {
    Env e("MLS_GRADER_MPI", "1");
    CHECK(machine_has_mpirun());
  }
  {
    Env e("MLS_GRADER_MPI", nullptr);
    Env p("PATH", "/nonexistent-mls-dir");
    CHECK_FALSE(machine_has_mpirun());
  }
}

TEST_CASE("run: a GPU group's test program that is not configured is SKIPPED, any other is NO_RESULT and a problem",
          "[grader][gpu]") {
  Manifest fixture = testing::fixture_manifest();
  testing::ScopedTmpdir tmp;
  fs::path bin = build_fixture(fixture, tmp.dir / "build");
  Manifest m = fixture;
  m.build.reset();  // a CMake lab: several test programs
  m.groups.pop_back();  // the fixture's own GPU group
  Group g{"cuda", "[cuda]", 5, Visibility::Visible, "gpu_tests", true, false};
  Group h{"extra", "[extra]", 1, Visibility::Visible, "extra_tests", false, false};
  m.groups.push_back(g);
  m.groups.push_back(h);
  TestPrograms p;
  p.built[m.test_binary] = bin;
  p.not_configured["gpu_tests"] = "the build configuration defines no target gpu_tests (no CUDA)";
  p.not_configured["extra_tests"] = "the build configuration defines no target extra_tests";
  RunOptions ro;
  ro.jobs = 2;
  ro.gpu_present = false;
  std::vector<std::string> notes;
  LabResult r = run_lab_tests(p, m, ro, &notes);
  INFO(format_table(r, m, false) << r.output);
  // The fixture's "gpu kernel" test is now in no group: a manifest problem too.
  CHECK(has(notes, "test case 'gpu kernel' of fixture_tests is in no group"));
  CHECK(has(notes, "group 'extra' needs the test program extra_tests"));
  CHECK_FALSE(has(notes, "'cuda'"));
  const TestResult* cuda = nullptr;
  const TestResult* extra = nullptr;
  for (const auto& t : r.tests) {
    if (t.group == "cuda") cuda = &t;
    if (t.group == "extra") extra = &t;
  }
  REQUIRE(cuda);
  REQUIRE(extra);
  CHECK(cuda->outcome == Outcome::Skipped);
  CHECK_THAT(cuda->message, Catch::Contains("skipped") && Catch::Contains("no CUDA"));
  CHECK(extra->outcome == Outcome::NoResult);
  CHECK(r.uncounted_points() == 5);
  CHECK(r.max_score() == 11);  // add 4 + mul 4 + sum 2 + extra 1; cuda left out
  HandoutJudgement jr = judge_reference(m, r, notes);
  CHECK(has(jr.problems, "manifest: group 'extra' needs the test program"));
  CHECK(has(jr.problems, "the reference does not pass every test") );
  CHECK(has(jr.notes, "1 GPU test(s) SKIPPED in the reference"));
  CHECK_FALSE(has(jr.problems, "cuda"));
}

TEST_CASE("run: the fixture's GPU test is SKIPPED without a GPU and FAIL on a machine with one", "[grader][gpu]") {
  Manifest m = testing::fixture_manifest();
  testing::ScopedTmpdir tmp;
  fs::path bin = build_fixture(m, tmp.dir / "build");
  RunOptions ro;
  ro.jobs = 2;
  ro.filter = "[gpu]";
  ro.gpu_present = false;
  LabResult r = run_lab_tests(bin, m, ro);
  REQUIRE(r.tests.size() == 1);
  CHECK(r.tests[0].outcome == Outcome::Skipped);
  ro.gpu_present = true;
  r = run_lab_tests(bin, m, ro);
  REQUIRE(r.tests.size() == 1);
  CHECK(r.tests[0].outcome == Outcome::Fail);
}

TEST_CASE("run: tests in no group or two groups and empty groups are problems for check-handouts and `test`",
          "[grader][manifest]") {
  Manifest m = testing::fixture_manifest();
  testing::ScopedTmpdir tmp;
  fs::path bin = build_fixture(m, tmp.dir / "build");
  // The reference's own manifest agrees with its program.
  RunOptions ro;
  ro.jobs = 2;
  ro.gpu_present = false;
  std::vector<std::string> notes;
  LabResult good = run_lab_tests(bin, m, ro, &notes);
  CHECK(notes.empty());
  HandoutJudgement jg = judge_reference(m, good, notes);
  CHECK(jg.problems.empty());
  CHECK(has(jg.notes, "GPU test(s) SKIPPED in the reference"));
  // Now: "sum" is dropped (its two tests are in no group), "mul" is matched twice, and a group
  // matches nothing.
  Manifest bad = m;
  bad.groups.erase(std::remove_if(bad.groups.begin(), bad.groups.end(), [](const Group& g) { return g.name == "sum"; }),
                   bad.groups.end());
  bad.groups.push_back({"mul_again", "[mul]", 1, Visibility::Visible, m.test_binary, false, false});
  bad.groups.push_back({"nothing", "[nope]", 1, Visibility::Visible, m.test_binary, false, false});
  bad.groups.push_back({"secret", "[secret]", 1, Visibility::Hidden, m.test_binary, false, false});
  notes.clear();
  LabResult r = run_lab_tests(bin, bad, ro, &notes);
  CHECK(has(notes, "test case 'sum to ten' of fixture_tests is in no group"));
  CHECK(has(notes, "test case 'mul small' of fixture_tests is in more than one group: mul mul_again"));
  CHECK(has(notes, "group 'nothing' ([nope]) matches no test case"));
  HandoutJudgement jr = judge_reference(bad, r, notes);
  CHECK(has(jr.problems, "manifest: test case 'sum to ten'"));
  CHECK(has(jr.problems, "manifest: group 'nothing'"));
  CHECK(has(jr.problems, "manifest: group 'secret'"));  // the reference must have the hidden tests
  // `test` (what a student runs on a handout) accepts only an empty hidden group.
  int expected = 0, problems = 0;
  for (const auto& n : notes) (note_expected_in_handout(bad, n) ? expected : problems)++;
  CHECK(expected == 1);
  CHECK(problems == 5);  // 2 tests in no group, 2 in two groups, 1 empty visible group
}

TEST_CASE("check-handouts: given groups may pass in the handout, GPU groups may be SKIPPED, others must be NOT_IMPLEMENTED",
          "[grader][gpu]") {
  Manifest m = testing::fixture_manifest();
  m.groups[0].given = true;  // "add" tests given code
  LabResult h;
  h.tests.push_back({"add small", "add", Visibility::Visible, Outcome::Pass, 2, 2, 0, ""});
  h.tests.push_back({"add negative", "add", Visibility::Visible, Outcome::NotImplemented, 0, 2, 0, "not implemented"});
  h.tests.push_back({"mul small", "mul", Visibility::Visible, Outcome::NotImplemented, 0, 2, 0, "not implemented"});
  h.tests.push_back({"sum (no test case)", "sum", Visibility::AfterDueDate, Outcome::NoResult, 0, 2, 0, ""});
  h.tests.push_back({"gpu kernel", "gpu", Visibility::Visible, Outcome::Skipped, 0, 3, 0, "skipped: no GPU"});
  HandoutJudgement j = judge_handout(m, h);
  CHECK(j.problems.empty());
  CHECK(has(j.notes, "1 test(s) of given code pass"));
  CHECK(has(j.notes, "1 GPU test(s) SKIPPED in the handout"));
  CHECK(has(j.notes, "cannot prove"));
  // A pass outside a given group, a given test that fails, a skip outside a GPU group: problems.
  h.tests.push_back({"mul zero", "mul", Visibility::Visible, Outcome::Pass, 2, 2, 0, ""});
  h.tests.push_back({"add other", "add", Visibility::Visible, Outcome::Fail, 0, 2, 0, "1 == 2"});
  h.tests.push_back({"sum to ten", "sum", Visibility::AfterDueDate, Outcome::Skipped, 0, 2, 0, ""});
  j = judge_handout(m, h);
  REQUIRE(j.problems.size() == 3);
  CHECK_THAT(j.problems[0], Catch::Contains("'mul: mul zero' is PASS (expected NOT_IMPLEMENTED)"));
  CHECK_THAT(j.problems[1], Catch::Contains("'add: add other' is FAIL (expected PASS or NOT_IMPLEMENTED: a given group)"));
  CHECK_THAT(j.problems[2], Catch::Contains("'sum: sum to ten' is SKIPPED"));
}

TEST_CASE("names: a semicolon in a test case's name is a problem (CTest would split it)", "[grader][groups]") {
  CHECK(test_name_problem("add, then mul", "t").empty());
  CHECK_THAT(test_name_problem("add; then mul", "lab_tests"),
             Catch::Contains("'add; then mul' of lab_tests") && Catch::Contains("';'"));
}

TEST_CASE("names: wildcards, exclusions and outer spaces are problems (Catch2 cannot run the test alone)",
          "[grader][groups]") {
  CHECK(test_name_problem("a*b, 2 * 3 [t] > 0", "t").empty());  // '*' inside, brackets, '>' are fine
  CHECK_THAT(test_name_problem("*suffix", "t"), Catch::Contains("'*suffix' of t") && Catch::Contains("wildcard"));
  CHECK_THAT(test_name_problem("prefix *", "t"), Catch::Contains("wildcard"));
  CHECK_THAT(test_name_problem("exclude:add", "t"), Catch::Contains("exclusion"));
  CHECK_THAT(test_name_problem(" add", "t"), Catch::Contains("space"));
  CHECK_THAT(test_name_problem("add ", "t"), Catch::Contains("space"));
  CHECK(normalised_test_name("  Add Two ") == "add two");
  CHECK(normalised_test_name("add two") == normalised_test_name("ADD TWO"));
  CHECK(normalised_test_name("") == "");
}
