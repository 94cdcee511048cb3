// mls-grader: the instructor's grader and the student's local test runner.
//
// Exit codes (every command):
//   0  success (test/bench/grade: every test passed, results written; check-handouts: all good)
//   1  tests failed (grade: a test of the submission, or of any submission of a batch, did not
//      pass, a submission that does not build included; its results are written), or
//      check-handouts found a problem, or audit found a weak or unusable test (with --fail-on
//      nondeterministic, a nondeterministic observation too)
//   2  usage error: bad arguments, a path argument that does not exist (checked before any
//      work), unknown lab, invalid manifest, bad marker in a source
//   3  the lab did not build (test, bench, check-handouts; grade: the reference did not build)
//   4  internal error of the grader
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "mls/common/error.hpp"
#include "mls/grader/bench.hpp"
#include "mls/grader/grade.hpp"
#include "mls/grader/gradescope.hpp"
#include "mls/grader/group_check.hpp"
#include "mls/grader/intake.hpp"
#include "mls/grader/manifest.hpp"
#include "mls/grader/report.hpp"
#include "mls/grader/sandbox.hpp"
#include "mls/grader/strip.hpp"
#include "mls/grader/util.hpp"

using namespace mls::grader;

namespace {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct BuildFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Common {
  std::string root;
  int lab = -1;
  std::string manifest;
  std::string preset = "release";
  std::string build_dir;
  int jobs = 2;
};

/// A path argument that must exist: a usage error naming the flag and the path otherwise.
void require_dir(const char* flag, const std::string& p) {
  std::error_code ec;
  if (!p.empty() && !fs::is_directory(p, ec))
    throw UsageError(std::string(flag) + " " + p + ": " + (fs::exists(p, ec) ? "not a folder" : "no such folder"));
}
void require_file(const char* flag, const std::string& p) {
  std::error_code ec;
  if (!p.empty() && !fs::is_regular_file(p, ec))
    throw UsageError(std::string(flag) + " " + p + ": " + (fs::exists(p, ec) ? "not a file" : "no such file"));
}
/// An output path: its folder must exist (the file itself need not).
void require_parent(const char* flag, const std::string& p) {
  if (p.empty()) return;
  fs::path parent = fs::path(p).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec))
    throw UsageError(std::string(flag) + " " + p + ": its folder " + parent.string() + " does not exist");
}
/// The options every command with a lab takes.
void validate_common(const Common& c) {
  require_dir("--root", c.root);
  require_file("--manifest", c.manifest);
  require_dir("--build-dir", c.build_dir);
}

/// 0 when every test passed (GPU tests SKIPPED where there is no GPU count as passed), else 1.
int tests_exit_code(const LabResult& r) {
  int ok = r.count(Outcome::Pass) + r.count(Outcome::Skipped);
  return ok == static_cast<int>(r.tests.size()) && r.count(Outcome::Pass) > 0 ? 0 : 1;
}

fs::path root_of(const Common& c) {
  return find_repo_root(c.root.empty() ? std::nullopt : std::optional<fs::path>(c.root));
}

Manifest manifest_of(const Common& c) {
  if (!c.manifest.empty()) return load_manifest(c.manifest);
  if (c.lab < 0) throw UsageError("give --lab N or --manifest FILE");
  return find_lab(root_of(c), c.lab);
}

BuildOptions build_options(const Common& c) {
  BuildOptions b;
  b.root = root_of(c);
  b.preset = c.preset;
  if (!c.build_dir.empty()) {
    b.build_dir = fs::absolute(c.build_dir);
    if (!fs::exists(b.build_dir / "CMakeCache.txt"))
      throw UsageError("--build-dir " + c.build_dir + " is not a configured CMake build folder (no CMakeCache.txt)");
  }
  b.jobs = c.jobs;
  b.harness_lib = default_harness_lib();
  b.common_lib = default_common_lib();
  b.cache_dir = default_binary_dir() / "grader-cache";
  return b;
}

bool colour() { return ::isatty(1) != 0; }

void progress(const TestResult& t) {
  if (!::isatty(2)) return;
  std::fprintf(stderr, "  %-16s %s: %s (%.2f s)\n", to_string(t.outcome), t.group.c_str(),
               sanitize_text(display_name(t.name, 200), 300).c_str(), t.wall_s);
}

/// The build folder of in-tree builds: --build-dir, else `<root>/build/<preset>`.
fs::path in_tree_dir(const BuildOptions& bo) {
  return bo.build_dir.empty() ? bo.root / "build" / bo.preset : bo.build_dir;
}

