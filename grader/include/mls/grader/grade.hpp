#pragma once
/// Building a lab and running its tests isolated: what `test`, `grade` and `check-handouts` do.
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mls/grader/differential.hpp"
#include "mls/grader/manifest.hpp"
#include "mls/grader/result.hpp"
#include "mls/grader/sandbox.hpp"

namespace mls::grader {

struct BuildOptions {
  std::filesystem::path root;          ///< reference repository root (common/, labs)
  std::string preset = "release";      ///< for in-tree builds
  /// An existing, configured build folder for in-tree builds (empty: `<root>/build/<preset>`).
  std::filesystem::path build_dir;
  bool werror = false;
  int jobs = 2;
  double time_limit_s = 900;
  std::filesystem::path harness_lib;   ///< Catch2 main + listener archive (direct builds)
  std::filesystem::path common_lib;    ///< mls_common archive (direct builds)
  /// Where the reference builds are cached (`<cache_dir>/reference`; empty: the grader's build).
  std::filesystem::path cache_dir;
  /// Folders no sandboxed step may see, beyond what the isolation hides anyway (the checkout
  /// `root` is always added; the submission's own folder is added by `grade_submission`).
  std::vector<std::filesystem::path> hide;
  /// The tree is the instructor's own (the reference build): built as the grader's user with
  /// rlimits only, hidden tests visible to every step. Never for a tree holding student files.
  bool trusted = false;
  /// Also the manifest's benchmark programs: configured and built in the reference build (so its
  /// recipe has them; a separate cache entry), linked in a submission's build (`grade --bench`).
  bool benchmarks = false;
  /// The sandbox uid of every build step (a batch keeps one, so each build can update the files
  /// the previous one left); null: reserved per build.
  std::shared_ptr<SandboxUid> build_uid;
  /// The optimisation level of a submission's own files in a build without benchmarks (e.g.
  /// "-O1": they compile in about half the time of -O3; IEEE results are the same, as no
  /// fast-math flag is used); "" keeps the reference's flags. A `grade --bench` build always
  /// keeps them, so a figure is measured on the code as the reference builds it.
  std::string student_opt = "-O1";
  /// A CMake build of a tree (not the checkout): its C++ optimisation flag (MLS_RELEASE_OPT)
  /// instead of -O3 when not empty (check-handouts builds a handout at -O1: it only checks that
  /// the tree builds with -Werror and that every test fails cleanly).
  std::string release_opt;
};

/// The test programs of a build (CMake target -> binary), and why the others are missing.
struct TestPrograms {
  std::map<std::string, std::filesystem::path> built;
  /// Targets the build configuration does not define (e.g. the CUDA test program where CUDA was
  /// not found), with why.
  std::map<std::string, std::string> not_configured;
  /// Targets that exist but did not build, with the summary of the build log.
  std::map<std::string, std::string> failed;
};

/// One command of a build as Ninja runs it: a shell line, run in the build folder.
struct BuildStep {
  enum class Kind { Compile, Archive, Link, Other };
  Kind kind = Kind::Other;
  std::string line;
  std::string source;               ///< Compile: the source, relative to the tree ("" when outside it)
  std::string output;               ///< relative to the build folder
  std::vector<std::string> inputs;  ///< Archive, Link: the build-folder-relative paths it reads
};
/// `line` (a compile command) with its optimisation flags (-O...) replaced by `level`, or with
/// `level` added after the compiler when it has none; unchanged when `level` is empty.
std::string with_opt_level(const std::string& line, const std::string& level);
/// Classifies one command line (`src`: the tree the line names).
BuildStep parse_build_step(const std::string& line, const std::filesystem::path& src);

/// How the reference build made its test programs: the commands a submission's build replays.
struct BuildRecipe {
  std::filesystem::path src;    ///< the tree the commands name
  std::filesystem::path build;  ///< the build folder they ran in (its outputs are reused)
  std::vector<BuildStep> steps; ///< every step of every test program, in build order, each once
  std::map<std::string, std::string> programs;  ///< test program -> its output (relative)
};
/// The recipe of a configured and built CMake/Ninja folder (`ninja -t commands` of each program).
BuildRecipe ninja_recipe(const std::filesystem::path& src, const std::filesystem::path& build_dir,
                         const TestPrograms& programs);
/// The recipe of a lab with a `build` section (the grader's fixture lab): one compiler call per
/// source, one link with the grader's harness and common archives.
BuildRecipe direct_recipe(const Manifest& m, const std::filesystem::path& tree);
nlohmann::json recipe_to_json(const BuildRecipe& r);
BuildRecipe recipe_from_json(const nlohmann::json& j);

struct BuildResult {
  bool ok = false;                  ///< the lab's main test program (`test_binary`) was built
  std::filesystem::path binary;     ///< that program
  TestPrograms programs;            ///< every test program the manifest's groups need
  std::string log;          ///< capped; the first compiler errors first
  double wall_s = 0;
  BuildRecipe recipe;       ///< the reference build's commands (build_reference, direct builds)
};

/// The first error lines of a compiler log, then its tail (what a student needs to see).
std::string summarize_build_log(std::string_view log, std::size_t max_bytes = 6000);

/// Builds the lab's test programs from `tree` (a repository copy or the repository itself), into
/// `build_dir`, from scratch: the instructor's builds (the reference, the checkout) and
/// check-handouts' handout build. Real labs: CMake configure + build of the test targets only
/// (`test_binary`, then each other group `binary`: one the configuration does not define, e.g.
/// the CUDA tests without CUDA, is recorded in `programs.not_configured`, one that fails in
/// `programs.failed`); labs with a `build` section: every step of `direct_recipe`. A copy's build
/// runs sandboxed (time limit, capped log). `ok` is about `test_binary` only.
BuildResult build_lab(const Manifest& m, const std::filesystem::path& tree,
                      const std::filesystem::path& build_dir, const BuildOptions& opt);

/// The programs a submission runs, under the names of the test programs they stand in for: in an
/// oracle-free lab each program's graded twin `P_graded` as `P` (others as they are; a program
/// without its twin is left out), else `programs` itself. A reference build's twins are what the
/// grader times next to a submission's (the same program, without the tests' oracles).
TestPrograms graded_programs(const Manifest& m, const TestPrograms& programs);

/// A submission's build, the one way a grading copy is built: the reference build's compile
/// steps of the lab's student files are rerun on the grading copy `tree` (sandboxed, no compiler
/// cache), then the archive and link steps that read them, with every other input (objects of
/// the lab's other files, tests, earlier labs, the harness) copied from the reference build
/// folder into `build_dir`. Nothing is shared with another submission's build.
BuildResult build_submission(const Manifest& m, const std::filesystem::path& tree,
                             const std::filesystem::path& build_dir, const BuildRecipe& recipe,
                             const BuildOptions& opt);

struct RunOptions {
  int jobs = 1;
  std::string filter;       ///< extra Catch2 spec; only tests matching it are run
  std::function<void(const TestResult&)> on_result;  ///< progress callback (any thread)
  std::optional<bool> gpu_present;  ///< does this machine have a GPU? (default: machine_has_gpu())
};

/// Lists the test cases matching `spec` through the harness channel (the listing is done by the
/// harness inside the sandbox, so a student's prints cannot forge it). Throws mls::Error when
/// the binary has no harness listener or the listing fails.
std::vector<std::string> list_tests(const std::filesystem::path& binary, const std::string& spec,
                                    const Manifest& m);

/// One test case to run: its name, its group, its share of the group's points, its program.
struct TestJob {
  std::string name;
  std::string group;
  double points = 0;
  std::string program;  ///< CMake target
};
/// What a run will do, from the programs' listings: the jobs, the entries decided without a run
/// (groups whose program is missing, groups that match nothing), and the manifest notes.
struct TestPlan {
  std::vector<TestJob> jobs;
  std::vector<TestResult> decided;
  std::vector<std::string> notes;
  std::string output;
};
TestPlan plan_tests(const TestPrograms& programs, const Manifest& m, const RunOptions& opt);

/// Runs every test case of the lab, each isolated, each from its group's test program; scores
/// them by group. Disagreements of manifest and programs are reported in `notes` (and in the
/// result's output): a test case in no group or in two groups, a group that matches no test case,
/// a group whose program the build does not define (except GPU groups: those are SKIPPED).
/// GPU groups: see `SkipPolicy` (Allow without a GPU, Refuse with one).
LabResult run_lab_tests(const TestPrograms& programs, const Manifest& m, const RunOptions& opt,
                        std::vector<std::string>* notes = nullptr);
/// The same with one program: `binary` is the lab's `test_binary` (other programs: not built).
LabResult run_lab_tests(const std::filesystem::path& binary, const Manifest& m, const RunOptions& opt,
                        std::vector<std::string>* notes = nullptr);

/// Whether a note of `run_lab_tests` is expected in a handout: a group that is not visible
/// matches no test case (its tests are in `hidden_files`). Every other note is a manifest problem.
bool note_expected_in_handout(const Manifest& m, const std::string& note);

/// What check-handouts concludes from one run.
struct HandoutJudgement {
  std::vector<std::string> problems;  ///< each one fails the check
  std::vector<std::string> notes;     ///< said, not failing (e.g. GPU tests it cannot prove here)
};
/// The reference: every test PASSes, except GPU tests SKIPPED on a machine without a GPU (noted:
/// they are not proven); every note of the run is a manifest problem.
HandoutJudgement judge_reference(const Manifest& m, const LabResult& ref, const std::vector<std::string>& notes);
/// The handout: every test is NOT_IMPLEMENTED, except tests of `given` groups (PASS accepted),
/// GPU tests SKIPPED without a GPU (noted, not proven), and the placeholder entry of a group that
/// is not visible (its tests are not in the handout).
HandoutJudgement judge_handout(const Manifest& m, const LabResult& handout);

// ---- differential grading (handouts/README.md, "How a verdict is reached") ----------------------

/// The reference side of one test case under the grading's salt.
struct ReferenceCase {
  bool ok = false;               ///< the reference passed twice and its stream is usable
  Outcome outcome = Outcome::NoResult;
  std::uint64_t salt = 0;        ///< the salt both builds run it with (0: the test needs seed 0)
  ReferenceStream stream;
  std::string problem;           ///< why not ok (a course or grader problem, never the student's)
  std::size_t channel_bytes = 0; ///< the larger of its two runs' channels (a submission's limit derives from it)
};
/// The reference build, its test plan (the only source of test names and groups) and the
/// reference stream of every test, for one salt. A batch prepares it once.
struct Reference {
  BuildResult build;
  TestPlan plan;
  std::uint64_t salt = 0;
  std::vector<ReferenceCase> cases;  ///< one per plan.jobs
  double seconds = 0;
};

/// The folder of cached reference builds: `<cache_dir or the grader's build>/grader-cache/reference`.
std::filesystem::path reference_cache_dir(const BuildOptions& opt);
/// Builds the instructor's full tree of lab `m` (every reference file, hidden tests included),
/// trusted, into the reference cache keyed by the tree's content hash: a later call with the
/// same sources reuses it.
BuildResult build_reference(const Manifest& m, const BuildOptions& opt);

struct GradeOptions;
/// The reference build of lab `m` (cached; with the benchmark programs for `grade --bench`), not
/// yet run; throws when it does not build (a grader or course problem, not the submission's).
std::shared_ptr<Reference> built_reference(const Manifest& m, const GradeOptions& opt);
/// Builds (or reuses) the reference and runs each of its test cases twice with the salt
/// (`opt.salt`, or a fresh secret one); throws mls::Error when the reference does not build.
std::shared_ptr<Reference> prepare_reference(const Manifest& m, const GradeOptions& opt);
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

/// Copies the reference repository parts needed to build lab `m` (root files, common/, labs up
/// to m.lab) into `dest`; for a lab with a direct build, only its folder.
void copy_reference_tree(const std::filesystem::path& root, const Manifest& m,
                         const std::filesystem::path& dest);

/// A problem with a test case's name, or "" when there is none: CTest splits a discovered name
/// at ';', so such a test runs under a name Catch2 cannot match (and passes vacuously there); and
/// Catch2 v2 cannot be asked for exactly one test whose name starts or ends with '*' (a wildcard),
/// starts with "exclude:" (an exclusion) or with or ends with a space (trimmed).
std::string test_name_problem(const std::string& name, const std::string& binary);

/// A test name as Catch2 v2 compares it: lower case, outer spaces trimmed. Two test cases with the
/// same normalised name cannot be run one at a time.
std::string normalised_test_name(std::string_view name);

}  // namespace mls::grader
