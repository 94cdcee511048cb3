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
  std::string text;                   ///< its content, read once at intake (never re-opened)
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
/// that is unique), never following a symlink on any component of the path: a linked file or
/// a linked folder on the way is refused (its files count as missing); refuses non-regular files
/// (FIFOs, devices: never opened), files over 1 MiB (never read), binary files (object files)
/// and, in the sources, definitions of `main`, Catch2 or harness symbols. Every other entry is
/// named in one line of notes (a bounded listing: fast on thousands of files or deep trees).
/// Names are escaped for display (`display_name`).
IntakeReport intake_submission(const std::filesystem::path& submission, const Manifest& m);

/// Checks one student source text; returns the reasons it is rejected (empty: accepted).
/// Comments and string literals are ignored; looks for a definition of `main`, Catch2 macros,
/// headers or namespace, and the harness's identifiers.
std::vector<std::string> forbidden_symbols(std::string_view source);

/// Text of `source` with comments and string/char literals blanked (lines kept).
std::string strip_comments_and_strings(std::string_view source);

}  // namespace mls::grader
