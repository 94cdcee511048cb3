#pragma once
/// Running a lab's test cases isolated, one sandboxed process per test case, with the verdict of
/// the student's own process: the listing and the plan of a run (which the reference's runs use
/// too), `test`, and what `check-handouts` concludes.
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "mls/grader/build.hpp"
#include "mls/grader/manifest.hpp"
#include "mls/grader/result.hpp"

namespace mls::grader {

struct RunOptions {
  int jobs = 1;
  std::string filter;       ///< extra Catch2 spec; only tests matching it are run
  std::function<void(const TestResult&)> on_result;  ///< progress callback (any thread)
  std::optional<bool> gpu_present;  ///< does this machine have a GPU? (default: machine_has_gpu())
  /// The preset of the student's own build, in the command a failed test's feedback names
  /// (`rerun_command`).
  std::string preset = "release";
};

/// What the grading machine offers the groups that need one (`Group::needs_machine`), and so
/// which groups count in a run's maximum: the same for every submission graded on it.
struct Machine {
  bool gpu = false;  ///< a GPU (`RunOptions::gpu_present`, else `machine_has_gpu()`)
  bool mpi = false;  ///< `mpirun` (`machine_has_mpirun()`)
  /// The test programs the build configuration does not define (no CUDA, no MPI found):
  /// `TestPrograms::not_configured` of the reference build (of the tree, for `test`).
  std::set<std::string> not_configured;
  /// Why group `g` cannot be run here ("" when it can): it needs a GPU or `mpirun` the machine
  /// lacks, or its program is not configured. Such a group's points are not counted.
  std::string why_not(const Group& g) const;
  bool counts(const Group& g) const { return why_not(g).empty(); }
};
/// This machine, as a run with `opt` sees it, for the programs `programs` of a build.
Machine grading_machine(const RunOptions& opt, const TestPrograms& programs);
/// Marks every test of `r` counted or not by its group (`Machine::counts`), whatever the test
/// did: a test that does not count scores 0, and one that was not SKIPPED says why it does not
/// count. So the maximum (`LabResult::max_score`) depends on the manifest and the machine only,
/// never on the submission (one that does not build has the maximum of one that passes).
void count_points(LabResult& r, const Manifest& m, const Machine& here);

/// Lists the test cases matching `spec` through the harness channel (the listing is done by the
/// harness inside the sandbox, so a student's prints cannot forge it). Throws mls::Error when
/// the binary has no harness listener or the listing fails.
std::vector<std::string> list_tests(const std::filesystem::path& binary, const std::string& spec,
                                    const Manifest& m);

/// One test case to run: its name, its group, its share of the group's points (`split_points`),
/// its program.
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

/// A problem with a test case's name, or "" when there is none: CTest splits a discovered name
/// at ';', so such a test runs under a name Catch2 cannot match (and passes vacuously there); and
/// Catch2 v2 cannot be asked for exactly one test whose name starts or ends with '*' (a wildcard),
/// starts with "exclude:" (an exclusion) or with or ends with a space (trimmed).
std::string test_name_problem(const std::string& name, const std::string& binary);

/// A test name as Catch2 v2 compares it: lower case, outer spaces trimmed. Two test cases with the
/// same normalised name cannot be run one at a time.
std::string normalised_test_name(std::string_view name);

}  // namespace mls::grader
