#pragma once
/// The lab manifest `labN_*/lab.json`: the one source of truth the grader, CMake and CI share.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mls::grader {

enum class Visibility { Visible, Hidden, AfterDueDate };
const char* to_string(Visibility v);

/// How `grade` judges a group's tests (manifest `judge`).
enum class Judge {
  /// The default: the test runs in the student build and in the reference build with the same
  /// secret salt; it passes only when the two observation streams match (handouts/README.md).
  Differential,
  /// Judged only in the student's own process (its Catch2 checks): shown in `test` and `grade`,
  /// worth zero points in `grade` (a verdict the student's process gives cannot be trusted).
  LocalOnly,
};

/// A scored group of test cases, chosen by a Catch2 test spec (`[tag]` or names).
struct Group {
  std::string name;
  std::string match;
  double points = 0;
  Visibility visibility = Visibility::Visible;
  /// CMake target of the Catch2 program that holds the group's tests (manifest `binary`;
  /// default: the lab's `test_binary`). A lab may have several test programs, e.g. one that is
  /// built only where CUDA is found.
  std::string binary;
  /// Tests that need a GPU (manifest `gpu`). Where the machine has no GPU, a test that reports
  /// "SKIPPED: no GPU" is SKIPPED (0 points, left out of the run's maximum), and where the
  /// group's program is not configured at all (no CUDA) the group is SKIPPED.
  bool gpu = false;
  /// Tests that run under `mpirun` (manifest `mpi`), judged like GPU tests: where the machine has
  /// no `mpirun`, a test that reports "SKIPPED: ..." is SKIPPED (left out of the maximum), and
  /// where the group's program is not configured (no MPI) the group is SKIPPED; where `mpirun`
  /// exists, a skip is a FAIL.
  bool mpi = false;
  /// GPU or MPI: a group whose tests may be SKIPPED on a machine that lacks what they need.
  bool needs_machine() const { return gpu || mpi; }
  /// Tests of code the handout gives complete (manifest `given`): they may pass in the handout.
  bool given = false;
  Judge judge = Judge::Differential;
  /// The command that runs the group's program by hand, before the program's path (manifest
  /// `run_with`, relative to the repository root; e.g. lab 5's MPI tests: "lab5_parallel/tests/run_mpi.sh 2").
  /// The feedback's "run it locally" command starts with it (rerun_command). Empty: the program alone.
  std::string run_with{};
  /// The student functions whose code the group's tests check (manifest `functions`: the names
  /// `MLS_TODO` gives their regions, e.g. "Tensor::permute"). `mls-grader check-groups` stubs only
  /// these in the reference and expects only this group's tests, and those of the groups that
  /// name it in `needs`, to fail.
  std::vector<std::string> functions{};
  /// Groups whose functions this group's tests also call (manifest `needs`): a student must finish
  /// those first. Shown in the points table of the student README.
  std::vector<std::string> needs{};
};

/// A benchmark that feeds the leaderboard.
struct Benchmark {
  std::string name;
  std::string binary;   ///< CMake target of the Google Benchmark program
  std::string filter;   ///< --benchmark_filter regex of the student's benchmark
  std::string metric;   ///< "ratio" (peer time / own time) or the name of a counter, e.g. "GFLOP/s"
  std::string peer;     ///< regex of the peer benchmark in the same program (for "ratio")
  std::string order = "desc";  ///< leaderboard order: "desc" (bigger is better) or "asc"
  /// Catch2 test spec of the lab's test program whose observations cover the benchmarked kernel
  /// on the benchmark's input sizes: `grade --bench` runs it in the submission's build and the
  /// reference's with a fresh salt and accepts the figure only when the streams agree.
  std::string check;
};

/// Optional direct build (no CMake), used by the grader's own fixture lab: sources are compiled
/// with the harness's Catch2 main and mls_common. Paths are relative to the lab folder.
struct DirectBuild {
  std::vector<std::string> sources;
  std::vector<std::string> include_dirs;
  std::vector<std::string> flags;
};

struct Manifest {
  int lab = 0;
  std::string dir;                          ///< lab folder, relative to the repo root
  std::string title;
  std::string test_binary;                  ///< CMake target of the lab's Catch2 program
  std::vector<std::string> student_files;   ///< relative to the repo root
  std::vector<std::string> hidden_files;    ///< test files left out of the handout
  double time_limit_s = 20;
  double memory_limit_mb = 4096;
  /// Limits of a submission's build (the whole build's wall clock and CPU time; the address
  /// space of each compiler process): a build past them is a clean 0 with its first errors.
  double build_time_limit_s = 900;
  /// "reference": a submission's student files always compile at the reference build's flags,
  /// whatever `--student-opt` says (a lab whose results depend on the optimisation level: at -O2
  /// and up GCC contracts a * b + c into a fused multiply-add, at -O1 it does not, so the bits of
  /// the reference's own code would differ).
  std::string student_opt;
  /// true: every test program `P` has a twin `P_graded`, the same tests compiled with
  /// MLS_GRADED_BUILD (their oracles compiled out: common/tests/include/mls/testing.hpp). The
  /// reference build makes both; a submission is linked with the twin only, so its process never
  /// holds an expected value, and its stream is compared with the reference's run of `P`.
  bool oracle_free = false;
  double build_memory_limit_mb = 4096;
  std::vector<Group> groups;
  std::vector<Benchmark> benchmarks;
  std::optional<DirectBuild> build;
  std::filesystem::path path;               ///< where the manifest was read from

  double total_points() const;
  const Group* group(const std::string& name) const;
  /// Every test program the groups need: `test_binary` first, then the other groups' binaries.
  std::vector<std::string> test_binaries() const;
  /// The program a submission is linked as in place of test program `program`: its oracle-free
  /// twin `<program>_graded` where `oracle_free`, else `program` itself.
  std::string graded_program(const std::string& program) const;
};

/// Points are counted in hundredths: a group's `points` has at most 2 decimal places (the
/// manifest's check), and so has every test's share of them.
/// `v` rounded to hundredths of a point (a sum of shares, a score to print or write).
double round_points(double v);
/// A group's `points` split among its `n` test cases: each share in hundredths, the first
/// (points x 100 mod n) shares one hundredth more than the rest, so that the shares, printed with
/// 2 decimals, add up to exactly `points` (1 point over 3 tests: 0.34, 0.33, 0.33). Empty for n = 0.
std::vector<double> split_points(double points, std::size_t n);

/// Parses and validates a manifest; throws mls::Error naming `source` and the bad field.
Manifest parse_manifest(const nlohmann::json& j, const std::string& source = "lab.json");
/// Reads and parses a manifest file.
Manifest load_manifest(const std::filesystem::path& file);
/// Every `lab*/lab.json` under `root`, sorted by lab number (duplicate numbers are an error).
std::vector<Manifest> discover_labs(const std::filesystem::path& root);
/// The manifest of lab `n`; throws naming the labs that exist when there is none.
Manifest find_lab(const std::filesystem::path& root, int n);

}  // namespace mls::grader