/// Builds lab `m` from the working tree: the in-tree build folder (real labs), or a folder of
/// the grader's build (labs with a direct build).
BuildResult build_in_tree(const Manifest& m, const BuildOptions& bo) {
  fs::path build_dir = m.build ? default_binary_dir() / "grader-direct" / ("lab" + std::to_string(m.lab))
                               : in_tree_dir(bo);
  fs::path tree = bo.root;
  std::fprintf(stderr, "mls-grader: building %s ...\n", m.test_binary.c_str());
  BuildResult b = build_lab(m, tree, build_dir, bo);
  if (!b.ok) throw BuildFailed("lab " + std::to_string(m.lab) + " does not build:\n" + summarize_build_log(b.log));
  return b;
}

/// results.json text: every string in it is valid UTF-8 (sanitized; invalid bytes replaced as
/// a last resort), so nothing a submission names can make the dump fail.
std::string results_json(const LabResult& r, const Manifest& m) {
  return to_gradescope(r, m).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void write_outputs(const LabResult& r, const Manifest& m, const std::string& results, const std::string& junit) {
  if (!results.empty()) write_file_atomic(results, results_json(r, m));
  if (!junit.empty()) write_file_atomic(junit, to_junit(r, m));
}

// ---- commands -----------------------------------------------------------------------------------

int cmd_list(const Common& c) {
  std::vector<Manifest> labs;
  if (!c.manifest.empty()) labs.push_back(load_manifest(c.manifest));
  else if (c.lab >= 0) labs.push_back(find_lab(root_of(c), c.lab));
  else labs = discover_labs(root_of(c));
  if (labs.empty()) std::printf("no lab has a lab.json yet under %s\n", root_of(c).c_str());
  for (const auto& m : labs) {
    std::printf("lab %d: %s  (%s, test program %s, %.0f s per test, %.0f points)\n", m.lab, m.title.c_str(), m.dir.c_str(),
                m.test_binary.c_str(), m.time_limit_s, m.total_points());
    std::printf("  groups:\n");
    for (const auto& g : m.groups)
      std::printf("    %-20s %-28s %6.1f points  %s\n", g.name.c_str(), g.match.c_str(), g.points, to_string(g.visibility));
    std::printf("  student files:\n");
    for (const auto& f : m.student_files) std::printf("    %s\n", f.c_str());
    if (!m.hidden_files.empty()) {
      std::printf("  hidden test files (not in the handout):\n");
      for (const auto& f : m.hidden_files) std::printf("    %s\n", f.c_str());
    }
    if (!m.benchmarks.empty()) {
      std::printf("  benchmarks:\n");
      for (const auto& b : m.benchmarks)
        std::printf("    %-20s %s %s metric=%s peer=%s order=%s\n", b.name.c_str(), b.binary.c_str(), b.filter.c_str(),
                    b.metric.c_str(), b.peer.c_str(), b.order.c_str());
    }
  }
  return 0;
}

int cmd_test(const Common& c, const std::string& filter, const std::string& results, const std::string& junit) {
  validate_common(c);
  require_parent("--results", results);
  require_parent("--junit", junit);
  Manifest m = manifest_of(c);
  BuildOptions bo = build_options(c);
  BuildResult b = build_in_tree(m, bo);
  RunOptions ro;
  ro.jobs = c.jobs;
  ro.filter = filter;
  ro.on_result = progress;
  ro.preset = c.preset;
  std::vector<std::string> notes;
  LabResult r = run_lab_tests(b.programs, m, ro, &notes);
  r.submission = "working tree";
  std::cout << format_table(r, m, colour());
  std::string f = format_failures(r);
  if (!f.empty()) std::cout << "\n" << f;
  if (!r.output.empty()) std::cout << "\n" << r.output;
  write_outputs(r, m, results, junit);
  // The manifest and the test programs must agree (a hidden group is empty in a handout).
  int manifest_problems = 0;
  for (const auto& n : notes)
    if (!note_expected_in_handout(m, n)) {
      std::cout << "manifest problem: " << n << "\n";
      ++manifest_problems;
    }
  // GPU tests SKIPPED where there is no GPU do not fail the run (the table says so).
  return tests_exit_code(r) == 0 && manifest_problems == 0 ? 0 : 1;
}

/// The reference side of `grade`: built (or reused from the cache) and run once, shared by every
/// submission of the invocation (one secret salt per invocation).
std::shared_ptr<const Reference> reference_for(const Manifest& m, const GradeOptions& go) {
  std::fprintf(stderr, "mls-grader: preparing the reference of lab %d (cached build, two runs of each test) ...\n", m.lab);
  auto ref = prepare_reference(m, go);
  int weak = 0, problems = 0;
  for (const auto& rc : ref->cases) {
    if (rc.ok && strong_count(rc.stream.stream) == 0) ++weak;
    if (!rc.ok && rc.outcome != Outcome::Skipped) ++problems;
  }
  std::fprintf(stderr, "mls-grader: reference ready in %.1f s: %zu tests, %d with only weak observations, %d unusable; "
               "grader peak memory %.0f MB\n", ref->seconds, ref->cases.size(), weak, problems, grader_peak_mb());
  return ref;
}

/// `audit`'s options beyond the common ones.
struct AuditOptions {
  bool fail_on_nondeterministic = false;  ///< --fail-on nondeterministic
  bool second_salt = true;                ///< false: --no-predictable
  bool in_tree = false;                   ///< --in-tree: the working tree's build, not the cached reference copy
};

int cmd_audit(const Common& c, const AuditOptions& a) {
  Manifest m = manifest_of(c);
  GradeOptions go;
  go.build = build_options(c);
  go.run.jobs = c.jobs;
  std::printf("%s\n", isolation_line().c_str());
  // The reference's programs: the cached reference build (as `grade` runs them), or with
  // --in-tree the working tree's own (as `test` and `check-handouts` do: no second build).
  std::optional<BuildResult> in_tree;
  if (a.in_tree) in_tree = build_in_tree(m, go.build);
  auto prepare = [&](const GradeOptions& o) {
    if (!in_tree) return prepare_reference(m, o);
    auto r = std::make_shared<Reference>();
    r->build = *in_tree;
    return record_reference(m, o, r);
  };
  auto ref = prepare(go);
  // A second preparation under another salt: a test whose stream is the same under both does not
  // depend on the salt (fixed inputs: error checks, worked examples), so a submission could write
  // that stream itself without running the code (handouts/README.md, "What it trades").
  std::shared_ptr<Reference> ref2;
  if (a.second_salt) {
    GradeOptions other = go;
    other.salt = ref->salt ^ 0x9e3779b97f4a7c15ull;
    ref2 = prepare(other);
  }
  int weak = 0, bad = 0, predictable = 0, nondet_tests = 0, nondet = 0;
  std::printf("lab %d: %zu tests, reference prepared in %.1f s (%s; salt secret, two runs each%s)\n", m.lab,
              ref->cases.size(), ref->seconds, in_tree ? "the working tree's build" : "the cached reference build",
              a.second_salt ? ", then under a second salt" : "");
  for (std::size_t i = 0; i < ref->cases.size(); ++i) {
    const auto& job = ref->plan.jobs[i];
    const auto& rc = ref->cases[i];
    const Group* g = m.group(job.group);
    const bool local = g && g->judge == Judge::LocalOnly;
    if (rc.outcome == Outcome::Skipped) {
      std::printf("  SKIPPED    %s: %s\n", job.group.c_str(), job.name.c_str());
      continue;
    }
    if (!rc.ok) {
      ++bad;
      std::printf("  UNUSABLE   %s: %s\n      %s\n", job.group.c_str(), job.name.c_str(), rc.problem.substr(0, 400).c_str());
      continue;
    }
    int strong = strong_count(rc.stream.stream), total = static_cast<int>(rc.stream.stream.size());
    const bool fixed = ref2 && ref2->cases[i].ok && compare_streams(rc.stream, ref2->cases[i].stream.stream).empty();
    const char* tag = local ? "LOCAL_ONLY" : strong == 0 ? "WEAK" : "ok";
    if (strong == 0 && !local) ++weak;
    if (fixed && !local) ++predictable;
    if (rc.stream.nondeterministic) {
      ++nondet_tests;
      nondet += rc.stream.nondeterministic;
    }
    std::printf("  %-10s %s: %s  (%d strong, %d weak%s%s%s)\n", tag, job.group.c_str(), job.name.c_str(), strong,
                total - strong, rc.salt == 0 ? ", unsalted: fails under a salt" : "",
                rc.stream.nondeterministic ? (", " + std::to_string(rc.stream.nondeterministic) + " nondeterministic").c_str() : "",
                fixed ? ", predictable: the same under another salt" : "");
    for (const auto& d : rc.stream.differences) std::printf("      nondeterministic: %s\n", d.c_str());
  }
  std::printf("audit: %d weak test(s) (only truth values: forgeable), %d unusable; mark a group \"judge\": \"local_only\" "
              "or add observations\n", weak, bad);
  std::printf("audit: %d nondeterministic observation(s) in %d test(s) (values that differ between two runs with the same "
              "salt: compared loosely or by label only; %s)\n", nondet, nondet_tests,
              a.fail_on_nondeterministic ? "--fail-on nondeterministic: each is a problem, make the test observe only "
                                           "what its inputs decide (no pid, path, address, time or thread order)"
                                         : "informational");
  if (ref2)
    std::printf("audit: %d predictable test(s) (their stream does not depend on the salt: fixed inputs; informational)\n",
                predictable);
  return weak || bad || (a.fail_on_nondeterministic && nondet_tests) ? 1 : 0;
}

int cmd_grade(const Common& c, const std::string& submission, const std::string& batch, const std::string& results,
              const std::string& junit, const std::string& csv, bool keep_temp, bool local_verdict, bool bench,
              int repetitions, int parallel, const std::string& student_opt) {
  // Every path is checked before any work (the reference build takes minutes).
  validate_common(c);
  if (submission.empty() == batch.empty()) throw UsageError("give exactly one of --submission DIR or --batch DIR");
  require_dir("--submission", submission);
  require_dir("--batch", batch);
  require_parent("--results", results);
  require_parent("--junit", junit);
  require_parent("--csv", csv);
  Manifest m = manifest_of(c);
  GradeOptions go;
  go.build = build_options(c);
  go.run.jobs = c.jobs;
  go.run.on_result = progress;
  go.keep_temp = keep_temp;
  go.differential = !local_verdict;
  go.bench = bench;
  go.build.benchmarks = bench;  // the reference build then has the benchmark programs too
  go.bench_repetitions = repetitions;
  go.build.student_opt = student_opt == "reference" ? "" : student_opt;
  if (go.differential) {
    try {
      go.reference = reference_for(m, go);
    } catch (const ReferenceBuildFailed& e) {
      throw BuildFailed(e.what());
    }
  }
  if (!submission.empty()) {
    LabResult r = grade_submission(m, submission, go);
    std::cout << format_table(r, m, colour());
    std::string f = format_failures(r, 2048);
    if (!f.empty()) std::cout << "\n" << f;
    if (!r.output.empty()) std::cout << "\n" << sanitize_text(r.output, 64000);
    write_outputs(r, m, results, junit);
    return tests_exit_code(r);
  }
  std::vector<fs::path> subs;
  for (const auto& e : fs::directory_iterator(batch)) {
    std::error_code ec;
    auto st = e.symlink_status(ec);
    if (fs::is_directory(st)) subs.push_back(e.path());
    else if (fs::is_symlink(st))
      std::fprintf(stderr, "mls-grader: skipped %s: a symbolic link, not a submission folder\n",
                   display_name(e.path().filename().string()).c_str());
  }
  std::sort(subs.begin(), subs.end());
  auto t_batch = std::chrono::steady_clock::now();
  std::fprintf(stderr, "mls-grader: %s\n", isolation_line().c_str());
  const int lanes = parallel > 0 ? parallel : (c.jobs >= 2 ? 2 : 1);
  std::fprintf(stderr, "mls-grader: grading %zu submission(s), %d at a time ...\n", subs.size(), lanes);
  std::vector<LabResult> all = grade_batch(m, subs, go, lanes, [&](std::size_t i, const LabResult& r) {
    std::printf("%-32s %7.2f / %.2f\n", sanitize_text(r.submission, 300).c_str(), r.score(), r.max_score());
    std::fflush(stdout);
    if (!results.empty()) {
      fs::path dir = fs::path(results) / subs[i].filename();
      fs::create_directories(dir);
      write_file_atomic(dir / "results.json", results_json(r, m));
    }
  });
  std::fprintf(stderr, "mls-grader: %zu submission(s) graded in %.1f s (after the reference)\n", subs.size(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t_batch).count());
  std::string out = csv.empty() ? "scores.csv" : csv;
  write_file_atomic(out, to_csv(all, m));
  std::printf("wrote %s (%zu submissions)\n", out.c_str(), all.size());
  int rc = 0;
  for (const auto& r : all) rc = std::max(rc, tests_exit_code(r));
  return rc;
}

int cmd_handout(const Common& c, const std::string& out, bool strip_previous) {
  fs::path root = root_of(c);
  if (c.lab < 0) throw UsageError("give --lab N");
  auto labs = discover_labs(root);
  HandoutOptions ho;
  ho.strip_previous = strip_previous;
  HandoutReport rep = make_handout(root, labs, c.lab, out, ho);
  std::printf("handout of lab %d written to %s: %d solution regions stripped\n", c.lab, out.c_str(), rep.regions);
  for (const auto& s : rep.stripped_files) std::printf("  stripped %s\n", s.c_str());
  for (const auto& n : rep.notes) std::printf("  %s\n", n.c_str());
  return 0;
}

/// One lab of check-handouts; returns the problems found.
std::vector<std::string> check_one(const Manifest& m, const BuildOptions& bo, int jobs, bool keep) {
  std::vector<std::string> problems;
  auto say = [&](const std::string& s) { std::printf("  %s\n", s.c_str()); std::fflush(stdout); };
  auto count_str = [](const LabResult& r) {
    std::string s = std::to_string(r.count(Outcome::Pass)) + "/" + std::to_string(r.tests.size()) + " tests pass";
    if (int k = r.count(Outcome::Skipped)) s += ", " + std::to_string(k) + " SKIPPED (GPU, no GPU here)";
    return s;
  };
  // 1. The reference passes 100% (GPU tests: SKIPPED where there is no GPU, and said so); the
  //    manifest and the test programs agree (every test in exactly one group, no empty group).
  BuildResult ref = build_in_tree(m, bo);
  for (const auto& [target, why] : ref.programs.not_configured) say("note: " + why);
  RunOptions ro;
  ro.jobs = jobs;
  std::vector<std::string> notes;
  LabResult r = run_lab_tests(ref.programs, m, ro, &notes);
  HandoutJudgement jr = judge_reference(m, r, notes);
  problems.insert(problems.end(), jr.problems.begin(), jr.problems.end());
  say("reference: " + count_str(r));
  for (const auto& n : jr.notes) say("note: " + n);
  // 2. The handout builds with -Werror, 3. every lab test fails with "not implemented".
  fs::path temp = make_temp_dir("mls-grader-check");
  fs::path tree = temp / "handout";
  std::vector<std::string> lab_dirs;
  if (m.build) {
    copy_reference_tree(bo.root, m, tree);
    for (const auto& rel : m.student_files) {
      StripResult s = strip_solutions(read_file(tree / rel), rel, "lab" + std::to_string(m.lab));
      write_file_atomic(tree / rel, s.text);
    }
    for (const auto& h : m.hidden_files) {
      std::error_code ec;
      fs::remove(tree / h, ec);
    }
    lab_dirs.push_back(m.dir);
  } else {
    make_handout(bo.root, discover_labs(bo.root), m.lab, tree, {});
    for (const auto& e : fs::directory_iterator(tree))
      if (lab_number_of_dir(e.path().filename().string()) >= 0) lab_dirs.push_back(e.path().filename().string());
  }
  // 4. Nothing leaks: no marker text in any lab file, no hidden test file.
  for (const auto& d : lab_dirs)
    for (const auto& e : fs::recursive_directory_iterator(tree / d)) {
      if (!e.is_regular_file()) continue;
      if (contains_marker_text(read_file(e.path())))
        problems.push_back("marker text leaks into the handout: " + fs::relative(e.path(), tree).string());
    }
  for (const auto& h : m.hidden_files)
    if (fs::exists(tree / h)) problems.push_back("hidden test file in the handout: " + h);
  BuildOptions hb = bo;
  hb.werror = true;
  hb.release_opt = "-O1";  // about half the compile time of -O3; the reference is built at -O3
  hb.generated_from_reference = true;  // our own stripped sources: no sandbox, the user's ccache
  BuildResult hbuild = build_lab(m, tree, temp / "build", hb);
  if (!hbuild.ok) {
    problems.push_back("the handout does not build with -Werror:\n" + summarize_build_log(hbuild.log, 3000));
  } else {
    say("handout builds with -Werror");
    for (const auto& [target, why] : hbuild.programs.failed)
      problems.push_back("the handout's " + target + " does not build with -Werror: " + why);
    LabResult h = run_lab_tests(hbuild.programs, m, ro);
    HandoutJudgement jh = judge_handout(m, h);
    problems.insert(problems.end(), jh.problems.begin(), jh.problems.end());
    say("handout: " + std::to_string(h.count(Outcome::NotImplemented)) + "/" + std::to_string(h.tests.size()) +
        " tests fail with 'not implemented'");
    for (const auto& n : jh.notes) say("note: " + n);
    for (const auto& g : m.groups) {
      if (g.visibility != Visibility::Hidden) continue;
      auto bin = hbuild.programs.built.find(g.binary);
      if (bin == hbuild.programs.built.end()) continue;
      try {
        auto names = list_tests(bin->second, g.match, m);
        if (!names.empty())
          problems.push_back("hidden group '" + g.name + "' has " + std::to_string(names.size()) + " test(s) in the handout");
      } catch (const std::exception& e) {
        problems.push_back(e.what());
      }
    }
  }
  if (!keep) remove_tree(temp);
  return problems;
}

int cmd_check_handouts(const Common& c, bool keep) {
  std::vector<Manifest> labs;
  if (!c.manifest.empty()) labs.push_back(load_manifest(c.manifest));
  else if (c.lab >= 0) labs.push_back(find_lab(root_of(c), c.lab));
  else labs = discover_labs(root_of(c));
  if (labs.empty()) {
    std::printf("check-handouts: no lab has a lab.json yet\n");
    return 0;
  }
  BuildOptions bo = build_options(c);
  int bad = 0;
  for (const auto& m : labs) {
    std::printf("lab %d (%s):\n", m.lab, m.title.c_str());
    std::vector<std::string> problems;
    try {
      problems = check_one(m, bo, c.jobs, keep);
    } catch (const BuildFailed& e) {
      problems.push_back(e.what());
    } catch (const mls::Error& e) {
      problems.push_back(e.what());
    }
    for (const auto& p : problems) std::printf("  PROBLEM: %s\n", p.c_str());
    std::printf("  %s\n", problems.empty() ? "OK" : "FAILED");
    bad += !problems.empty();
  }
  std::printf("check-handouts: %zu lab(s), %d with problems\n", labs.size(), bad);
  return bad ? 1 : 0;
}

int cmd_bench(const Common& c, int repetitions, const std::string& results) {
  Manifest m = manifest_of(c);
  if (m.benchmarks.empty()) {
    std::printf("lab %d has no benchmarks\n", m.lab);
    return 0;
  }
  BuildOptions bo = build_options(c);
  BuildResult b = build_in_tree(m, bo);
  RunOptions ro;
  ro.jobs = c.jobs;
  LabResult r = run_lab_tests(b.programs, m, ro);
  r.submission = "working tree";
  bool all_pass = r.count(Outcome::Pass) > 0 &&
                  r.count(Outcome::Pass) + r.count(Outcome::Skipped) == static_cast<int>(r.tests.size());
  std::printf("correctness: %d/%zu tests pass\n", r.count(Outcome::Pass), r.tests.size());
  if (!all_pass) {
    std::printf("benchmarks are not run: they enter the leaderboard only when every test passes\n");
    write_outputs(r, m, results, "");
    return 1;
  }
  fs::path build_dir = in_tree_dir(bo);
  int failed = 0;
  for (const auto& bm : m.benchmarks) {
    SandboxSpec dummy;
    (void)dummy;
    std::string cmake = "/usr/bin/cmake";
    std::string cmd = cmake + " --build " + build_dir.string() + " --target " + bm.binary + " -j " + std::to_string(c.jobs) + " >/dev/null";
    if (std::system(cmd.c_str()) != 0) {
      std::printf("%s: cannot build %s\n", bm.name.c_str(), bm.binary.c_str());
      ++failed;
      continue;
    }
    fs::path bin = build_dir / m.dir / bm.binary;
    BenchResult br = run_benchmark(bin, bm, 300, repetitions);
    std::printf("%s\n", br.message.c_str());
    if (br.ok)
      r.leaderboard.push_back({bm.name, br.value, bm.order,
                               "the benchmark program's own Google Benchmark report (median of " + std::to_string(repetitions) +
                                   " repetitions, its peer in the same run), from mls-grader bench on this tree: not a "
                                   "grading figure"});
    else ++failed;
  }
  write_outputs(r, m, results, "");
  return failed ? 1 : 0;
}

/// `check-groups`: the static check of the groups' functions, then (unless --static) one variant per
/// group graded against the reference (group_check.hpp).
int cmd_check_groups(const Common& c, const std::vector<std::string>& only, bool static_only, int parallel) {
  Manifest m = manifest_of(c);
  for (const auto& g : only)
    if (std::none_of(m.groups.begin(), m.groups.end(), [&](const Group& x) { return x.name == g; }))
      throw UsageError("--group " + g + ": lab " + std::to_string(m.lab) + " has no group '" + g + "'");
  const fs::path root = root_of(c);
  const auto regions = solution_regions(m, root);
  const auto problems = check_group_functions(m, regions);
  std::printf("lab %d: %zu solution regions, %zu groups; every region in one group's functions: %s\n", m.lab,
              regions.size(), m.groups.size(), problems.empty() ? "yes" : "NO");
  for (const auto& p : problems) std::printf("  %s\n", p.c_str());
  if (!problems.empty() || static_only) return problems.empty() ? 0 : 1;
  GradeOptions go;
  go.build = build_options(c);
  go.run.jobs = c.jobs;
  go.reference = reference_for(m, go);
  const int lanes = parallel > 0 ? parallel : (c.jobs >= 2 ? 2 : 1);
  const auto verdicts = check_groups(m, root, go, only, lanes, [](const GroupVerdict& v) {
    std::fprintf(stderr, "mls-grader: %s %s\n", v.group.c_str(), v.skipped ? "skipped" : v.ok() ? "ok" : "FAILED");
  });
  std::printf("%s", format_group_verdicts(verdicts).c_str());
  return std::all_of(verdicts.begin(), verdicts.end(), [](const GroupVerdict& v) { return v.ok(); }) ? 0 : 1;
}

int cmd_gradescope(const Common& c, const std::string& out) {
  if (!c.manifest.empty()) throw UsageError("gradescope: give --lab N (an autograder is made for a lab of the course, not --manifest)");
  if (c.lab < 0) throw UsageError("gradescope: give --lab N");
  if (fs::path(out).extension() != ".zip") throw UsageError("--out " + out + ": the autograder archive must end in .zip");
  fs::path root = root_of(c);
  Manifest m = find_lab(root, c.lab);
  std::vector<ZipEntry> entries = autograder_entries(root, m);
  std::string bytes = zip_archive(entries);
  write_file_atomic(out, bytes, "mls-grader gradescope");
  std::printf("wrote %s: the autograder of lab %d (%zu files, %.1f MB): setup.sh, run_autograder, and course/ with\n"
              "the reference solution and hidden tests of labs up to %d (readable by root only once setup.sh runs).\n"
              "Upload it as the autograder of a Gradescope programming assignment (base image Ubuntu 22.04);\n"
              "each submission is graded by `mls-grader grade --lab %d%s`. Try it first in a fresh root:\n"
              "  scripts/check_gradescope.sh %d\n",
              out.c_str(), m.lab, entries.size(), static_cast<double>(bytes.size()) / 1e6, m.lab, m.lab,
              m.benchmarks.empty() ? "" : " --bench", m.lab);
  return 0;
}

int cmd_leaderboard(const std::vector<std::string>& in, const std::string& html, const std::string& md, const std::string& title) {
  std::vector<LeaderboardRow> rows;
  for (const auto& f : in) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(f));
    } catch (const nlohmann::json::exception& e) {
      throw UsageError("--in " + f + ": not valid JSON: " + e.what());
    }
    fs::path p(f);
    try {
      rows.push_back(leaderboard_row_from_results(j, p.parent_path().filename().string().empty()
                                                         ? p.stem().string()
                                                         : p.parent_path().filename().string()));
    } catch (const mls::Error& e) {
      throw UsageError("--in " + f + ": " + e.what());
    }
  }
  if (html.empty() && md.empty()) std::cout << leaderboard_markdown(rows, title);
  if (!html.empty()) write_file_atomic(html, leaderboard_html(rows, title));
  if (!md.empty()) write_file_atomic(md, leaderboard_markdown(rows, title));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-grader: isolated grading, handouts, Gradescope results and a leaderboard for mlsys-labs.\n"
               "Exit codes: 0 success; 1 tests failed / problems found; 2 usage or manifest error;\n"
               "3 the lab did not build; 4 internal error."};
  app.require_subcommand(1);
  Common c;
  auto add_common = [&](CLI::App* s, bool lab) {
    s->add_option("--root", c.root, "repository root (default: found from the current folder)");
    s->add_option("--jobs,-j", c.jobs, "tests (and build steps) run in parallel")->check(CLI::Range(1, 64));
    if (lab) {
      s->add_option("--lab", c.lab, "lab number");
      s->add_option("--manifest", c.manifest, "a lab.json to use instead of --lab (e.g. the grader's fixture lab)");
      s->add_option("--preset", c.preset, "CMake preset of in-tree builds (release, ci, asan)");
      s->add_option("--build-dir", c.build_dir,
                    "an existing, configured build folder for in-tree builds instead of build/<preset>");
    }
  };

  auto* list = app.add_subcommand("list", "labs, test groups, points, student files, benchmarks");
  add_common(list, true);

  std::string filter, results, junit;
  auto* test = app.add_subcommand("test", "build and run a lab's tests from the working tree, isolated, with the score table");
  add_common(test, true);
  test->add_option("--filter", filter, "only tests matching this Catch2 spec");
  test->add_option("--results", results, "also write Gradescope results.json here");
  test->add_option("--junit", junit, "also write JUnit XML here");

  std::string submission, batch, csv;
  bool keep_temp = false;
  auto* grade = app.add_subcommand("grade", "grade a submission (or --batch a folder of them) against a clean reference copy");
  add_common(grade, true);
  grade->add_option("--submission", submission, "folder with the student's files");
  grade->add_option("--batch", batch, "folder with one subfolder per submission");
  grade->add_option("--results", results, "results.json to write (with --batch: a folder, one <name>/results.json each)");
  grade->add_option("--junit", junit, "JUnit XML to write (single submission)");
  grade->add_option("--csv", csv, "CSV of scores (with --batch; default scores.csv)");
  grade->add_flag("--keep-temp", keep_temp, "keep the build folder (debugging)");
  bool local_verdict = false;
  bool grade_bench = false;
  int reps = 5;
  grade->add_flag("--bench", grade_bench,
                  "also measure the lab's benchmarks in the submission's build for the leaderboard: only when every "
                  "test passes, each figure only when its check agrees with the reference build");
  grade->add_option("--repetitions", reps, "benchmark repetitions with --bench; the median is reported")
      ->check(CLI::Range(1, 100));
  grade->add_flag("--local-verdict", local_verdict,
                  "judge by the student process's own report (the old, forgeable verdict; for comparisons only)");
  int parallel = 0;
  grade->add_option("--parallel", parallel,
                    "with --batch: submissions graded at once, each with its share of --jobs (default: 2 when -j >= 2, "
                    "else 1): one compiles while another links or runs its tests")
      ->check(CLI::Range(1, 64));
  std::string student_opt = "-O1";
  grade->add_option("--student-opt", student_opt,
                    "optimisation level of the submission's own files when no benchmark is measured (-O1 compiles in "
                    "about half the time of -O3, same IEEE results); 'reference' keeps the reference build's flags "
                    "(--bench always does)")
      ->check(CLI::IsMember({"-O0", "-O1", "-O2", "-O3", "-Os", "reference"}));

  auto* audit = app.add_subcommand("audit", "run the reference's tests twice with a secret salt and list the tests whose "
                                            "observations are weak (truth values only), nondeterministic or unusable");
  add_common(audit, true);
  AuditOptions audit_opt;
  std::string fail_on;
  audit->add_option("--fail-on", fail_on,
                    "also exit 1 on this kind of finding: 'nondeterministic' (an observation whose values differ "
                    "between two runs with the same salt: a pid, path, address, time or thread order in it)")
      ->check(CLI::IsMember({"nondeterministic"}));
  bool no_predictable = false;
  audit->add_flag("--no-predictable", no_predictable,
                  "skip the runs under a second salt that find the predictable tests (half the time)");
  audit->add_flag("--in-tree", audit_opt.in_tree,
                  "run the working tree's build (build/<preset> or --build-dir, as `test` does) instead of the "
                  "cached reference copy: no second build");

  std::string out;
  bool strip_previous = false;
  auto* handout = app.add_subcommand("handout", "write the student starter tree of a lab");
  add_common(handout, true);
  handout->add_option("--out", out, "folder to create (must not exist or be empty)")->required();
  handout->add_flag("--strip-previous", strip_previous, "strip the solution regions of earlier labs too");

  bool keep = false;
  auto* check = app.add_subcommand("check-handouts",
                                   "for every lab: reference passes 100%, handout builds with -Werror, its tests all fail "
                                   "with 'not implemented', nothing leaks");
  add_common(check, true);
  check->add_flag("--keep-temp", keep, "keep the handout trees");

  auto* bench = app.add_subcommand("bench", "run a lab's benchmarks (only when its tests pass) for the leaderboard");
  add_common(bench, true);
  bench->add_option("--repetitions", reps, "repetitions; the median is reported")->check(CLI::Range(1, 100));
  bench->add_option("--results", results, "write results.json with the leaderboard entries");

  std::vector<std::string> only_groups;
  bool static_only = false;
  auto* cg = app.add_subcommand("check-groups", "each test group needs only its own functions: the reference with one "
                                                "group's functions stubbed fails only that group's tests and its dependents'");
  add_common(cg, true);
  cg->add_option("--group", only_groups, "check only these groups (default: every group that names functions)");
  cg->add_flag("--static", static_only, "only check that every solution region belongs to one group (no build)");
  cg->add_option("--parallel", parallel, "variants graded at once (default: 2 when -j >= 2, else 1)")->check(CLI::Range(1, 64));

  std::string zip_out;
  auto* gs = app.add_subcommand("gradescope", "write the Gradescope autograder archive of a lab (setup.sh, run_autograder, "
                                              "the course tree the grader needs)");
  add_common(gs, true);
  gs->add_option("--out", zip_out, "the .zip to write (e.g. autograder_lab1.zip)")->required();

  std::vector<std::string> inputs;
  std::string html, md, title = "mlsys-labs leaderboard";
  auto* lb = app.add_subcommand("leaderboard", "render results.json files as a sortable HTML page and Markdown");
  lb->add_option("--in", inputs, "results.json files")->required();
  lb->add_option("--html", html, "HTML file to write");
  lb->add_option("--md", md, "Markdown file to write (stdout when neither is given)");
  lb->add_option("--title", title, "page title");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    // Path arguments are checked before any work: a usage error (2) naming the flag and the path.
    if (!*lb) validate_common(c);
    if (*handout) require_parent("--out", out);
    if (*bench) require_parent("--results", results);
    if (*gs) require_parent("--out", zip_out);
    if (*lb) {
      for (const auto& f : inputs) require_file("--in", f);
      require_parent("--html", html);
      require_parent("--md", md);
    }
    if (*list) return cmd_list(c);
    if (*test) return cmd_test(c, filter, results, junit);
    if (*grade) return cmd_grade(c, submission, batch, results, junit, csv, keep_temp, local_verdict, grade_bench, reps, parallel, student_opt);
    if (*audit) {
      audit_opt.fail_on_nondeterministic = fail_on == "nondeterministic";
      audit_opt.second_salt = !no_predictable;
      return cmd_audit(c, audit_opt);
    }
    if (*handout) return cmd_handout(c, out, strip_previous);
    if (*check) return cmd_check_handouts(c, keep);
    if (*bench) return cmd_bench(c, reps, results);
    if (*gs) return cmd_gradescope(c, zip_out);
    if (*cg) return cmd_check_groups(c, only_groups, static_only, parallel);
    if (*lb) return cmd_leaderboard(inputs, html, md, title);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "mls-grader: %s\n", e.what());
    return 2;
  } catch (const BuildFailed& e) {
    std::fprintf(stderr, "mls-grader: %s\n", e.what());
    return 3;
  } catch (const mls::Error& e) {
    std::fprintf(stderr, "mls-grader: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mls-grader: internal error: %s\n", e.what());
    return 4;
  }
  return 2;
}
