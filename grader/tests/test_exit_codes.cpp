// The exit codes of the built `mls-grader` (handouts/README.md: 0 success; 1 tests failed; 2 usage
// or manifest error, a path argument that does not exist included, said before any work; 3 the
// lab did not build; 4 internal error), on the fixture lab so that each run takes about a second.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>

#include "helpers.hpp"

using namespace mls::grader;

#ifdef MLS_GRADER_EXE
namespace {

struct Ran {
  int code = -1;
  double seconds = 0;
  std::string out, err;
};

/// Runs `mls-grader <args>` from the repository root; stdout and stderr kept.
Ran grader(const std::string& args, const fs::path& tmp) {
  fs::path out = tmp / "stdout.txt", err = tmp / "stderr.txt";
  std::string cmd = "cd '" + testing::repo_root().string() + "' && '" MLS_GRADER_EXE "' " + args + " >'" +
                    out.string() + "' 2>'" + err.string() + "'";
  auto t0 = std::chrono::steady_clock::now();
  int st = std::system(cmd.c_str());
  Ran r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

const std::string kFixture = "--manifest grader/tests/fixture_lab/lab.json -j 2 ";

}  // namespace

TEST_CASE("exit codes: a path argument that does not exist is a usage error (2), named, before any work",
          "[grader][exit_codes]") {
  testing::ScopedTmpdir tmp;
  const std::string sub = testing::submission("correct").string();
  struct Case {
    std::string args, flag, path;
  };
  const std::vector<Case> cases = {
      {"grade " + kFixture + "--submission /no/such/dir", "--submission", "/no/such/dir"},
      {"grade " + kFixture + "--batch /no/such/dir", "--batch", "/no/such/dir"},
      {"grade --root /no/such/root --lab 1 --submission " + sub, "--root", "/no/such/root"},
      {"grade --manifest /no/such/lab.json --submission " + sub, "--manifest", "/no/such/lab.json"},
      {"grade " + kFixture + "--submission " + sub + " --results /no/such/dir/results.json", "--results",
       "/no/such/dir"},
      {"grade " + kFixture + "--submission " + sub + " --junit /no/such/dir/j.xml", "--junit", "/no/such/dir"},
      {"grade " + kFixture + "--batch " + testing::submission("").string() + " --csv /no/such/dir/s.csv", "--csv",
       "/no/such/dir"},
      {"test " + kFixture + "--results /no/such/dir/r.json", "--results", "/no/such/dir"},
      {"leaderboard --in /no/such/results.json", "--in", "/no/such/results.json"},
  };
  for (const auto& c : cases) {
    Ran r = grader(c.args, tmp.dir);
    INFO(c.args << "\n" << r.err);
    CHECK(r.code == 2);
    CHECK(r.seconds < 1.0);
    CHECK_THAT(r.err, Catch::Contains(c.flag) && Catch::Contains(c.path));
    CHECK_THAT(r.err, !Catch::Contains("preparing the reference") && !Catch::Contains("internal error"));
  }
  // A bad argument of another kind is 2 too.
  CHECK(grader("grade " + kFixture, tmp.dir).code == 2);
  CHECK(grader("no-such-command", tmp.dir).code == 2);
}

TEST_CASE("exit codes: grade and test exit 0 when every test passes, 1 when one fails", "[grader][exit_codes]") {
  testing::ScopedTmpdir tmp;
  Ran pass = grader("grade " + kFixture + "--submission " + testing::submission("correct").string() + " --results " +
                        (tmp.dir / "r.json").string(),
                    tmp.dir);
  INFO(pass.err);
  CHECK(pass.code == 0);  // the GPU test SKIPPED (no GPU) does not fail it
  CHECK(fs::exists(tmp.dir / "r.json"));
  Ran fail = grader("grade " + kFixture + "--submission " + testing::submission("partial").string() + " --results " +
                        (tmp.dir / "p.json").string(),
                    tmp.dir);
  INFO(fail.err);
  CHECK(fail.code == 1);
  CHECK(fs::exists(tmp.dir / "p.json"));  // the results are written all the same
  // A submission that does not build scored 0: its tests failed.
  CHECK(grader("grade " + kFixture + "--submission " + testing::submission("no_compile").string(), tmp.dir).code == 1);
  // A batch: 1 when any submission has a test that did not pass, 0 when all pass.
  fs::path batch = tmp.dir / "batch";
  for (const char* s : {"correct", "partial"}) {
    fs::create_directories(batch / s);
    fs::copy(testing::submission(s), batch / s, fs::copy_options::recursive);
  }
  Ran b = grader("grade " + kFixture + "--batch " + batch.string() + " --csv " + (tmp.dir / "s.csv").string(), tmp.dir);
  INFO(b.err);
  CHECK(b.code == 1);
  CHECK(fs::exists(tmp.dir / "s.csv"));
  fs::remove_all(batch / "partial");
  CHECK(grader("grade " + kFixture + "--batch " + batch.string() + " --csv " + (tmp.dir / "s2.csv").string(), tmp.dir)
            .code == 0);
  // `test` on the working tree: the fixture's reference passes.
  CHECK(grader("test " + kFixture, tmp.dir).code == 0);
}

TEST_CASE("exit codes: a reference that does not build is 3, with the compiler's error", "[grader][exit_codes]") {
  testing::ScopedTmpdir tmp;
  nlohmann::json j = nlohmann::json::parse(read_file(testing::fixture_manifest_path()));
  j["build"]["flags"] = {"-DMLS_FIXTURE_BROKEN_REFERENCE"};
  write_file_atomic(tmp.dir / "lab.json", j.dump(2));
  Ran r = grader("grade --manifest " + (tmp.dir / "lab.json").string() + " -j 2 --submission " +
                     testing::submission("correct").string(),
                 tmp.dir);
  INFO(r.out << r.err);
  CHECK(r.code == 3);
  CHECK_THAT(r.err, Catch::Contains("does not build, on purpose"));
}

TEST_CASE("exit codes: check-groups is 0 when each group needs only its functions, 2 on an unknown group",
          "[grader][exit_codes][groups]") {
  testing::ScopedTmpdir tmp;
  Ran ok = grader("check-groups " + kFixture, tmp.dir);
  INFO(ok.out << ok.err);
  CHECK(ok.code == 0);
  CHECK_THAT(ok.out, Catch::Contains("every region in one group's functions: yes") &&
                         Catch::Contains("3 group(s) checked, 0 with problems"));
  Ran bad = grader("check-groups " + kFixture + "--group nope", tmp.dir);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("has no group 'nope'"));
}

