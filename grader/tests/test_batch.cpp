// A submission's build: the reference build's recipe replayed for the student files only, and a
// batch in which no submission's build sees another's.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "mls/grader/report.hpp"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

namespace mls::grader {

TEST_CASE("build steps: compile, archive and link lines of a Ninja build are told apart", "[grader][build]") {
  const std::string src = "/r/src";
  BuildStep c = parse_build_step(
      "/usr/bin/ccache /usr/bin/c++ -I/r/src/lab1/include -O3 -MD -MT a/x.cpp.o -MF a/x.cpp.o.d -o a/x.cpp.o -c "
      "/r/src/lab1/src/x.cpp",
      src);
  CHECK(c.kind == BuildStep::Kind::Compile);
  CHECK(c.source == "lab1/src/x.cpp");
  CHECK(c.output == "a/x.cpp.o");
  BuildStep outside = parse_build_step("/usr/bin/c++ -o gen.o -c /elsewhere/gen.cpp", src);
  CHECK(outside.kind == BuildStep::Kind::Compile);
  CHECK(outside.source.empty());
  BuildStep a = parse_build_step(
      ": && /usr/bin/cmake -E rm -f lab1/libt.a && /usr/bin/ar qc lab1/libt.a  a/x.cpp.o a/y.cpp.o && /usr/bin/ranlib lab1/libt.a && :",
      src);
  CHECK(a.kind == BuildStep::Kind::Archive);
  CHECK(a.output == "lab1/libt.a");
  CHECK(a.inputs == std::vector<std::string>{"a/x.cpp.o", "a/y.cpp.o"});
  BuildStep l = parse_build_step(
      ": && /usr/bin/c++ -O3 t/a.o t/b.o -o lab1/tests  -Wl,-rpath,/usr/lib common/libm.a  lab1/libt.a  /usr/lib/libopenblas.so && :",
      src);
  CHECK(l.kind == BuildStep::Kind::Link);
  CHECK(l.output == "lab1/tests");
  CHECK(l.inputs == std::vector<std::string>{"t/a.o", "t/b.o", "common/libm.a", "lab1/libt.a"});
  CHECK(parse_build_step("/usr/bin/cmake -E echo hi", src).kind == BuildStep::Kind::Other);
}

TEST_CASE("build steps: a recipe survives its JSON form", "[grader][build]") {
  Manifest m = testing::fixture_manifest();
  BuildRecipe r = direct_recipe(m, testing::repo_root());
  r.build = "/some/build";
  BuildRecipe back = recipe_from_json(recipe_to_json(r));
  CHECK(back.src == r.src);
  CHECK(back.build == r.build);
  CHECK(back.programs == r.programs);
  REQUIRE(back.steps.size() == r.steps.size());
  REQUIRE(r.steps.size() == m.build->sources.size() + 1);
  for (std::size_t i = 0; i < r.steps.size(); ++i) {
    CHECK(back.steps[i].line == r.steps[i].line);
    CHECK(back.steps[i].kind == r.steps[i].kind);
  }
  CHECK(r.steps[0].source == m.student_files[0]);
  CHECK(r.steps.back().kind == BuildStep::Kind::Link);
  CHECK(r.steps.back().output == m.test_binary);
}

namespace {
/// The fixture lab's reference build and a clean grading copy of it (`tree`) to build from.
struct FixtureCopy {
  Manifest m = testing::fixture_manifest();
  testing::ScopedTmpdir tmp;
  GradeOptions go = testing::fixture_grade_options();
  BuildResult ref = build_reference(m, go.build);
  fs::path tree = tmp.dir / "src";
  FixtureCopy() { copy_reference_tree(testing::repo_root(), m, tree); }
};
}  // namespace

TEST_CASE("grade: a submission's build compiles only its student files and links the reference's objects",
          "[grader][build]") {
  FixtureCopy f;
  REQUIRE(f.ref.ok);
  auto& [m, tmp, go, ref, tree] = f;
  BuildResult b = build_submission(m, tree, tmp.dir / "build", ref.recipe, go.build);
  INFO(b.log);
  REQUIRE(b.ok);
  CHECK_THAT(b.log, Catch::Contains("c++ -c " + m.student_files[0]));
  CHECK_THAT(b.log, !Catch::Contains("c++ -c grader/tests/fixture_lab/tests/"));
  // The test objects come from the reference build; the program is the submission's own.
  CHECK(fs::exists(tmp.dir / "build/obj/grader/tests/fixture_lab/tests/test_fixture.cpp.o"));
  CHECK(b.binary == tmp.dir / "build" / m.test_binary);
  CHECK(fs::exists(b.binary));
}

TEST_CASE("grade --batch: each submission is built afresh, a broken one after a correct one scores 0", "[grader][build]") {
  Manifest m = testing::fixture_manifest();
  testing::ScopedTmpdir tmp;
  GradeOptions go = testing::fixture_grade_options();
  go.reference = prepare_reference(m, go);
  go.batch_tree = std::make_shared<BatchTree>();
  go.batch_tree->dir = tmp.dir / "batch";
  go.build.build_uid = reserve_sandbox_uid();
  LabResult correct = grade_submission(m, testing::submission("correct"), go);
  INFO(format_table(correct, m, false) << format_failures(correct) << correct.output);
  CHECK(correct.score() == 10);
  CHECK_THAT(correct.output, Catch::Contains("grading: build"));
  LabResult broken = grade_submission(m, testing::submission("no_compile"), go);
  CHECK_FALSE(broken.built);
  CHECK(broken.score() == 0);
  LabResult partial = grade_submission(m, testing::submission("partial"), go);
  CHECK(partial.score() == 4);
  // The stub of a file a submission lacks is back in the copy.
  fs::path empty = tmp.dir / "empty";
  fs::create_directories(empty);
  LabResult none = grade_submission(m, empty, go);
  CHECK(none.score() == 0);
  CHECK(none.count(Outcome::NotImplemented) == 6);
}

TEST_CASE("build steps: a student compile line at another optimisation level", "[grader][build]") {
  CHECK(with_opt_level("/usr/bin/c++ -I/x -O3 -DNDEBUG -fPIC -O3 -c a.cpp -o a.o", "-O1") ==
        "/usr/bin/c++ -I/x -O1 -DNDEBUG -fPIC -c a.cpp -o a.o");
  CHECK(with_opt_level("c++ -Os -c a.cpp", "-O2") == "c++ -O2 -c a.cpp");
  CHECK(with_opt_level("c++ -c a.cpp", "-O1") == "c++ -O1 -c a.cpp");  // none: added after the compiler
  CHECK(with_opt_level("c++ -O3 -c a.cpp", "") == "c++ -O3 -c a.cpp");  // "": the line as it is
  CHECK(with_opt_level("c++ -O3 -c 'my  dir/a.cpp'", "-O1") == "c++ -O1 -c 'my  dir/a.cpp'");  // spacing kept
}

TEST_CASE("grade: student files compile at the grading level, a --bench build at the reference's", "[grader][build]") {
  FixtureCopy f;
  REQUIRE(f.ref.ok);
  auto& [m, tmp, go, ref, tree] = f;
  auto compile_lines = [&](const BuildOptions& bo, const fs::path& dir) {
    BuildResult b = build_submission(m, tree, dir, ref.recipe, bo);
    INFO(b.log);
    REQUIRE(b.ok);
    std::string n = read_file(dir / "replay.ninja"), out;
    for (const auto& l : split(n, '\n'))
      if (l.find(" -c ") != std::string::npos) out += l + "\n";
    return out;
  };
  BuildOptions bo = go.build;
  bo.student_opt = "-O2";
  std::string graded = compile_lines(bo, tmp.dir / "b1");
  CHECK_THAT(graded, Catch::Contains(" -O2 "));
  CHECK_THAT(graded, !Catch::Contains(" -O1 "));
  bo.benchmarks = true;  // a figure is measured on the code as the reference builds it
  std::string bench = compile_lines(bo, tmp.dir / "b2");
  CHECK_THAT(bench, Catch::Contains(" -O1 "));  // the fixture recipe's own level
  CHECK_THAT(bench, !Catch::Contains(" -O2 "));
}

TEST_CASE("grade --batch: submissions graded two at a time score as one at a time, in order", "[grader][build]") {
  Manifest m = testing::fixture_manifest();
  testing::ScopedTmpdir tmp;
  GradeOptions go = testing::fixture_grade_options();
  go.reference = prepare_reference(m, go);
  fs::path empty = tmp.dir / "empty";
  fs::create_directories(empty);
  const std::vector<fs::path> subs = {testing::submission("correct"), testing::submission("no_compile"),
                                      testing::submission("partial"), empty, testing::submission("correct")};
  const std::vector<double> want = {10, 0, 4, 0, 10};
  for (int parallel : {1, 2, 3}) {
    INFO("parallel " << parallel);
    std::vector<std::size_t> done;
    auto rs = grade_batch(m, subs, go, parallel, [&](std::size_t i, const LabResult& r) {
      done.push_back(i);
      CHECK(r.score() == want[i]);
    });
    REQUIRE(rs.size() == subs.size());
    for (std::size_t i = 0; i < subs.size(); ++i) {
      INFO(i << ": " << format_failures(rs[i]) << rs[i].output);
      CHECK(rs[i].score() == want[i]);
    }
    std::sort(done.begin(), done.end());
    CHECK(done == std::vector<std::size_t>{0, 1, 2, 3, 4});
  }
  CHECK(grade_batch(m, {}, go, 2).empty());
}

TEST_CASE("grade --batch: one max_score for a build failure and a pass, per-test points that add up exactly",
          "[grader][build]") {
  // The fixture lab with 1 point over 3 tests (0.34, 0.33, 0.33) and its GPU group, which this
  // machine does not count (no GPU).
  auto j = nlohmann::json::parse(read_file(testing::fixture_manifest_path()));
  j["groups"][0]["match"] = "[add],mul small";
  j["groups"][0]["points"] = 1;
  j["groups"][1]["match"] = "mul zero";
  Manifest m = parse_manifest(j, "fixture with a group of thirds");
  m.path = testing::fixture_manifest_path();
  testing::ScopedTmpdir tmp;
  GradeOptions go = testing::fixture_grade_options();
  go.reference = prepare_reference(m, go);
  auto rs = grade_batch(m, {testing::submission("correct"), testing::submission("no_compile")}, go, 2);
  REQUIRE(rs.size() == 2);
  INFO(format_table(rs[0], m, false) << format_table(rs[1], m, false));
  CHECK(rs[0].score() == 7);
  CHECK(rs[1].score() == 0);
  CHECK_FALSE(rs[1].built);
  CHECK(rs[0].max_score() == 7);  // 1 + 4 + 2: the GPU group's 3 points are not counted here
  CHECK(rs[1].max_score() == 7);
  // scores.csv: one max_score, and the points earned per group.
  const auto lines = split(to_csv(rs, m), '\n');
  REQUIRE(lines.size() >= 3);
  CHECK_THAT(lines[0], Catch::EndsWith(",group:add,group:mul,group:sum,group:gpu"));
  CHECK_THAT(lines[1], Catch::StartsWith("correct,99,7.00,7.00,yes,") && Catch::EndsWith(",1.00,4.00,2.00,0.00"));
  CHECK_THAT(lines[2], Catch::StartsWith("no_compile,99,0.00,7.00,no,") && Catch::EndsWith(",0.00,0.00,0.00,0.00"));
  // results.json: the printed max_scores add up exactly, per group and in all.
  for (const auto& r : rs) {
    nlohmann::json res = nlohmann::json::parse(to_gradescope(r, m).dump());
    std::map<std::string, long long> per_group;
    long long all = 0;
    for (const auto& t : res["tests"]) {
      if (!t.contains("max_score")) continue;  // not counted (the GPU group)
      const long long h = std::llround(t["max_score"].get<double>() * 100);
      CHECK(std::abs(t["max_score"].get<double>() * 100 - static_cast<double>(h)) < 1e-9);
      per_group[t["tags"][0].get<std::string>()] += h;
      all += h;
    }
    CHECK(per_group == std::map<std::string, long long>{{"add", 100}, {"mul", 400}, {"sum", 200}});
    CHECK(all == 700);
    CHECK(res["extra_data"]["max_score"] == 7.0);
  }
}

namespace {

/// The fixture lab with one benchmark whose check is the test case "mul small" (its program is
/// the test program itself: no Google Benchmark report, so a checked figure fails to measure).
Manifest fixture_with_benchmark() {
  auto j = nlohmann::json::parse(read_file(testing::fixture_manifest_path()));
  j["benchmarks"] = {{{"name", "mul_speed"}, {"binary", "fixture_tests"}, {"filter", "BM_Mul"}, {"metric", "ratio"},
                      {"peer", "BM_Copy"}, {"check", "mul small"}}};
  Manifest m = parse_manifest(j, "fixture with a benchmark");
  m.path = testing::fixture_manifest_path();
  return m;
}

/// The submission `name` (a folder of grader/tests/submissions) built against `ref`.
TestPrograms build_sample(const Manifest& m, const std::string& name, const Reference& ref, const GradeOptions& go,
                          const fs::path& dir) {
  copy_reference_tree(testing::repo_root(), m, dir / "src");
  fs::copy_file(testing::submission(name) / "student.cpp", dir / "src" / m.student_files[0],
                fs::copy_options::overwrite_existing);
  BuildResult b = build_submission(m, dir / "src", dir / "build", ref.build.recipe, go.build);
  INFO(b.log);
  REQUIRE(b.ok);
  return b.programs;
}

}  // namespace

TEST_CASE("grade --bench: a benchmark's check reruns its test on fresh inputs against the reference", "[grader][bench]") {
  Manifest m = fixture_with_benchmark();
  testing::ScopedTmpdir tmp;
  GradeOptions go = testing::fixture_grade_options();
  auto ref = prepare_reference(m, go);
  const Benchmark& bm = m.benchmarks[0];
  CHECK(check_benchmark(m, build_sample(m, "correct", *ref, go, tmp.dir / "a"), *ref, bm, go.run).empty());
  // partial's mul is wrong: no figure, and the reason names the check.
  std::string why = check_benchmark(m, build_sample(m, "partial", *ref, go, tmp.dir / "b"), *ref, bm, go.run);
  CHECK_THAT(why, Catch::Contains("mul small"));
  Benchmark unknown = bm;
  unknown.check = "no such test";
  CHECK_THAT(check_benchmark(m, {}, *ref, unknown, go.run), Catch::Contains("is no test case of the reference"));
}

TEST_CASE("grade --bench: benchmarks run only when every test passes, and only checked figures count", "[grader][bench]") {
  Manifest m = fixture_with_benchmark();
  testing::ScopedTmpdir tmp;
  GradeOptions go = testing::fixture_grade_options();
  go.bench = true;
  go.bench_repetitions = 1;
  go.reference = prepare_reference(m, go);
  LabResult partial = grade_submission(m, testing::submission("partial"), go);
  CHECK_THAT(partial.output, Catch::Contains("benchmarks: not run"));
  CHECK(partial.leaderboard.empty());
  LabResult correct = grade_submission(m, testing::submission("correct"), go);
  INFO(correct.output);
  CHECK(correct.score() == 10);
  // The figure is the grader's timing of the validated check runs, said how in the leaderboard.
  CHECK_THAT(correct.output, Catch::Contains("benchmark mul_speed_vs_reference: ") && Catch::Contains("the reference solution's speed") &&
                                 Catch::Contains("validated runs, grader clock"));
  REQUIRE(correct.leaderboard.size() == 1);
  CHECK(correct.leaderboard[0].value > 0);
  CHECK_THAT(correct.leaderboard[0].how, Catch::Contains("the grader's clock") && Catch::Contains("'mul small'"));
}

TEST_CASE("adversarial: hostile, cause 6: a figure comes only from validated runs the grader timed",
          "[grader][bench][adversarial]") {
  // bench_fast_wrong: mul right only on the fixed checks' inputs (the tests pass locally) and 0
  // elsewhere, printing a Google Benchmark report claiming 10^6x: no figure (the timed run's
  // results differ). bench_report: every test passes, plus a forged report on stdout at exit:
  // the figure is the grader's timing, the report never read.
  Manifest m = fixture_with_benchmark();
  testing::ScopedTmpdir tmp;
  GradeOptions go = testing::fixture_grade_options();
  go.bench = true;
  go.bench_repetitions = 1;
  go.reference = prepare_reference(m, go);
  LabResult forged = grade_submission(m, testing::submission("hostile_bench_report"), go);
  INFO(forged.output);
  REQUIRE(forged.leaderboard.size() == 1);
  CHECK(forged.leaderboard[0].value < 100);  // its own report said 1e6
  CHECK_THAT(forged.output, !Catch::Contains("1e+06"));
  // A check whose timed run differs from the reference gives no figure.
  Benchmark bm = m.benchmarks[0];
  bm.check = "mul zero";
  fs::path dir = tmp.dir / "w";
  TimedCheck t = time_check(m, build_sample(m, "hostile_bench_wrong", *go.reference, go, dir), *go.reference, bm, go.run, 3);
  CHECK_THAT(t.why, Catch::Contains("differs from the reference build's") && Catch::Contains("timed run 1"));
}

}  // namespace mls::grader
