// Differential verdicts (a submission's runs against the reference's), the whole of `grade` for one
// submission and for a batch, and the grader's timing of benchmarks (`grade --bench`).
#include "mls/grader/grade.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>

#include "grade_internal.hpp"
#include "mls/grader/differential.hpp"
#include "mls/grader/feedback.hpp"
#include "mls/grader/intake.hpp"
#include "mls/grader/strip.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

namespace detail {

LabResult zero_result(const Manifest& m, const std::string& why, const std::string& headline, double t) {
  LabResult r;
  r.lab = m.lab;
  r.title = m.title;
  r.headline = headline;
  r.execution_time_s = t;
  for (const auto& g : m.groups) {
    TestResult tr;
    tr.name = g.name + " (all tests)";
    tr.group = g.name;
    tr.visibility = g.visibility;
    tr.outcome = Outcome::NoResult;
    tr.max_score = g.points;
    tr.message = "not run: " + why + (headline.empty() ? "" : " (see the top of the report)");
    r.tests.push_back(tr);
  }
  return r;
}

}  // namespace detail

using namespace detail;

LabResult run_differential(const TestPrograms& student, const Manifest& m, const Reference& ref, const RunOptions& opt) {
  auto t0 = Clock::now();
  LabResult res = built_result(m);
  res.output = ref.plan.output;
  for (const auto& n : ref.plan.notes) res.output += "reference: " + n + "\n";
  ReachablePrograms local(student, opt);
  std::vector<TestResult> results(ref.plan.jobs.size());
  std::mutex cb_mu;
  for_each_parallel(ref.plan.jobs.size(), opt.jobs, [&](std::size_t i) {
    const TestJob& j = ref.plan.jobs[i];
    const ReferenceCase& rc = ref.cases[i];
    const Group& g = *m.group(j.group);
    const bool local_only = g.judge == Judge::LocalOnly;
    TestResult t;
    auto bin = local.built.find(j.program);
    if (bin == local.built.end()) {
      t.name = j.name;
      t.group = g.name;
      t.visibility = g.visibility;
      t.max_score = j.points;
      t.outcome = Outcome::NoResult;
      auto fl = student.failed.find(j.program);
      t.message = fl != student.failed.end() ? fl->second : "the test program " + j.program + " was not built";
    } else {
      // The student's stream is compared as it arrives (nothing of it is kept); a reference the
      // grader cannot judge by compares with an empty one, and its verdict is not used.
      static const ReferenceStream none;
      StreamComparator cmp(rc.ok ? rc.stream : none);
      CaseRun run = local.run(j, m, rc.salt, &cmp, student_channel_limit(rc.channel_bytes));
      t = run.result;
      const ChannelReport& ch = run.channel;
      if (ch.ended && ch.passed.empty() && ch.failed.empty() && ch.exited.empty() && t.outcome != Outcome::Pass) {
        t.outcome = Outcome::Fail;
        t.message = "the submission's test program has no test case named '" + j.name + "'";
      } else if (t.outcome == Outcome::Pass && !local_only) {
        // The student's process says PASS; the verdict is the comparison with the reference.
        if (!rc.ok) {
          t.outcome = Outcome::NoResult;
          t.message = "grader problem (not the submission's): " + rc.problem;
        } else if (strong_count(rc.stream.stream) == 0) {
          // Truth values alone can be written by anyone: such a test proves nothing.
          t.outcome = Outcome::NoResult;
          t.message = "grader problem (not the submission's): the test records only truth values (weak "
                      "observations, forgeable as \"true\"), so it gives no points until it observes a value "
                      "the code produced (mls-grader audit lists such tests)";
        } else if (std::string diff = cmp.verdict(); !diff.empty()) {
          t.outcome = Outcome::Fail;
          t.message = "differs from the reference build: " + diff;
        }
      } else if (t.outcome == Outcome::Fail && !local_only && rc.ok) {
        // The student's own checks failed too: what differed from the reference comes first
        // (in the graded twin the checks have no expected values to print), then their text.
        if (std::string diff = cmp.verdict(); !diff.empty())
          t.message = "differs from the reference build: " + diff + "\n" + t.message;
      } else if (t.outcome == Outcome::Skipped && rc.outcome != Outcome::Skipped) {
        t.outcome = Outcome::Fail;
        t.message = "the test reported a skip, but the reference build ran it";
      }
    }
    add_feedback(t, rerun_command(m, j.group, j.program, j.name, opt.preset));
    if (local_only) {
      t.max_score = 0;
      t.message = "local_only group: judged in the student's own process, 0 points in grade" +
                  std::string(t.message.empty() ? "" : "; " + t.message);
    }
    t.score = t.outcome == Outcome::Pass ? t.max_score : 0;
    results[i] = t;
    if (opt.on_result) {
      std::lock_guard<std::mutex> lk(cb_mu);
      opt.on_result(t);
    }
  });
  res.tests = ref.plan.decided;
  res.tests.insert(res.tests.end(), results.begin(), results.end());
  res.execution_time_s = since(t0);
  count_points(res, m, grading_machine(opt, ref.build.programs));
  return res;
}

