// The adversarial suite, part 2: attacks on the machine and on the instructor's files. Each
// submission is graded end to end; each case asserts the score (0), the outcome, and that
// nothing is left on the machine (no process, no file in /tmp, /var/tmp or /dev/shm).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "helpers.hpp"
#include "mls/grader/intake.hpp"
#include "mls/grader/report.hpp"
#include "mls/grader/sandbox.hpp"

using namespace mls::grader;

namespace {

using Clock = std::chrono::steady_clock;

/// Entries in /tmp, /var/tmp and /dev/shm whose name starts with `prefix`.
int leftovers(const std::string& prefix = "mls-attack") {
  int n = 0;
  for (const char* dir : {"/tmp", "/var/tmp", "/dev/shm"}) {
    DIR* d = ::opendir(dir);
    if (!d) continue;
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) ++n;
    ::closedir(d);
  }
  return n;
}

/// The submission's text with @REPO@ replaced by the checkout's path.
std::string templated(const std::string& name) {
  std::string s = read_file(testing::submission(name) / "student.cpp");
  return redact(s, {{"@REPO@", testing::repo_root().string()}});
}

bool isolated_files() { return isolation().level != Isolation::Rlimits; }

/// Whether this isolation level hides the checkout from a submission: the namespace levels
/// always; the uid level only a checkout others cannot enter.
bool can_hide_checkout() {
  if (!isolated_files()) return false;
  if (isolation().level != Isolation::Uid) return true;
  return (fs::status(testing::repo_root()).permissions() & fs::perms::others_exec) == fs::perms::none;
}

/// The submission `name` with @REPO@ filled in, under `tmp`; empty (and said) when this
/// isolation level cannot hide the checkout, so the attack cannot be judged here.
fs::path templated_submission(const testing::ScopedTmpdir& tmp, const std::string& name) {
  if (!can_hide_checkout()) {
    SUCCEED("isolation " << isolation().name << " cannot hide a world-readable checkout (documented)");
    return {};
  }
  fs::path sub = tmp.dir / name;
  testing::put(sub, "student.cpp", templated(name));
  return sub;
}

Manifest hidden_manifest() { return load_manifest(testing::repo_root() / "grader/tests/fixture_lab/lab_hidden.json"); }

struct Graded {
  LabResult r;
  std::string all;  ///< everything a student sees: table, failures, output, results.json
  double seconds = 0;
};

/// Grades `sub`; checks the score is 0, no test PASSes, the report starts with the isolation
/// line, and nothing is left on the machine.
Graded grade_attack(const fs::path& sub, const Manifest& m, const testing::ScopedTmpdir& tmp) {
  auto t0 = Clock::now();
  Graded g;
  g.r = grade_submission(m, sub, testing::fixture_grade_options());
  g.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  g.all = format_table(g.r, m, false) + format_failures(g.r) + g.r.output + to_gradescope(g.r, m).dump();
  INFO(g.all);
  CHECK(g.r.score() == 0);
  CHECK(g.r.count(Outcome::Pass) == 0);
  CHECK_THAT(format_table(g.r, m, false), Catch::StartsWith("isolation: " + isolation().name));
  CHECK(testing::processes_mentioning(tmp.dir.string()) == 0);
  // The rlimits level (not root, no user namespaces) cannot tell a test's files from the
  // user's own: documented, and said at the top of every report.
  if (isolation().level != Isolation::Rlimits) CHECK(leftovers() == 0);
  return g;
}

}  // namespace

TEST_CASE("adversarial: attack, a student file that includes the reference by its absolute path does not build", "[grader][adversarial]") {
  testing::ScopedTmpdir tmp;
  fs::path sub = templated_submission(tmp, "include_reference");
  if (sub.empty()) return;
  Graded g = grade_attack(sub, testing::fixture_manifest(), tmp);
  CHECK_FALSE(g.r.built);
  CHECK_THAT(g.r.headline, Catch::Contains("did not build") && Catch::Contains("No such file or directory"));
  // The instructor's absolute paths are not in anything the student sees.
  CHECK_THAT(g.all, !Catch::Contains(testing::repo_root().string()) && !Catch::Contains(tmp.dir.string()));
}

