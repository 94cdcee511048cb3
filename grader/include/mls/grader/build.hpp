#pragma once
/// Building a lab's test programs: the instructor's builds (CMake, or a lab's direct compiler
/// calls) and a submission's build, which replays the reference build's recipe on its files.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mls/grader/manifest.hpp"
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
  /// A tree the grader generated from the instructor's own sources (check-handouts' handout: the
  /// reference with the solutions stripped, no student's file in it): built like the reference,
  /// as the grader's user with the user's ccache (the earlier labs' files, the same in every
  /// handout, compile once), but with the manifest's programs only and a submission's time limit.
  bool generated_from_reference = false;
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

/// The first error lines of a compiler log (errors, undefined references, the link audit's, a
/// step killed by its limits: at most 25 lines), "" when it has none.
std::string first_build_errors(std::string_view log);
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

/// The top-level entries of `root` a reference build of lab `m` needs (not a direct build): its
/// regular files (CMakeLists.txt, CMakePresets.json, ...), common/ and the folders of labs up to
/// m.lab; never a name starting with '.', nor build/. Sorted.
std::vector<std::string> reference_tree_parts(const std::filesystem::path& root, const Manifest& m);

/// Copies the reference repository parts needed to build lab `m` (root files, common/, labs up
/// to m.lab) into `dest`; for a lab with a direct build, only its folder.
void copy_reference_tree(const std::filesystem::path& root, const Manifest& m,
                         const std::filesystem::path& dest);

}  // namespace mls::grader