namespace {

/// The grading copy of the sources: the handout of lab `m` (earlier labs as reference, lab `m`'s
/// student files as stubs, later labs and hidden tests left out). Only the student files are
/// compiled from it (`build_submission`); the rest is there for the headers they include. A lab
/// with a direct build: its folder and common/include, its student files stubbed.
void make_grading_tree(const Manifest& m, const fs::path& root, const fs::path& tree) {
  if (!m.build) {
    make_handout(root, discover_labs(root), m.lab, tree, {});
    return;
  }
  copy_reference_tree(root, m, tree);
  for (const auto& h : m.hidden_files) {
    std::error_code ec;
    fs::remove(tree / h, ec);
  }
  for (const auto& rel : m.student_files) {
    fs::path p = tree / rel;
    if (fs::exists(p)) write_file_atomic(p, strip_solutions(read_file(p), rel, "lab" + std::to_string(m.lab)).text);
  }
}

/// The folder a submission is graded in (`src/`: the grading copy with its files, `build/`:
/// empty): a fresh one, or the batch's, where only the student files that change are rewritten.
fs::path grading_copy(const Manifest& m, const GradeOptions& opt, const IntakeReport& in) {
  BatchTree* bt = opt.batch_tree.get();
  fs::path dir = bt ? bt->dir : make_temp_dir("mls-grader");
  fs::path tree = dir / "src";
  std::map<std::string, std::string> own_stubs;
  auto& stubs = bt ? bt->stubs : own_stubs;
  if (!bt || !bt->made) {
    make_grading_tree(m, opt.build.root, tree);
    for (const auto& rel : m.student_files)
      if (fs::exists(tree / rel)) stubs[rel] = read_file(tree / rel);
    if (bt) bt->made = true;
  }
  std::map<std::string, std::string> want = stubs;
  for (const auto& f : in.accepted) want[f.rel] = f.text;
  for (const auto& [rel, text] : want) {
    std::error_code ec;
    if (fs::exists(tree / rel, ec) && read_file(tree / rel) == text) continue;
    fs::create_directories((tree / rel).parent_path());
    write_file_atomic(tree / rel, text);
  }
  remove_tree(dir / "build");
  fs::create_directories(dir / "build");
  return dir;
}

/// The reference a grading compares with and builds on (prepared when the options carry none;
/// the old verdict mode needs only its build).
std::shared_ptr<const Reference> reference_of(const Manifest& m, const GradeOptions& opt) {
  if (opt.reference) return opt.reference;
  if (opt.differential) return prepare_reference(m, opt);
  return built_reference(m, opt);
}

/// Nothing the student sees names the instructor's folders: the grading copy's paths become
/// relative, the checkout's and the submission's are replaced by placeholders.
LabResult redact_result(LabResult r, const GradeOptions& opt, const fs::path& submission, const fs::path& temp) {
  std::vector<std::pair<std::string, std::string>> pairs = {
      {opt.build.root.string() + "/", ""}, {opt.build.root.string(), "<course>"}, {submission.string(), "<submission>"}};
  if (!temp.empty()) {
    pairs.push_back({(temp / "src").string() + "/", ""});
    pairs.push_back({(temp / "build").string(), "<build>"});
    pairs.push_back({temp.string(), "<grading>"});
  }
  r.output = redact(std::move(r.output), pairs);
  r.headline = redact(std::move(r.headline), pairs);
  for (auto& t : r.tests) {
    t.message = redact(std::move(t.message), pairs);
    t.name = redact(std::move(t.name), pairs);
  }
  return r;
}

/// The submission's files, or why it is rejected (errors) and what was left out (notes).
IntakeReport take_in(const Manifest& m, const fs::path& submission) {
  IntakeReport in;
  try {
    in = intake_submission(submission, m);
  } catch (const std::exception& e) {
    in.errors.push_back(std::string("intake failed: ") + e.what());
  }
  return in;
}

/// The build's options for one submission: its own folder and its batch's folder are hidden.
BuildOptions submission_build_options(const GradeOptions& opt, const fs::path& submission) {
  BuildOptions bo = opt.build;
  bo.hide.push_back(submission);
  // The batch folder (the other submissions), unless it is a top-level folder of the system.
  if (submission.parent_path().has_relative_path() && submission.parent_path().parent_path() != "/")
    bo.hide.push_back(submission.parent_path());
  return bo;
}

/// grade --bench: every benchmark of the lab measured in the submission's build, when every test
/// passed and its check agrees with the reference; the figures go to the leaderboard.
void add_benchmarks(const Manifest& m, const TestPrograms& programs, const Reference& ref, const GradeOptions& opt,
                    LabResult& r) {
  if (m.benchmarks.empty()) return;
  // A test the reference itself cannot judge (a grader problem, said so in its message) does not
  // hold the submission's figures back; every other test must pass.
  const int pass = r.count(Outcome::Pass), skipped = r.count(Outcome::Skipped);
  const auto grader_problems = std::count_if(r.tests.begin(), r.tests.end(), [](const TestResult& t) {
    return t.outcome == Outcome::NoResult && starts_with(t.message, "grader problem");
  });
  if (pass == 0 || pass + skipped + grader_problems != static_cast<long>(r.tests.size())) {
    r.output += "benchmarks: not run (a figure enters the leaderboard only when every test passes)\n";
    return;
  }
  for (const auto& bm : m.benchmarks) {
    // The figure is the grader's own measurement: never the benchmark program's report, which is
    // the student's code's own words (`mls-grader bench` still runs it, for the student).
    TimedCheck tc = time_check(m, programs, ref, bm, opt.run, std::max(3, opt.bench_repetitions));
    if (!tc.why.empty() || tc.submission_s <= 0) {
      r.output += "benchmark " + bm.name + ": no figure: " + (tc.why.empty() ? "no timing" : tc.why) + "\n";
      continue;
    }
    const double value = tc.reference_s / tc.submission_s;
    // The leaderboard's name says what the figure compares with: "add_vs_memcpy" (the Google
    // Benchmark figure of `mls-grader bench`) becomes "add_vs_reference".
    const std::string figure = bm.name.substr(0, bm.name.rfind("_vs_")) + "_vs_reference";
    char line[400];
    std::snprintf(line, sizeof line,
                  "benchmark %s: %.3fx the reference solution's speed (check '%s': %.3f s vs the reference's %.3f s, "
                  "median of %d validated runs, grader clock)\n",
                  figure.c_str(), value, bm.check.c_str(), tc.submission_s, tc.reference_s, tc.runs);
    r.output += line;
    r.leaderboard.push_back({figure, value, "desc",
                             "the grader's clock: the whole run of the check test '" + bm.check +
                                 "' on fresh salted inputs, every timed run's results validated against the reference "
                                 "build; the reference solution's time over the submission's (median of " +
                                 std::to_string(tc.runs) + " runs each, interleaved; above 1 is faster than the "
                                 "reference)"});
  }
}

/// Runs a built submission's tests and scores them (differentially unless the options say not).
LabResult run_submission(const TestPrograms& programs, const Manifest& m, const Reference& ref, const GradeOptions& opt) {
  LabResult r = opt.differential ? run_differential(programs, m, ref, opt.run) : run_lab_tests(programs, m, opt.run);
  r.built = true;
  if (opt.bench) add_benchmarks(m, programs, ref, opt, r);
  return r;
}

}  // namespace

