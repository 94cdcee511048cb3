#pragma once
/// The reference side of differential grading: the instructor's build of a lab (cached by the
/// content of its tree) and the observation stream of each of its test cases under a salt.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/grader/build.hpp"
#include "mls/grader/differential.hpp"
#include "mls/grader/manifest.hpp"
#include "mls/grader/result.hpp"
#include "mls/grader/run.hpp"

namespace mls::grader {

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

struct GradeOptions;  // grade.hpp

/// The reference build of a lab failed: a grader or course problem, not the submission's
/// (`mls-grader grade` exits 3: the lab did not build).
struct ReferenceBuildFailed : mls::Error {
  using mls::Error::Error;
};
/// The reference build of lab `m` (cached; with the benchmark programs for `grade --bench`), not
/// yet run; throws when it does not build (a grader or course problem, not the submission's).
std::shared_ptr<Reference> built_reference(const Manifest& m, const GradeOptions& opt);
/// Builds (or reuses) the reference and runs each of its test cases twice with the salt
/// (`opt.salt`, or a fresh secret one); throws ReferenceBuildFailed when the reference does not build.
std::shared_ptr<Reference> prepare_reference(const Manifest& m, const GradeOptions& opt);
/// The runs of prepare_reference on programs already built (`ref->build`): its test plan and each
/// test case run twice with the salt; `ref->seconds` is the runs' time. `audit --in-tree` passes
/// the working tree's build.
std::shared_ptr<Reference> record_reference(const Manifest& m, const GradeOptions& opt, std::shared_ptr<Reference> ref);

}  // namespace mls::grader
