#pragma once
/// The Gradescope autograder of a lab (`mls-grader gradescope --lab N --out FILE.zip`;
/// handouts/README.md, "Gradescope"): an archive with `setup.sh` and `run_autograder` at its root
/// and the course tree the grader needs in `course/`. setup.sh (run once, as root, when Gradescope
/// builds the image) makes `course/` readable by root only, installs the packages, builds
/// mls-grader and the lab's reference (cached in the image) and grades the handout's stubs once
/// as a check; run_autograder grades /autograder/submission with the same isolation and
/// differential verdicts as `mls-grader grade` and writes /autograder/results/results.json.
#include <filesystem>
#include <string>
#include <vector>

#include "mls/grader/manifest.hpp"
#include "mls/grader/zip.hpp"

namespace mls::grader {

/// The folder of the archive (and of /autograder/source) that holds the course tree.
inline constexpr const char* kAutograderCourseDir = "course";

/// The course files an autograder of lab `m` holds, relative to `root`, sorted: what a reference
/// build of the lab needs (reference_tree_parts: the root's files, common/, labs up to m.lab, the
/// lab's hidden tests included), grader/ without its own tests, and scripts/. Names starting with
/// '.', build/ folders, __pycache__ and symbolic links are left out.
std::vector<std::string> autograder_course_files(const std::filesystem::path& root, const Manifest& m);

/// setup.sh of lab `m`'s autograder (bash; lab number and folders written in).
std::string autograder_setup_script(const std::filesystem::path& root, const Manifest& m);

/// run_autograder of lab `m`'s autograder (bash). `grade --bench` where the lab has benchmarks
/// (the leaderboard). A grading that ends in a grader or course problem (exit 2 or more) still
/// writes a results.json that says so and tells the student it is not their submission's fault.
/// $MLS_AUTOGRADER_HOME replaces /autograder (for tests).
std::string autograder_run_script(const Manifest& m);

/// Every entry of the archive: setup.sh, run_autograder (executable), README.md (what it is, for
/// the instructor) and course/<file> for each course file (mode kept: executable or not).
std::vector<ZipEntry> autograder_entries(const std::filesystem::path& root, const Manifest& m);

}  // namespace mls::grader