LabResult grade_submission(const Manifest& m, const fs::path& submission, const GradeOptions& opt) {
  auto t0 = Clock::now();
  fs::path abs_sub = fs::absolute(submission).lexically_normal();
  std::string raw_name = abs_sub.filename().string();
  if (raw_name.empty()) raw_name = abs_sub.parent_path().filename().string();
  fs::path temp;
  // The reference this grading compares with: its build says which programs are not configured
  // (the machine's part of the maximum, with the GPU and mpirun probes).
  std::shared_ptr<const Reference> ref = opt.reference;
  std::string notes;  // the intake's, once, after the headline and before the run's own output
  auto finish = [&](LabResult r) {
    r.submission = display_name(raw_name, 120);
    r.execution_time_s = since(t0);
    r.isolation = isolation_line();
    r.output = notes + r.output;
    count_points(r, m, grading_machine(opt.run, ref ? ref->build.programs : TestPrograms{}));
    if (!temp.empty() && !opt.keep_temp && !opt.batch_tree) remove_tree(temp);
    return redact_result(std::move(r), opt, abs_sub, temp);
  };
  IntakeReport in = take_in(m, submission);
  for (const auto& n : in.notes) notes += "intake: " + n + "\n";
  if (!in.ok()) {
    std::string why = "The submission was rejected:\n";
    for (const auto& e : in.errors) why += "  " + e + "\n";
    return finish(zero_result(m, "the submission was rejected", why, since(t0)));
  }
  try {
    ref = reference_of(m, opt);
    temp = grading_copy(m, opt, in);
    auto tb = Clock::now();
    BuildOptions bo = submission_build_options(opt, abs_sub);
    bo.benchmarks = opt.bench;
    BuildResult b = build_submission(m, temp / "src", temp / "build", ref->build.recipe, bo);
    if (!b.ok) {
      // The compiler's first errors, once, at the top (without them: the end of the log).
      const std::string errors = first_build_errors(b.log);
      return finish(zero_result(m, "the submission did not build",
                                "The submission did not build. " +
                                    (errors.empty() ? summarize_build_log(b.log, 3000)
                                                    : "The compiler's first errors:\n" + sanitize_text(errors, 4000)),
                                since(t0)));
    }
    double build_s = since(tb);
    LabResult r;
    try {
      r = run_submission(b.programs, m, *ref, opt);
    } catch (const std::exception& e) {
      r = zero_result(m, "grader error (not the submission's)", std::string("grader error: ") + e.what() + "\n", since(t0));
    }
    char timing[200];
    std::snprintf(timing, sizeof timing, "grading: build %.1f s (student files only), tests %.1f s; grader peak memory %.0f MB\n",
                  build_s, since(tb) - build_s, grader_peak_mb());
    r.output += timing;
    return finish(r);
  } catch (const std::exception& e) {
    return finish(zero_result(m, "grader error (not the submission's)", std::string("grader error: ") + e.what() + "\n",
                              since(t0)));
  }
}

