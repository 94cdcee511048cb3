#pragma once
/// Whole files in and out: the one atomic writer and the one reader every lab and the grader use
/// (.npy files, lab 6 checkpoints and llm.c models, loss curves, the grader's reports and trees).
///
/// write_file_atomic never leaves a half-written file: the bytes go to a fresh temporary file in
/// the same folder (a unique name `.<name>.tmp.XXXXXX`, created with O_EXCL so it never follows a
/// link), which is fsynced, given mode 0644 (whatever the umask: the grader's sandboxed uid must
/// read it) and renamed over `path`; then the folder is fsynced so the rename itself is durable.
/// A crash or a full disk leaves either the old file or the new one. A symlink at `path` is
/// replaced by the new file, never written through. On any failure the temporary file is removed
/// and an mls::Error names the operation, the path, the step that failed and strerror(errno).
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace mls {

/// Stands in for ::write in tests that inject a failure: bytes written, or -1 with errno set
/// (0 bytes with errno 0 counts as a full disk).
using WriteFn = std::function<long(int fd, const void* data, std::size_t n)>;

/// Writes `bytes` to `path` atomically (see above). `op` starts every error message
/// ("save_checkpoint: cannot write 'run.ckpt': ..."); `write_fn` replaces ::write for tests.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes,
                       std::string_view op = "write_file_atomic", const WriteFn& write_fn = {});

/// Reads a whole regular file (following links). A missing or unreadable path, a folder or any
/// other non-regular file (a FIFO is refused without blocking) is an mls::Error
/// "<op>: cannot open '<path>': <strerror>" or "<op>: '<path>' is not a regular file (...)".
std::string read_file(const std::filesystem::path& path, std::string_view op = "read_file");

/// strerror(err), with " (the disk is full)" after ENOSPC and EDQUOT.
std::string errno_text(int err);

}  // namespace mls
