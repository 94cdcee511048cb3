#pragma once
/// Grading submissions: the differential verdicts of a submission's runs against the reference's,
/// the whole of `grade` and `grade --batch`, and the grader's timing of benchmarks. It includes
/// the steps below it (build.hpp, run.hpp, reference.hpp): `test`, `grade` and `check-handouts`
/// need only this header.
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mls/grader/build.hpp"
#include "mls/grader/differential.hpp"
#include "mls/grader/manifest.hpp"
#include "mls/grader/reference.hpp"
#include "mls/grader/result.hpp"
#include "mls/grader/run.hpp"
#include "mls/grader/sandbox.hpp"

namespace mls::grader {

/// Runs each test case of the reference plan in the student's programs with the same salt and
/// judges it: PASS only when the student's run reached the test's end with a clean exit and its
/// observation stream matches the reference's (`compare_streams`). Names only the student's
/// programs list are never run; a name they lack is FAIL. Groups judged `local_only` score 0.
LabResult run_differential(const TestPrograms& student, const Manifest& m, const Reference& ref, const RunOptions& opt);

/// The grading copy a batch shares (see `GradeOptions::batch_tree`).
struct BatchTree {
  std::filesystem::path dir;  ///< holds src/ and build/; the caller removes it after the batch
  bool made = false;
  std::map<std::string, std::string> stubs;  ///< the handout's text of each student file
};

struct GradeOptions {
  BuildOptions build;
  RunOptions run;
  bool keep_temp = false;
  /// Differential verdicts (the default). false: the student process's own verdict (the old
  /// mode; forgeable, kept for comparisons and for `test`).
  bool differential = true;
  std::uint64_t salt = 0;  ///< 0: a fresh secret salt per reference preparation
  /// A reference prepared beforehand (a batch shares one); null: prepared by grade_submission.
  std::shared_ptr<const Reference> reference;
  /// `grade --bench`: each benchmark's figure measured by the grader (`time_check`: its check
  /// test timed whole, every timed run validated against the reference), only when every test
  /// passed; the figures go to the result's leaderboard.
  bool bench = false;
  int bench_repetitions = 3;
  /// Batch mode: one grading copy reused by every submission (only the student files are
  /// rewritten; the build folder is emptied before each build). Null: a fresh copy each time.
  std::shared_ptr<BatchTree> batch_tree;
};

/// The whole of `grade`: intake, a clean reference copy with the lab's student files stubbed,
/// the student's files over it, build, run, score (differentially: see `run_differential`).
/// Never throws for what the submission does.
LabResult grade_submission(const Manifest& m, const std::filesystem::path& submission,
                           const GradeOptions& opt);

/// `grade --batch`: every submission graded against one reference (prepared here when `opt`
/// carries none), `parallel` at a time (each with its own grading copy, build uid and
/// `jobs / parallel` of the jobs: while one compiles its longest file, another links or runs
/// its tests). `on_done(index, result)` is called as each finishes (one at a time); the
/// results come back in the order of `submissions`.
std::vector<LabResult> grade_batch(const Manifest& m, const std::vector<std::filesystem::path>& submissions,
                                   const GradeOptions& opt, int parallel,
                                   const std::function<void(std::size_t, const LabResult&)>& on_done = {});

/// A benchmark's figure as the grader measures it: its `check` test case run whole, `runs` times in
/// the submission's programs and interleaved in the reference's, with one fresh secret salt, every
/// run timed by the grader's clock and every run's stream compared with the reference's. `why` is
/// non-empty (and there is no figure) when a run fails or differs.
struct TimedCheck {
  std::string why;
  double reference_s = 0, submission_s = 0;  ///< medians, seconds
  int runs = 0;
};
TimedCheck time_check(const Manifest& m, const TestPrograms& student, const Reference& ref, const Benchmark& bm,
                      const RunOptions& opt, int runs);

/// The check of a benchmark's figure: its `check` test case run in the submission's programs and
/// the reference's with a fresh secret salt (new inputs, at the benchmark's sizes), the streams
/// compared. Returns why the figure is refused ("" when the results agree or there is no check).
std::string check_benchmark(const Manifest& m, const TestPrograms& student, const Reference& ref, const Benchmark& bm,
                            const RunOptions& opt);

}  // namespace mls::grader
