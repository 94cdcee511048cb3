#pragma once
/// The group check (`mls-grader check-groups`): each test group needs only its own functions.
///
/// A group names the student functions its tests check (lab.json `functions`) and the groups whose
/// functions its tests also call (`needs`). The check writes one submission per group: the
/// reference solution with only that group's functions stubbed (`MLS_TODO`), grades them all in one
/// batch, and expects each to fail some of its own group's tests and no test outside the group and
/// the groups that need it. The static half (`check_group_functions`) needs no build: every
/// solution region belongs to exactly one group, and every function a group names is a region.
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mls/grader/manifest.hpp"
#include "mls/grader/result.hpp"

namespace mls::grader {

struct GradeOptions;

/// One solution region of a lab's student files: the file (repo-relative) and its function's name.
struct SolutionRegion {
  std::string file;
  std::string function;
};

/// Every region of `m`'s student files under `root`, in file order.
std::vector<SolutionRegion> solution_regions(const Manifest& m, const std::filesystem::path& root);

/// The static check: each region's function is named by exactly one group, each function a group
/// names is a region of the lab, and no `given` group names functions (a group may name none: its
/// tests check what other groups' functions do together, e.g. traffic counts, and it lists them in
/// `needs`). Returns the problems, one line each (empty: ok).
std::vector<std::string> check_group_functions(const Manifest& m, const std::vector<SolutionRegion>& regions);

/// The groups whose tests may fail when `group`'s functions are stubbed: itself and every group
/// that needs it, directly or through other groups (`needs` is followed transitively).
std::set<std::string> groups_affected_by(const Manifest& m, const std::string& group);

/// The submission of one group's variant: repo-relative path -> text of each student file, the
/// reference's code except the regions of `functions` (stubbed as in a handout).
std::map<std::string, std::string> group_variant_files(const Manifest& m, const std::filesystem::path& root,
                                                       const std::vector<std::string>& functions);

/// What one variant's grading showed.
struct GroupVerdict {
  std::string group;
  int own_tests = 0, own_failed = 0;   ///< the group's tests, and how many failed (SKIPPED aside)
  /// Tests that failed outside the group and its dependents: other group -> test names.
  std::map<std::string, std::vector<std::string>> unexpected;
  std::set<std::string> dependents_failed;  ///< the documented dependents that did fail
  /// The machine cannot run the group's tests (GPU or MPI tests all SKIPPED): nothing to judge.
  bool skipped = false;
  std::string why;                          ///< "" when the verdict holds
  bool ok() const { return why.empty(); }
};

/// Judges a variant's result: at least one of the group's own tests fails (else they do not test
/// its functions), and no test fails outside `groups_affected_by(group)`. A variant that did not
/// build is a failure of the check (stubbing must keep the tree compiling).
GroupVerdict judge_group_variant(const Manifest& m, const std::string& group, const LabResult& r);

/// The whole check: the variants of `only` (empty: every group that names functions) graded in
/// one batch (`opt` carries the prepared reference; `parallel` at a time). `on_done` reports each
/// verdict as it comes. The verdicts come back in the manifest's group order.
std::vector<GroupVerdict> check_groups(const Manifest& m, const std::filesystem::path& root, const GradeOptions& opt,
                                       const std::vector<std::string>& only, int parallel,
                                       const std::function<void(const GroupVerdict&)>& on_done = {});

/// One line per verdict plus the details of the failures (the report of `check-groups`).
std::string format_group_verdicts(const std::vector<GroupVerdict>& verdicts);

}  // namespace mls::grader
