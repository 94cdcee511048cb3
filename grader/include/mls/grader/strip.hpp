#pragma once
/// Solution regions and handout generation.
///
/// A region is the lines from the BEGIN SOLUTION marker comment to the END SOLUTION one
/// (inclusive), never nested.
/// `strip_solutions` replaces each one with `MLS_TODO("<lab>: <function>");` at the indentation of
/// the BEGIN line, where <function> is read from the enclosing signature (else `<file>:<line>`).
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "mls/grader/manifest.hpp"

namespace mls::grader {

struct StripResult {
  std::string text;
  int regions = 0;
  std::vector<std::string> functions;  ///< the name given to each region, in order
  std::vector<std::string> stubbed;    ///< the regions replaced by MLS_TODO (all of them without a filter)
};

/// True when the line is a marker line (the BEGIN / END SOLUTION comments, any indentation).
bool is_begin_marker(std::string_view line);
bool is_end_marker(std::string_view line);
/// True when `text` contains marker text anywhere (the leak check of check-handouts).
bool contains_marker_text(std::string_view text);

/// The name of the function whose body contains line `line_index` of `lines`, e.g.
/// `Tensor::permute` for `Tensor Tensor::permute(std::span<const int64_t> dims) const {`;
/// empty when none is found.
std::string enclosing_function(const std::vector<std::string>& lines, std::size_t line_index);

/// The lab number of a student file's first line, `// Student file of lab N: ...` (the line
/// every student file opens with, scripts/check_conventions.py); -1 for any other line.
int student_header_lab(std::string_view line);

/// The first line of student file of lab `lab` in a handout tree, in place of the repository's
/// (which speaks of the solution markers, gone from every handout). `stripped`: the student's
/// own file, whose bodies are `MLS_TODO("<lab_prefix>: <function>")`; otherwise an earlier lab's
/// file kept as its reference solution.
std::string handout_student_header(int lab, bool stripped, std::string_view lab_prefix = {});

/// Strips every region of `text`. `file` names the file in messages; `lab_prefix` is e.g. "lab1".
/// A first line `// Student file of lab N: ...` becomes `handout_student_header(N, true, lab_prefix)`
/// when the file has a region.
/// Throws mls::Error "<file>:<line>: ..." on a nested BEGIN, an END without BEGIN or a BEGIN
/// without END.
/// `which` (when set) picks the regions to strip by their function's name; the other regions keep
/// their code, without their marker lines (the group check: one group's functions stubbed).
StripResult strip_solutions(std::string_view text, std::string_view file, std::string_view lab_prefix,
                            const std::function<bool(const std::string&)>& which = {});

/// The reference solution of an earlier lab as it goes into a later lab's handout: the code is
/// kept, only the BEGIN / END SOLUTION marker lines are removed (so no marker text leaks), and
/// a student-file first line becomes `handout_student_header(N, false)`. Checks the markers like
/// `strip_solutions` and throws the same errors.
std::string unmark_solutions(std::string_view text, std::string_view file);

struct HandoutOptions {
  bool strip_previous = false;  ///< strip the student regions of earlier labs too
};

struct HandoutReport {
  std::vector<std::string> stripped_files;  ///< repo-relative, with their region count
  int regions = 0;
  std::vector<std::string> notes;
};

/// The line that marks the next fenced block of a write-up as commands a student runs, which
/// scripts/check_handout_commands.sh runs as written in a generated handout tree.
inline constexpr std::string_view kCheckedCommandsMarker = "<!-- handout commands: checked -->";

/// The fenced blocks of a Markdown text that each follow a `kCheckedCommandsMarker` line (the
/// first fence after the marker opens the block), each as its lines, in order.
std::vector<std::vector<std::string>> checked_command_blocks(std::string_view markdown);

/// The name of the first test case (`TEST_CASE("name", "tags")`) in `sources` ((file, text)
/// pairs, in order) whose tags include every tag of `match`, a Catch2 spec of tags only (e.g.
/// `[sgemm][packed]`), and whose name can be given on a command line in double quotes as it is
/// (no character Catch2's spec or the shell reads: , [ ] * ~ " \ $ ` !); empty if none.
std::string first_test_name(std::string_view match, const std::vector<std::pair<std::string, std::string>>& sources);

/// The README.md at the root of lab `m`'s handout tree, in place of the instructor's (whose
/// quick start builds every lab): what the tree holds, where the write-up is; how to build and
/// test (the write-up's first checked block with a `cmake --preset` line, `writeup` being
/// handouts/labN/README.md's text, or
/// when it has none, commands made from the manifest: configure labs up to N, build the lab's
/// test programs and mls-grader, `ctest -L labN`); one test by name (from `test_sources`, see
/// `first_test_name`) with Catch2's -a and -x N; `mls-grader test --lab N`; the files to submit;
/// the points table (group, tests, points, visibility, notes) from the manifest. `labs` are the
/// manifests of the labs in the tree (the earlier ones are named as given).
std::string student_readme(const Manifest& m, const std::vector<Manifest>& labs, std::string_view writeup,
                           const std::vector<std::pair<std::string, std::string>>& test_sources);

/// Writes the student starter tree of `lab` into `out` (which must not exist or be empty):
/// root files, common/, scripts/, grader/ and labs before `lab` as reference (stripped with
/// `strip_previous`), lab `lab` stripped, later labs and hidden test files left out, handouts for
/// labs up to `lab`; its README.md is `student_readme` (the instructor's is left out). Refuses
/// markers in a file that is not a student file of its lab.
HandoutReport make_handout(const std::filesystem::path& root, const std::vector<Manifest>& labs,
                           int lab, const std::filesystem::path& out, const HandoutOptions& opt = {});

/// Lab number encoded in a top-level folder name such as `lab3_graph_opt`; -1 if none.
int lab_number_of_dir(std::string_view name);

}  // namespace mls::grader