TEST_CASE("adversarial: attack, a test-time reader finds neither the reference nor the hidden tests", "[grader][adversarial]") {
  testing::ScopedTmpdir tmp;
  fs::path sub = templated_submission(tmp, "reader");
  if (sub.empty()) return;
  Manifest m = hidden_manifest();
  Graded g = grade_attack(sub, m, tmp);
  CHECK(g.r.built);
  CHECK(g.r.tests.size() == 8);  // 7 of the fixture + the hidden test, which is there and runs
  for (const auto& t : g.r.tests) {
    if (t.group == "gpu") continue;
    INFO(t.name << ": " << t.message);
    CHECK((t.outcome == Outcome::Fail || t.outcome == Outcome::NoResult));
  }
  CHECK_THAT(g.all, !Catch::Contains("MLS-HIDDEN-TEST-SECRET") && !Catch::Contains("s += i;"));
}

TEST_CASE("adversarial: attack, the reference still scores full marks with hidden tests compiled apart", "[grader][adversarial]") {
  testing::ScopedTmpdir tmp;
  fs::path sub = tmp.dir / "ref";
  Manifest m = hidden_manifest();
  fs::create_directories(sub);
  fs::copy_file(testing::repo_root() / m.student_files[0], sub / "student.cpp");
  LabResult r = grade_submission(m, sub, testing::fixture_grade_options());
  INFO(format_table(r, m, false) << format_failures(r) << r.output);
  CHECK(r.score() == 11);
  CHECK(r.max_score() == 11);
  CHECK(r.count(Outcome::Pass) == 7);
  CHECK(testing::processes_mentioning(tmp.dir.string()) == 0);
}

TEST_CASE("adversarial: attack, a linked lab folder is refused and its files count as missing", "[grader][adversarial]") {
  testing::ScopedTmpdir tmp;
  Manifest m = testing::fixture_manifest();
  SECTION("a link to the instructor's tree") {
    fs::path sub = tmp.dir / "linked";
    fs::create_directories(sub);
    REQUIRE(::symlink((testing::repo_root() / "grader").c_str(), (sub / "grader").c_str()) == 0);
    Graded g = grade_attack(sub, m, tmp);
    CHECK(g.r.count(Outcome::NotImplemented) == 6);
    CHECK_THAT(g.r.output, Catch::Contains("refused grader/: the folder is a symbolic link"));
  }
  SECTION("in a batch, a link to a classmate's folder") {
    fs::path batch = tmp.dir / "batch";
    testing::put(batch / "bob" / "grader/tests/fixture_lab/src", "student.cpp",
                 read_file(testing::submission("correct") / "student.cpp"));
    fs::create_directories(batch / "mallory");
    REQUIRE(::symlink("../bob/grader", (batch / "mallory" / "grader").c_str()) == 0);
    Graded g = grade_attack(batch / "mallory", m, tmp);
    CHECK_THAT(g.r.output, Catch::Contains("symbolic link"));
    LabResult bob = grade_submission(m, batch / "bob", testing::fixture_grade_options());
    CHECK(bob.score() == 10);
  }
  SECTION("a linked parent folder deeper down") {
    fs::path sub = tmp.dir / "deeplink";
    fs::create_directories(sub / "grader/tests");
    REQUIRE(::symlink((testing::repo_root() / "grader/tests/fixture_lab").c_str(), (sub / "grader/tests/fixture_lab").c_str()) == 0);
    Graded g = grade_attack(sub, m, tmp);
    CHECK_THAT(g.r.output, Catch::Contains("refused grader/tests/fixture_lab/: the folder is a symbolic link"));
  }
}