TEST_CASE("exit codes: leaderboard refuses a JSON that is not a grader result (2), naming the file and what it lacks",
          "[grader][exit_codes][leaderboard]") {
  testing::ScopedTmpdir tmp;
  testing::put(tmp.dir, "empty/results.json", "{}");
  testing::put(tmp.dir, "list/results.json", "[1, 2, 3]");
  testing::put(tmp.dir, "broken/results.json", "{\"score\": ");
  testing::put(tmp.dir, "alice/results.json",
               R"({"score": 7, "tests": [], "leaderboard": [], "extra_data": {"lab": 99, "max_score": 10}})");
  const std::string good = (tmp.dir / "alice/results.json").string();
  for (const char* bad : {"empty", "list", "broken"}) {
    const std::string f = (tmp.dir / bad / "results.json").string();
    Ran r = grader("leaderboard --in " + good + " --in " + f + " --md " + (tmp.dir / "board.md").string(), tmp.dir);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("--in " + f + ": ") && !Catch::Contains("internal error"));
    CHECK_FALSE(fs::exists(tmp.dir / "board.md"));  // nothing rendered
  }
  Ran empty = grader("leaderboard --in " + (tmp.dir / "empty/results.json").string(), tmp.dir);
  CHECK_THAT(empty.err, Catch::Contains("not a results.json of mls-grader") && Catch::Contains("score (a number)") &&
                            Catch::Contains("extra_data"));
  Ran ok = grader("leaderboard --in " + good + " --md " + (tmp.dir / "board.md").string() + " --html " +
                      (tmp.dir / "board.html").string(),
                  tmp.dir);
  INFO(ok.err);
  CHECK(ok.code == 0);
  CHECK_THAT(read_file(tmp.dir / "board.md"), Catch::Contains("| 1 | alice | 7.00 / 10.00 |"));
  CHECK_THAT(read_file(tmp.dir / "board.html"), Catch::Contains("<td>alice</td><td>7.00 / 10.00</td>"));
}

TEST_CASE("exit codes: audit --fail-on nondeterministic exits 1 on a value that differs between two runs, and names it",
          "[grader][exit_codes]") {
  testing::ScopedTmpdir tmp;
  const std::string audit = "audit --manifest grader/tests/fixture_lab/lab_audit.json -j 2 --no-predictable";
  // --in-tree: the working tree's build (the fixture's direct build), as `test` runs it.
  Ran strict = grader(audit + " --in-tree --fail-on nondeterministic", tmp.dir);
  INFO(strict.out << strict.err);
  CHECK(strict.code == 1);
  CHECK_THAT(strict.out, Catch::StartsWith("isolation: ") && Catch::Contains("(the working tree's build; "));
  // The two runs' values are named, side by side.
  CHECK_THAT(strict.out, Catch::Contains("nondeterministic: observation 1 of 2, 'std::random_device' (i64): value [0]: "));
  CHECK_THAT(strict.out, Catch::Contains("audit: 1 nondeterministic observation(s) in 1 test(s)"));
  // The file the test made is named the same in both runs (<tmp>, no pid, no random folder name);
  // the pointer comparison is a truth value: 1 strong (the error), 2 weak, nothing nondeterministic.
  CHECK_THAT(strict.out, Catch::Contains("paths: a file the test made, named in an error, and a pointer comparison  "
                                         "(1 strong, 2 weak)"));
  CHECK_THAT(strict.out, !Catch::Contains("UNUSABLE") && !Catch::Contains("predictable test(s)"));
  // Without --fail-on, nondeterminism is reported, not a failure.
  Ran plain = grader(audit, tmp.dir);
  INFO(plain.out << plain.err);
  CHECK(plain.code == 0);
  CHECK_THAT(plain.out, Catch::Contains("(the cached reference build; "));
  CHECK_THAT(plain.out, Catch::Contains("audit: 1 nondeterministic observation(s) in 1 test(s)") &&
                            Catch::Contains("informational"));
  // Another kind is a usage error, named.
  Ran bad = grader(audit + " --fail-on weak", tmp.dir);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err + bad.out, Catch::Contains("--fail-on") && Catch::Contains("weak"));
}
#endif
