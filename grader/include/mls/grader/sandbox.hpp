#pragma once
/// Runs one untrusted program in a sandbox and collects what it did.
///
/// The child: its own session and process group; stdin from /dev/null; a scratch working folder;
/// a cleared environment; rlimits (CPU, file size, open files, processes, core dumps off, address
/// space unless sanitized); stdout and stderr read through pipes with a byte cap (head and tail
/// kept); a wall-clock timeout after which the whole group is killed. When the grader runs as
/// root, the child also runs as an unprivileged uid reserved for this run (61000 + k, held with a
/// lock file), so RLIMIT_NPROC bounds fork bombs and, when the run is over, every process of
/// that uid is killed, including those that left the session. When not root, only the process
/// group and session are killed (a process that calls setsid() and daemonizes can escape: a
/// limitation we document, since cgroups are not available to us).
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mls::grader {

struct SandboxLimits {
  double wall_s = 20;                    ///< wall-clock limit, then SIGKILL to the group
  double cpu_s = 0;                      ///< RLIMIT_CPU; 0: wall_s + 1
  std::size_t address_space_mb = 4096;   ///< RLIMIT_AS; 0: unlimited (sanitizers)
  std::size_t file_size_mb = 64;         ///< RLIMIT_FSIZE
  std::size_t open_files = 256;          ///< RLIMIT_NOFILE
  std::size_t processes = 256;           ///< RLIMIT_NPROC (per uid: see above)
  std::size_t output_cap = 4u << 20;     ///< total stdout+stderr bytes before the group is killed
  std::size_t keep_head = 24u << 10;     ///< bytes kept from the start of each stream
  std::size_t keep_tail = 24u << 10;     ///< bytes kept from the end of each stream
};

struct SandboxSpec {
  std::vector<std::string> argv;         ///< argv[0] is a path to the program
  std::filesystem::path cwd;             ///< working folder (created if missing)
  std::vector<std::string> env;          ///< "K=V"; the child sees only these
  SandboxLimits limits;
  /// When set, two pipes are handed to the child: it reads this text from one fd and may write
  /// to the other; MLS_GRADER_FD="<in>,<out>" is added to the environment (the fd numbers, never
  /// the nonce itself).
  std::optional<std::string> channel_input;
  bool drop_privileges = true;           ///< when root: run as a reserved unprivileged uid
  /// Folders handed (recursively) to the reserved uid before the run, e.g. a build tree.
  std::vector<std::filesystem::path> chown_paths;
};

struct SandboxResult {
  bool started = false;                  ///< false: fork/exec failed (see `error`)
  std::string error;
  bool exited = false;
  int exit_code = -1;
  int signal = 0;                        ///< terminating signal, 0 if exited
  bool timed_out = false;
  bool output_limit = false;
  std::size_t stdout_bytes = 0, stderr_bytes = 0;
  std::string out;                       ///< head (and tail) of stdout
  std::string err;                       ///< head (and tail) of stderr
  std::string channel;                   ///< what the child wrote to the channel fd (capped)
  double wall_s = 0;
};

/// Runs `spec`; never throws for anything the child does. All descendants are dead on return.
SandboxResult run_sandboxed(const SandboxSpec& spec);

/// The minimal environment of a child: PATH, HOME and TMPDIR (the scratch folder), LANG=C, and
/// ASAN_OPTIONS / UBSAN_OPTIONS / OMP_NUM_THREADS copied from ours when set.
std::vector<std::string> minimal_env(const std::filesystem::path& scratch);

/// True when the binary links a sanitizer runtime (then no RLIMIT_AS is applied).
bool binary_uses_sanitizer(const std::filesystem::path& binary);

/// Number of processes, other than `except`, whose real uid is `uid` (from /proc).
int count_processes_of_uid(unsigned uid);

}  // namespace mls::grader
