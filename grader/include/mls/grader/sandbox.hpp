#pragma once
/// Runs one untrusted program in a sandbox and collects what it did.
///
/// Every level: the child has its own session and process group; stdin from /dev/null; a
/// cleared environment; rlimits (CPU, file size, open files, processes, core dumps off, address
/// space unless sanitized); stdout and stderr read through pipes with a byte cap (head and tail
/// kept); a wall-clock timeout; a supervisor (child subreaper) reaps every descendant.
///
/// The isolation on top of that is the strongest this machine permits, detected once at run
/// time (`isolation()`), and named at the top of every report:
///  - `namespaces` (the grader is root): the test runs in its own PID, mount, network and IPC
///    namespaces, as an unprivileged uid reserved for the run (62000 + k, no user of the machine, no
///    process running as it), with no new
///    privileges. Its root filesystem is a fresh, size-capped tmpfs holding only the system
///    folders (/usr, /etc, /opt, /sys read-only, a minimal /dev, its own /proc) and the paths the
///    grader exposes (`expose_ro`, `expose_rw`) at their own absolute paths: the instructor's
///    checkout, other submissions and the rest of the machine are not there; /tmp, /var/tmp and
///    /dev/shm are private and vanish with the run. Killing the namespace's init kills every
///    process the test started, daemons in their own (nested) namespaces included.
///  - `user-namespaces` (not root, unprivileged user namespaces allowed): the same, inside a user
///    namespace that maps only the user's own uid (the test keeps that uid).
///  - `uid` (root, no namespaces): the reserved uid only: files are hidden by their permissions
///    (a checkout under a mode-700 home is unreadable), every process of the uid is killed and
///    every file it owns in /tmp, /var/tmp and /dev/shm is removed after each run.
///  - `rlimits` (not root, no user namespaces): rlimits and the process tree only; the test can
///    read whatever the user can. Grade as root, or where user namespaces are allowed.
/// `MLS_GRADER_ISOLATION=uid|rlimits` lowers the level (for testing the fallbacks); it cannot
/// raise it. cgroups are not used: memory is bounded by RLIMIT_AS, processes by RLIMIT_NPROC.
#include <chrono>
#include <filesystem>
#include <functional>
#include <string_view>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mls::grader {

struct SandboxUid;

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
  /// Bytes the child may write to the result channel; past them the group is killed and the
  /// result says `channel_limit`.
  std::size_t channel_cap = 1u << 20;
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
  /// When set, every chunk of the channel goes here as it arrives (and `SandboxResult::channel`
  /// stays empty): a streaming decoder holds what it needs, not the whole channel. Returning
  /// false ends the run as over the channel limit.
  std::function<bool(std::string_view)> on_channel;
  /// false: a trusted run (the user's own in-tree build): rlimits only, no uid change, no
  /// namespaces. true: the strongest isolation available (see above).
  bool drop_privileges = true;
  /// Namespace levels: the only paths of the machine, beyond the system folders, the child sees
  /// (each at its own absolute path; files or folders). argv[0] is exposed read-only
  /// automatically. The working folder `cwd` is created empty in the private root unless it is
  /// exposed.
  std::vector<std::filesystem::path> expose_ro, expose_rw;
  /// Namespace levels: files inside exposed folders replaced by an empty file (mtime 0).
  std::vector<std::filesystem::path> mask;
  /// Namespace levels: folders hidden by an empty read-only tmpfs even where a system folder
  /// holds them (e.g. a checkout under /opt).
  std::vector<std::filesystem::path> hide;
  /// Size of the private root tmpfs (namespace levels): /tmp, /var/tmp, /dev/shm live there.
  std::size_t tmpfs_mb = 1024;
  /// A reserved uid held by the caller across several runs (e.g. every step of a build), so
  /// the files of one step belong to the next; when empty, each run reserves its own.
  std::shared_ptr<SandboxUid> uid;
};

/// The isolation levels, weakest first.
enum class Isolation { Rlimits, Uid, UserNamespaces, Namespaces };
struct IsolationInfo {
  Isolation level = Isolation::Rlimits;
  std::string name;     ///< "namespaces", "user-namespaces", "uid", "rlimits"
  std::string summary;  ///< one line: what is in force, and what is not
};
/// The level in force for sandboxed runs (probed once, lowered by MLS_GRADER_ISOLATION).
const IsolationInfo& isolation();
/// "isolation: <name> (<summary>)": the first line of every report.
std::string isolation_line();

/// An unprivileged uid reserved while the object lives (as root; 0 otherwise). The
/// reservation is an abstract unix socket name (no file anywhere, gone with the process).
struct SandboxUid {
  unsigned uid = 0;
  int fd = -1;
  SandboxUid() = default;
  SandboxUid(const SandboxUid&) = delete;
  SandboxUid& operator=(const SandboxUid&) = delete;
  ~SandboxUid();
};
/// Reserves a uid when the grader is root and sandboxed runs drop privileges; nullptr when not
/// root. Throws mls::Error when every uid of the range is taken.
std::shared_ptr<SandboxUid> reserve_sandbox_uid();

/// Kills every process of `uid` and removes every file it owns in /tmp, /var/tmp and /dev/shm
/// (the clean-up of the `uid` level; never follows a symlink). Returns the entries removed.
int sweep_uid(unsigned uid);

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
  std::string channel;                   ///< what the child wrote to the channel fd (without `on_channel`)
  std::size_t channel_bytes = 0;         ///< bytes the child wrote to the channel
  bool channel_limit = false;            ///< it wrote more than `channel_cap` (or the decoder refused more)
  double wall_s = 0;
  std::string isolation;                 ///< the level the run had (IsolationInfo::name)
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
