#pragma once
/// Solution regions and handout generation.
///
/// A region is the lines from the BEGIN SOLUTION marker comment to the END SOLUTION one
/// (inclusive), never nested.
/// `strip_solutions` replaces each one with `MLS_TODO("<lab>: <function>");` at the indentation of
/// the BEGIN line, where <function> is read from the enclosing signature (else `<file>:<line>`).
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "mls/grader/manifest.hpp"

namespace mls::grader {

struct StripResult {
  std::string text;
  int regions = 0;
  std::vector<std::string> functions;  ///< the name given to each region, in order
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

/// Strips every region of `text`. `file` names the file in messages; `lab_prefix` is e.g. "lab1".
/// Throws mls::Error "<file>:<line>: ..." on a nested BEGIN, an END without BEGIN or a BEGIN
/// without END.
StripResult strip_solutions(std::string_view text, std::string_view file, std::string_view lab_prefix);

/// The reference solution of an earlier lab as it goes into a later lab's handout: the code is
/// kept, only the BEGIN / END SOLUTION marker lines are removed (so no marker text
/// leaks). Checks the markers like `strip_solutions` and throws the same errors.
std::string unmark_solutions(std::string_view text, std::string_view file);

struct HandoutOptions {
  bool strip_previous = false;  ///< strip the student regions of earlier labs too
};

struct HandoutReport {
  std::vector<std::string> stripped_files;  ///< repo-relative, with their region count
  int regions = 0;
  std::vector<std::string> notes;
};

/// Writes the student starter tree of `lab` into `out` (which must not exist or be empty):
/// root files, common/, scripts/, grader/ and labs before `lab` as reference (stripped with
/// `strip_previous`), lab `lab` stripped, later labs and hidden test files left out, handouts for
/// labs up to `lab`. Refuses markers in a file that is not a student file of its lab.
HandoutReport make_handout(const std::filesystem::path& root, const std::vector<Manifest>& labs,
                           int lab, const std::filesystem::path& out, const HandoutOptions& opt = {});

/// Lab number encoded in a top-level folder name such as `lab3_graph_opt`; -1 if none.
int lab_number_of_dir(std::string_view name);

}  // namespace mls::grader
