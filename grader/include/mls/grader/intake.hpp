#pragma once
/// Intake of a submission: only the lab's allowlisted student files are taken.
#include <filesystem>
#include <string>
#include <vector>

#include "mls/grader/manifest.hpp"

namespace mls::grader {

struct IntakeFile {
  std::string rel;                    ///< repo-relative path of the student file
  std::filesystem::path source;       ///< where it was found in the submission
};

struct IntakeReport {
  std::vector<IntakeFile> accepted;
  std::vector<std::string> missing;   ///< student files not submitted (the handout stub is used)
  std::vector<std::string> notes;     ///< refused or ignored entries, with why
  std::vector<std::string> errors;    ///< reasons to reject the whole submission
  bool ok() const { return errors.empty(); }
};

inline constexpr std::size_t kMaxStudentFileBytes = 1u << 20;

/// Finds each student file in `submission` (at its repo-relative path, or by its base name when
/// that is unique): refuses symlinks, non-regular files, files over 1 MiB, binary files (object
/// files) and, in the sources, definitions of `main`, Catch2 or harness symbols.
IntakeReport intake_submission(const std::filesystem::path& submission, const Manifest& m);

/// Checks one student source text; returns the reasons it is rejected (empty: accepted).
/// Comments and string literals are ignored; looks for a definition of `main`, Catch2 macros,
/// headers or namespace, and the harness's identifiers.
std::vector<std::string> forbidden_symbols(std::string_view source);

/// Text of `source` with comments and string/char literals blanked (lines kept).
std::string strip_comments_and_strings(std::string_view source);

}  // namespace mls::grader