std::vector<LabResult> grade_batch(const Manifest& m, const std::vector<fs::path>& submissions, const GradeOptions& opt,
                                   int parallel, const std::function<void(std::size_t, const LabResult&)>& on_done) {
  std::vector<LabResult> results(submissions.size());
  if (submissions.empty()) return results;
  GradeOptions shared = opt;
  shared.reference = reference_of(m, opt);  // one reference (and one salt) for the whole batch
  const int lanes = std::clamp(parallel, 1, static_cast<int>(submissions.size()));
  // Each lane: its own grading copy, build uid and share of the jobs.
  std::vector<GradeOptions> lane(lanes, shared);
  for (auto& l : lane) {
    l.batch_tree = std::make_shared<BatchTree>();
    l.batch_tree->dir = make_temp_dir("mls-grader-batch");
    l.build.build_uid = reserve_sandbox_uid();
    l.build.jobs = std::max(1, opt.build.jobs / lanes);
    l.run.jobs = std::max(1, opt.run.jobs / lanes);
  }
  struct RemoveLanes {
    const std::vector<GradeOptions>& lane;
    bool keep;
    ~RemoveLanes() {
      if (!keep)
        for (const auto& l : lane) remove_tree(l.batch_tree->dir);
    }
  } remove_lanes{lane, opt.keep_temp};
  // One thread per lane; each submission takes a free lane for its grading and gives it back.
  std::mutex mutex;
  std::vector<const GradeOptions*> free_lanes;
  for (const auto& l : lane) free_lanes.push_back(&l);
  for_each_parallel(submissions.size(), lanes, [&](std::size_t i) {
    const GradeOptions* lo;
    {
      std::lock_guard<std::mutex> lock(mutex);
      lo = free_lanes.back();
      free_lanes.pop_back();
    }
    LabResult r;
    try {
      r = grade_submission(m, submissions[i], *lo);
    } catch (const std::exception& e) {  // grade_submission does not throw for a submission
      r = zero_result(m, "grader error (not the submission's)", std::string("grader error: ") + e.what() + "\n", 0);
      count_points(r, m, grading_machine(lo->run, shared.reference->build.programs));
    }
    std::lock_guard<std::mutex> lock(mutex);
    results[i] = std::move(r);
    if (on_done) on_done(i, results[i]);
    free_lanes.push_back(lo);
  });
  return results;
}