TEST_CASE("adversarial: attack, links planted at the old lock paths in /tmp are never followed", "[grader][adversarial]") {
  testing::ScopedTmpdir tmp;
  // What an earlier submission could have left (at the uid level, /tmp is shared): links from
  // every lock path the grader once used to files the instructor owns.
  fs::path target_dir = tmp.dir / "victim";
  fs::create_directories(target_dir);
  std::vector<fs::path> links;
  // (At the uids this grader reserves: another grader version on the machine may use the
  // old range.)
  const char* base_env = std::getenv("MLS_GRADER_UID_BASE");
  int base = base_env ? std::atoi(base_env) : 62000;
  for (int k = 0; k < 8; ++k) {
    fs::path link = "/tmp/mls-grader-uid-" + std::to_string(base + k) + ".lock";
    if (fs::exists(fs::symlink_status(link))) continue;
    if (::symlink((target_dir / ("pwned-" + std::to_string(k))).c_str(), link.c_str()) == 0) links.push_back(link);
  }
  Graded g = grade_attack(testing::submission("plant_lock_links"), testing::fixture_manifest(), tmp);
  CHECK(g.r.count(Outcome::NotImplemented) == 6);
  // Nothing was created through the links, and a correct submission graded after them is not
  // affected by what the attack left.
  CHECK(fs::is_empty(target_dir));
  LabResult ok = grade_submission(testing::fixture_manifest(), testing::submission("correct"), testing::fixture_grade_options());
  CHECK(ok.score() == 10);
  CHECK(fs::is_empty(target_dir));
  for (const auto& l : links) fs::remove(l);
}

TEST_CASE("adversarial: attack, a daemon in its own namespaces does not outlive its test", "[grader][adversarial]") {
  testing::ScopedTmpdir tmp;
  Graded g = grade_attack(testing::submission("daemon"), testing::fixture_manifest(), tmp);
  CHECK(g.r.count(Outcome::NotImplemented) == 6);
  // The daemon would write its files a second after its test; wait for that moment to pass.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  if (isolation().level != Isolation::Rlimits) CHECK(leftovers() == 0);
  CHECK(testing::processes_mentioning(tmp.dir.string()) == 0);
}

TEST_CASE("adversarial: attack, files left in /tmp, /var/tmp and /dev/shm do not outlive the grading", "[grader][adversarial]") {
  testing::ScopedTmpdir tmp;
  Graded g = grade_attack(testing::submission("leftovers"), testing::fixture_manifest(), tmp);
  CHECK(g.r.count(Outcome::NotImplemented) == 6);
}

TEST_CASE("adversarial: attack, a build that needs gigabytes is stopped at the build memory limit: a clean 0", "[grader][adversarial]") {
  testing::ScopedTmpdir tmp;
  Graded g = grade_attack(testing::submission("build_memory"), testing::fixture_manifest(), tmp);
  CHECK_FALSE(g.r.built);
  CHECK_THAT(g.r.headline, Catch::Contains("did not build") && Catch::Contains("first errors"));
  CHECK(g.seconds < 120);
}

TEST_CASE("adversarial: attack, hostile file and folder names (invalid UTF-8, terminal escapes) are escaped everywhere",
          "[grader][adversarial]") {
  testing::ScopedTmpdir tmp;
  std::string evil_dir = "evil\xff\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J";
  fs::path sub = tmp.dir / evil_dir;
  fs::create_directories(sub);
  for (std::string n : {std::string("\x1b[2J\x1b[H"), std::string("\xff\xfe.cpp"), std::string("\x1b]0;owned\x07"),
                        std::string("bidi\xe2\x80\xaegpj.cpp"), std::string("c1\xc2\x9b" "31m")})
    testing::put(sub, n, "x");
  Manifest m = testing::fixture_manifest();
  Graded g = grade_attack(sub, m, tmp);
  CHECK(g.r.count(Outcome::NotImplemented) == 6);
  std::string table = format_table(g.r, m, false) + format_failures(g.r) + sanitize_text(g.r.output, 1 << 20);
  for (char c : {'\x1b', '\x07', '\xff'}) CHECK(table.find(c) == std::string::npos);
  CHECK(table.find("\xc2\x9b") == std::string::npos);
  CHECK(table.find("\xe2\x80\xae") == std::string::npos);
  CHECK_THAT(g.r.output, Catch::Contains("\\x1b[2J"));
  // results.json: a strict dump (no replacement of invalid UTF-8) works.
  nlohmann::json j = to_gradescope(g.r, m);
  std::string dumped;
  CHECK_NOTHROW(dumped = j.dump());
  // The leaderboard, from that results.json, stays inert.
  LeaderboardRow row = leaderboard_row_from_results(nlohmann::json::parse(dumped), "x");
  row.submission += "<script>alert(1)</script>";
  std::string html = leaderboard_html({row}, "t");
  CHECK_THAT(html, !Catch::Contains("<script>alert") && !Catch::Contains("\x1b"));
  CHECK_THAT(leaderboard_markdown({row}, "t"), !Catch::Contains("<script>"));
}

