#pragma once
/// What sandbox.cpp, sandbox_root.cpp and sandbox_child.cpp share (not a public interface): the
/// messages a forked child writes, the plan of the private root (made before fork, carried out in
/// the test's mount namespace), what the forked children need, and the records they send back.
#include <sys/resource.h>

#include <filesystem>
#include <string>
#include <vector>

#include "mls/grader/sandbox.hpp"

namespace mls::grader::sandbox_detail {

// ---- messages from a forked child (sandbox_child.cpp): no allocation, no stdio -------------------

/// Writes `s` to `fd`.
void put_str(int fd, const char* s);
/// Writes "sandbox: cannot set up the isolation: <what> <path> (errno N)" to `fd`.
void put_errno(int fd, const char* what, const char* path);

// ---- the private root of the namespace levels (sandbox_root.cpp) --------------------------------

/// One step of building the private root, prepared before fork (the child only reads it).
struct FsOp {
  enum Kind { Mkdir, Touch, Bind, BindRo, Device, Symlink, Proc, TmpfsRo, Mask, Chown } kind;
  std::string src, dst;
  unsigned mode = 0755;
  bool optional = false;
};

struct RootPlan {
  std::string root;                       ///< host folder the private root's tmpfs is mounted on
  std::string old_root;                   ///< root + "/.old" (pivot_root's put_old)
  std::string tmpfs_options;
  std::string mask_file;                  ///< root + "/.mls-mask"
  std::vector<FsOp> ops;
  std::string uid_map, gid_map;           ///< user-namespace level: "U U 1"
};

/// The private root of a run of `spec`, mounted on the empty host folder `root`: the system
/// folders, a minimal /dev, its own /proc, private /tmp, /var/tmp, /dev/shm, what `spec` exposes,
/// hides and masks, and the working folder (owned by `uid` when not exposed); `user_ns`: with the
/// id maps of the user-namespace level.
RootPlan make_plan(const SandboxSpec& spec, const std::filesystem::path& root, unsigned uid, bool user_ns);
/// In the new mount namespace (as its root): builds the private root and pivots into it.
/// Returns false after writing why to `err_fd`.
bool enter_private_root(const RootPlan& plan, int err_fd);
/// The namespaces a run at `level` unshares (CLONE_NEW...).
int namespace_flags(Isolation level);
/// In the supervisor, after unshare: maps the user's own uid and gid into the new user namespace.
bool write_id_maps(const RootPlan& plan, int err_fd);

// ---- the forked children (sandbox_child.cpp) ----------------------------------------------------

/// What the forked test program needs, prepared before fork (the children call no allocator).
struct ChildSetup {
  int devnull = -1, out = -1, err = -1, cin = -1, cout = -1;
  rlim_t cpu = 0, fsize = 0, nofile = 0, nproc = 0, as = 0;
  const char* cwd = nullptr;
  unsigned uid = 0;  ///< 0: keep the current uid
  char* const* argv = nullptr;
  char* const* envp = nullptr;
};

/// Status records on the status pipe: {kChildPid, host pid of the child or of the namespace's
/// init}, {kChildStatus, wait status of the test program}.
constexpr int kChildPid = 1, kChildStatus = 2;

/// The supervisor (a child subreaper): starts the child, reaps every other descendant while it
/// runs, reports the child's end, then waits for the grader's release to reap the child.
[[noreturn]] void supervise(const ChildSetup& cs, const RootPlan& plan, bool ns, Isolation level, int stat_w,
                            int release_r);

}  // namespace mls::grader::sandbox_detail
