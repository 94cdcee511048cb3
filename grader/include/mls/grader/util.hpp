#pragma once
/// Small helpers of the grader: files, text clean-up, hashing. Each is a pure function or a thin
/// wrapper over one system call, so each can be tested on its own.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mls/common/file.hpp"
#include "mls/common/svg.hpp"

namespace mls::grader {

/// The grader process's own peak resident memory so far, in MB (its children not counted).
double grader_peak_mb();

namespace fs = std::filesystem;

/// Whole files come from common (mls/common/file.hpp): read_file (regular files only, a FIFO is
/// refused without blocking) and write_file_atomic (a unique O_EXCL temporary in the same folder,
/// mode 0644, fsync, rename over the target, never through a symlink there; folder fsync).
using mls::read_file;
using mls::write_file_atomic;
/// Replaces control characters (except \n and \t) by '?', and invalid UTF-8 bytes by '?';
/// cuts to `max_bytes`, noting how much was cut.
std::string sanitize_text(std::string_view text, std::size_t max_bytes = 8192);
/// A name from a submission (a file name, a folder name) for display in any report: printable
/// ASCII and valid, printable UTF-8 are kept; control characters (C0, C1), bidirectional
/// overrides, backslashes and invalid bytes become `\xNN`; cut to `max_bytes` with "...".
std::string display_name(std::string_view name, std::size_t max_bytes = 120);
/// Replaces every occurrence of each `from` (longest first) by its `to`.
std::string redact(std::string text, const std::vector<std::pair<std::string, std::string>>& pairs);
/// Keeps the first `head` and last `tail` bytes of `text` with a note of what was left out.
std::string head_tail(std::string_view text, std::size_t head, std::size_t tail);
/// 64-bit FNV-1a of `data`, as 16 hex digits (cache keys, not security).
std::string fnv1a_hex(std::string_view data);
/// `n` random bytes from /dev/urandom as hex (the per-run nonce).
std::string random_hex(std::size_t n);
/// Splits on a single character, keeping empty fields.
std::vector<std::string> split(std::string_view text, char sep);
/// Trims ASCII whitespace on both sides.
std::string_view trim(std::string_view s);
/// True when `s` starts with / ends with `prefix`.
bool starts_with(std::string_view s, std::string_view prefix);
/// Escapes a string for XML/HTML text and attribute values (common's, mls/common/svg.hpp).
using mls::xml_escape;
/// A fresh private folder under $TMPDIR (or /tmp), mode 0755 so a sandboxed uid can enter it.
fs::path make_temp_dir(std::string_view prefix);
/// Removes a folder tree, ignoring errors (best effort clean-up).
void remove_tree(const fs::path& p) noexcept;
/// Copies one regular file; the copy is readable by everyone (mode 0644, 0755 where the owner may
/// execute the original) whatever the original's mode, so a sandboxed uid can read the grader's
/// trees even when the course checkout is private (e.g. made root-only by the Gradescope setup).
void copy_file_readable(const fs::path& from, const fs::path& to);
/// Copies a folder tree (regular files and folders only; symlinks are skipped), skipping any
/// entry whose name is in `skip_names`; files as copy_file_readable, folders mode 0755.
void copy_tree(const fs::path& from, const fs::path& to, const std::vector<std::string>& skip_names = {});
/// The repository root: `hint` if given, else walks up from the current folder looking for
/// CMakePresets.json beside common/; falls back to the folder compiled in.
fs::path find_repo_root(const std::optional<fs::path>& hint);

/// Configure-time paths: the harness Catch2 main archive, the mls_common archive, and the
/// build folder the grader was built in (used by direct builds and in-tree `test`).
fs::path default_harness_lib();
fs::path default_common_lib();
fs::path default_binary_dir();

}  // namespace mls::grader