TEST_CASE("adversarial: attack, a FIFO, a huge sparse file, thousands of files and a deep tree: intake is fast and reads nothing",
          "[grader][adversarial]") {
  testing::ScopedTmpdir tmp;
  fs::path sub = tmp.dir / "specials";
  fs::create_directories(sub / "grader/tests/fixture_lab/src");
  REQUIRE(::mkfifo((sub / "grader/tests/fixture_lab/src/student.cpp").c_str(), 0644) == 0);
  REQUIRE(::mkfifo((sub / "student.cpp").c_str(), 0644) == 0);
  {
    int fd = ::open((sub / "huge.bin").c_str(), O_CREAT | O_WRONLY, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, off_t(4) << 30) == 0);
    ::close(fd);
  }
  for (int i = 0; i < 3000; ++i) testing::put(sub / "many", "f" + std::to_string(i), "");
  // A path over PATH_MAX: made one folder at a time, relative to its parent.
  int fd = ::open(sub.c_str(), O_RDONLY | O_DIRECTORY);
  for (int i = 0; i < 60 && fd >= 0; ++i) {
    std::string name(200, static_cast<char>('a' + i % 26));
    ::mkdirat(fd, name.c_str(), 0755);
    int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY);
    ::close(fd);
    fd = next;
  }
  if (fd >= 0) ::close(fd);
  Manifest m = testing::fixture_manifest();
  auto t0 = Clock::now();
  IntakeReport in = intake_submission(sub, m);
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(s < 5);
  CHECK(in.accepted.empty());
  std::string notes;
  for (const auto& n : in.notes) notes += n + "\n";
  INFO(notes);
  CHECK_THAT(notes, Catch::Contains("a FIFO, not a regular file") && Catch::Contains("ignored 300"));
  Graded g = grade_attack(sub, m, tmp);
  CHECK(g.r.count(Outcome::NotImplemented) == 6);
  // The deep chain is removed one level at a time (the path is too long for one call).
  remove_tree(sub);
}

TEST_CASE("adversarial: attack, grading from a checkout under a mode-700 folder works (as root: the sandbox uid cannot enter it)",
          "[grader][adversarial]") {
  testing::ScopedTmpdir tmp;
  fs::path home = tmp.dir / "home";
  fs::create_directories(home);
  ::chmod(home.c_str(), 0700);
  fs::path repo = home / "mlsys-labs";
  Manifest m = testing::fixture_manifest();
  copy_tree(testing::repo_root() / m.dir, repo / m.dir);
  copy_tree(testing::repo_root() / "common/include", repo / "common/include");
  copy_tree(testing::repo_root() / "common/tests/include", repo / "common/tests/include");
  GradeOptions go = testing::fixture_grade_options();
  go.build.root = repo;
  LabResult r = grade_submission(m, testing::submission("correct"), go);
  INFO(format_table(r, m, false) << format_failures(r) << r.output);
  CHECK(r.score() == 10);
  // The same checkout's reference cannot be included by a submission.
  fs::path sub = tmp.dir / "inc";
  testing::put(sub, "student.cpp", "#include \"" + (repo / m.student_files[0]).string() + "\"\n");
  if (isolated_files()) {
    LabResult bad = grade_submission(m, sub, go);
    CHECK(bad.score() == 0);
    CHECK_FALSE(bad.built);
  }
  CHECK(testing::processes_mentioning(tmp.dir.string()) == 0);
}