TimedCheck time_check(const Manifest& m, const TestPrograms& student, const Reference& ref, const Benchmark& bm,
                      const RunOptions& opt, int runs) {
  TimedCheck t;
  if (bm.check.empty()) {
    t.why = "the benchmark names no check test (a figure is the grader's timing of a check it validates)";
    return t;
  }
  auto job = std::find_if(ref.plan.jobs.begin(), ref.plan.jobs.end(), [&](const TestJob& j) { return j.name == bm.check; });
  if (job == ref.plan.jobs.end()) {
    t.why = "grader problem: the check '" + bm.check + "' is no test case of the reference";
    return t;
  }
  // The expected results come from the reference's own test program (its tolerances are the
  // oracles'); the reference is timed as the submission runs: its oracle-free twin where the lab
  // has them, so neither side's time includes the tests' oracles.
  ReachablePrograms theirs(ref.build.programs, opt, "bench-ref-"), mine(student, opt, "bench-");
  ReachablePrograms theirs_timed(graded_programs(m, ref.build.programs), opt, "bench-reft-");
  if (!mine.built.count(job->program)) {
    t.why = "the test program " + job->program + " was not built";
    return t;
  }
  const std::uint64_t salt = fresh_salt();
  CaseRun a, b;
  std::optional<ReferenceMerger> merger;
  theirs.record_twice(*job, m, salt, a, b, merger);
  std::string problem;
  std::optional<ReferenceStream> expected;
  if (a.result.outcome == Outcome::Pass && b.result.outcome == Outcome::Pass) expected = merger->result(problem);
  if (!expected) {
    t.why = "grader problem: the reference does not give one result for the check '" + bm.check + "' " + problem;
    return t;
  }
  const std::size_t limit = student_channel_limit(std::max(a.channel_bytes, b.channel_bytes));
  if (!theirs_timed.built.count(job->program)) {
    t.why = "grader problem: the reference build has no graded program for " + job->program;
    return t;
  }
  std::vector<double> theirs_s, mine_s;
  // The reference's runs interleaved with the submission's: each one timed by the grader's clock
  // (the whole process, start to exit) and each one's results compared with the expected ones, so
  // the figure is the time of invocations whose results are known to be right.
  for (int i = 0; i < std::max(1, runs); ++i) {
    StreamComparator again(*expected);
    CaseRun r = theirs_timed.run(*job, m, salt, &again, limit);
    if (r.result.outcome == Outcome::Pass && again.verdict().empty()) theirs_s.push_back(r.result.wall_s);
    StreamComparator cmp(*expected);
    CaseRun got = mine.run(*job, m, salt, &cmp, limit);
    if (got.result.outcome != Outcome::Pass) {
      t.why = "the check '" + bm.check + "' does not pass on fresh inputs (" + to_string(got.result.outcome) + ")";
      return t;
    }
    if (std::string diff = cmp.verdict(); !diff.empty()) {
      t.why = "the benchmarked code's result differs from the reference build's (check '" + bm.check +
              "', fresh inputs, timed run " + std::to_string(i + 1) + "): " + diff;
      return t;
    }
    mine_s.push_back(got.result.wall_s);
  }
  if (theirs_s.empty()) {
    t.why = "grader problem: no timed run of the reference passed the check '" + bm.check + "'";
    return t;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  t.reference_s = median(theirs_s);
  t.submission_s = median(mine_s);
  t.runs = static_cast<int>(mine_s.size());
  return t;
}

std::string check_benchmark(const Manifest& m, const TestPrograms& student, const Reference& ref, const Benchmark& bm,
                            const RunOptions& opt) {
  if (bm.check.empty()) return "";
  return time_check(m, student, ref, bm, opt, 1).why;
}

}  // namespace mls::grader
