#pragma once
/// Building a lab and running its tests isolated: what `test`, `grade` and `check-handouts` do.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mls/grader/manifest.hpp"
#include "mls/grader/result.hpp"

namespace mls::grader {

struct BuildOptions {
  std::filesystem::path root;          ///< reference repository root (common/, labs)
  std::string preset = "release";      ///< for in-tree builds
  bool werror = false;
  int jobs = 2;
  double time_limit_s = 900;
  std::filesystem::path harness_lib;   ///< Catch2 main + listener archive (direct builds)
  std::filesystem::path common_lib;    ///< mls_common archive (direct builds)
  std::filesystem::path cache_dir;     ///< object cache of non-student sources (direct builds)
};

struct BuildResult {
  bool ok = false;
  std::filesystem::path binary;
  std::string log;          ///< capped; the first compiler errors first
  double wall_s = 0;
};

/// The first error lines of a compiler log, then its tail (what a student needs to see).
std::string summarize_build_log(std::string_view log, std::size_t max_bytes = 6000);

/// Builds the lab's test program from `tree` (a repository copy or the repository itself), into
/// `build_dir`. Real labs: CMake configure + build of the test target only; labs with a `build`
/// section: a direct compiler invocation. The build runs sandboxed (time limit, capped log).
BuildResult build_lab(const Manifest& m, const std::filesystem::path& tree,
                      const std::filesystem::path& build_dir, const BuildOptions& opt);

struct RunOptions {
  int jobs = 1;
  std::string filter;       ///< extra Catch2 spec; only tests matching it are run
  std::function<void(const TestResult&)> on_result;  ///< progress callback (any thread)
};

/// Lists the test cases matching `spec` through the harness channel (the listing is done by the
/// harness inside the sandbox, so a student's prints cannot forge it). Throws mls::Error when
/// the binary has no harness listener or the listing fails.
std::vector<std::string> list_tests(const std::filesystem::path& binary, const std::string& spec,
                                    const Manifest& m);

/// Runs every test case of the lab, each isolated; scores them by group. Tests not in exactly
/// one group are reported in `notes`.
LabResult run_lab_tests(const std::filesystem::path& binary, const Manifest& m, const RunOptions& opt,
                        std::vector<std::string>* notes = nullptr);

struct GradeOptions {
  BuildOptions build;
  RunOptions run;
  bool keep_temp = false;
};

/// The whole of `grade`: intake, a clean reference copy with the lab's student files stubbed,
/// the student's files over it, build, run, score. Never throws for what the submission does.
LabResult grade_submission(const Manifest& m, const std::filesystem::path& submission,
                           const GradeOptions& opt);

/// Copies the reference repository parts needed to build lab `m` (root files, common/, labs up
/// to m.lab) into `dest`; for a lab with a direct build, only its folder.
void copy_reference_tree(const std::filesystem::path& root, const Manifest& m,
                         const std::filesystem::path& dest);

}  // namespace mls::grader
