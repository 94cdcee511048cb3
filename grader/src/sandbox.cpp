#include "mls/grader/sandbox.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "mls/common/error.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

namespace {

using Clock = std::chrono::steady_clock;

/// Head and tail of a stream, without keeping the middle.
struct Capture {
  Capture(std::size_t h, std::size_t t) : head_cap(h), tail_cap(t) {}
  std::size_t head_cap, tail_cap, total = 0;
  std::string head, tail;
  void add(const char* p, std::size_t n) {
    total += n;
    std::size_t h = std::min(n, head_cap - std::min(head_cap, head.size()));
    head.append(p, h);
    p += h;
    n -= h;
    if (n == 0) return;
    tail.append(p, n);
    if (tail.size() > 2 * tail_cap + 4096) tail.erase(0, tail.size() - tail_cap);
  }
  std::string text() const {
    if (tail.empty()) return head;
    std::size_t t = std::min(tail.size(), tail_cap);
    std::size_t skipped = total - head.size() - t;
    std::string out = head;
    if (skipped > 0) out += "\n[... " + std::to_string(skipped) + " bytes left out ...]\n";
    out.append(tail, tail.size() - t, t);
    return out;
  }
};

struct ProcInfo {
  int pid, ppid;
  char state;
  unsigned uid;
};

std::vector<ProcInfo> list_processes() {
  std::vector<ProcInfo> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string base = std::string("/proc/") + e->d_name;
    int fd = ::open((base + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) continue;
    buf[n] = 0;
    char* rp = std::strrchr(buf, ')');
    if (!rp || rp[1] == 0) continue;
    ProcInfo pi{};
    pi.pid = std::atoi(e->d_name);
    if (std::sscanf(rp + 2, "%c %d", &pi.state, &pi.ppid) != 2) continue;
    struct stat st {};
    if (::stat(base.c_str(), &st) == 0) pi.uid = st.st_uid;
    out.push_back(pi);
  }
  ::closedir(d);
  return out;
}

/// Every live (non-zombie) descendant of `root`.
std::vector<int> descendants(int root) {
  auto procs = list_processes();
  std::map<int, int> parent;
  for (const auto& p : procs) parent[p.pid] = p.ppid;
  std::vector<int> out;
  for (const auto& p : procs) {
    if (p.state == 'Z' || p.pid == root) continue;
    int cur = p.ppid;
    for (int hops = 0; hops < 4096 && cur > 1; ++hops) {
      if (cur == root) {
        out.push_back(p.pid);
        break;
      }
      auto it = parent.find(cur);
      if (it == parent.end()) break;
      cur = it->second;
    }
  }
  return out;
}


/// Kills every process of `uid` (as that uid, kill(-1) reaches exactly them).
void kill_uid(unsigned uid) {
  pid_t k = ::fork();
  if (k == 0) {
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(1);
    ::kill(-1, SIGKILL);
    ::_exit(0);
  }
  if (k > 0) {
    int st;
    while (::waitpid(k, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

/// Kills the supervised tree: the child (in the namespace levels, the init of the test's PID
/// namespace, whose death kills everything in it) and its group, every descendant of the
/// supervisor, and (when a uid was reserved) every process of that uid. Repeats until nothing
/// is left or gives up.
void kill_everything(pid_t supervisor, pid_t child, unsigned uid) {
  for (int round = 0; round < 100; ++round) {
    if (child > 0) {
      ::kill(-child, SIGKILL);
      ::kill(child, SIGKILL);
    }
    if (uid) kill_uid(uid);
    auto ds = descendants(supervisor);
    for (int p : ds) ::kill(p, SIGKILL);
    bool uid_clear = !uid || count_processes_of_uid(uid) == 0;
    if (ds.empty() && uid_clear) return;
    ::usleep(2000);
  }
}

int dup_high(int fd) {
  int h = ::fcntl(fd, F_DUPFD_CLOEXEC, 100);
  ::close(fd);
  return h;
}

void set_limit(int res, rlim_t v) {
  struct rlimit rl {v, v};
  ::setrlimit(res, &rl);
}

/// Records on the status pipe: {1, host pid of the child (or of the namespace's init)},
/// {2, wait status of the test program}.
void write_record(int fd, int tag, int v) {
  int rec[2] = {tag, v};
  ssize_t n = ::write(fd, rec, sizeof rec);
  (void)n;
}

// ---- messages from a forked child: no allocation, no stdio ---------------------------------

void put_str(int fd, const char* s) {
  ssize_t n = ::write(fd, s, std::strlen(s));
  (void)n;
}

void put_errno(int fd, const char* what, const char* path) {
  char num[16];
  int e = errno, k = 0;
  char tmp[16];
  do {
    tmp[k++] = static_cast<char>('0' + e % 10);
    e /= 10;
  } while (e && k < 15);
  for (int i = 0; i < k; ++i) num[i] = tmp[k - 1 - i];
  num[k] = 0;
  put_str(fd, "sandbox: cannot set up the isolation: ");
  put_str(fd, what);
  if (path && *path) {
    put_str(fd, " ");
    put_str(fd, path);
  }
  put_str(fd, " (errno ");
  put_str(fd, num);
  put_str(fd, ")\n");
}

// ---- the private root of the namespace levels -----------------------------------------------

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

const char* const kSystemDirs[] = {"usr", "etc", "opt", "sys", "bin", "sbin", "lib", "lib32", "lib64", "libx32"};

bool under(const fs::path& p, const fs::path& dir) {
  auto pi = p.begin();
  for (auto di = dir.begin(); di != dir.end(); ++di, ++pi) {
    if (di->empty()) continue;
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

bool under_system_dir(const fs::path& p) {
  for (const char* d : kSystemDirs)
    if (under(p, fs::path("/") / d)) return true;
  return false;
}

void add_dirs(RootPlan& plan, std::set<std::string>& made, const fs::path& abs) {
  fs::path cur = "/";
  for (const auto& comp : abs.relative_path()) {
    cur /= comp;
    if (made.insert(cur.string()).second) plan.ops.push_back({FsOp::Mkdir, "", plan.root + cur.string(), 0755, true});
  }
}

void add_expose(RootPlan& plan, std::set<std::string>& made, const fs::path& p, bool rw) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec).lexically_normal();
  if (ec || abs.empty() || abs == "/") return;
  auto st = fs::status(abs, ec);
  if (ec || !fs::exists(st)) return;
  if (fs::is_directory(st)) {
    add_dirs(plan, made, abs);
  } else {
    add_dirs(plan, made, abs.parent_path());
    if (made.insert(abs.string()).second) plan.ops.push_back({FsOp::Touch, "", plan.root + abs.string(), 0644, true});
  }
  plan.ops.push_back({rw ? FsOp::Bind : FsOp::BindRo, abs.string(), plan.root + abs.string(), 0, false});
}

RootPlan make_plan(const SandboxSpec& spec, const fs::path& root, unsigned uid, bool user_ns) {
  RootPlan plan;
  plan.root = root.string();
  plan.old_root = plan.root + "/.old";
  plan.mask_file = plan.root + "/.mls-mask";
  plan.tmpfs_options = "size=" + std::to_string(std::max<std::size_t>(16, spec.tmpfs_mb)) + "m,mode=0755";
  std::set<std::string> made;
  std::error_code ec;
  for (const char* d : kSystemDirs) {
    fs::path p = fs::path("/") / d;
    auto st = fs::symlink_status(p, ec);
    if (ec || !fs::exists(st)) continue;
    made.insert(p.string());
    if (fs::is_symlink(st)) {
      plan.ops.push_back({FsOp::Symlink, fs::read_symlink(p, ec).string(), plan.root + p.string(), 0, true});
    } else if (fs::is_directory(st)) {
      plan.ops.push_back({FsOp::Mkdir, "", plan.root + p.string(), 0755, true});
      plan.ops.push_back({FsOp::BindRo, p.string(), plan.root + p.string(), 0, std::string(d) == "sys"});
    }
  }
  // A minimal /dev: the harmless nodes, the GPU's where there is one, private /dev/shm.
  plan.ops.push_back({FsOp::Mkdir, "", plan.root + "/dev", 0755, true});
  std::vector<std::string> devs = {"null", "zero", "full", "random", "urandom"};
  for (const auto& e : fs::directory_iterator("/dev", ec)) {
    std::string n = e.path().filename().string();
    if (starts_with(n, "nvidia") && fs::is_character_file(e.symlink_status(ec))) devs.push_back(n);
  }
  for (const auto& d : devs) {
    if (!fs::exists("/dev/" + d, ec)) continue;
    plan.ops.push_back({FsOp::Touch, "", plan.root + "/dev/" + d, 0644, true});
    plan.ops.push_back({FsOp::Device, "/dev/" + d, plan.root + "/dev/" + d, 0, d.rfind("nvidia", 0) == 0});
  }
  plan.ops.push_back({FsOp::Symlink, "/proc/self/fd", plan.root + "/dev/fd", 0, true});
  plan.ops.push_back({FsOp::Symlink, "/proc/self/fd/0", plan.root + "/dev/stdin", 0, true});
  plan.ops.push_back({FsOp::Symlink, "/proc/self/fd/1", plan.root + "/dev/stdout", 0, true});
  plan.ops.push_back({FsOp::Symlink, "/proc/self/fd/2", plan.root + "/dev/stderr", 0, true});
  plan.ops.push_back({FsOp::Mkdir, "", plan.root + "/dev/shm", 01777, false});
  plan.ops.push_back({FsOp::Mkdir, "", plan.root + "/proc", 0555, false});
  plan.ops.push_back({FsOp::Proc, "/proc", plan.root + "/proc", 0, false});
  plan.ops.push_back({FsOp::Mkdir, "", plan.root + "/tmp", 01777, false});
  plan.ops.push_back({FsOp::Mkdir, "", plan.root + "/var", 0755, true});
  plan.ops.push_back({FsOp::Mkdir, "", plan.root + "/var/tmp", 01777, false});
  for (const char* d : {"/dev", "/dev/shm", "/proc", "/tmp", "/var", "/var/tmp"}) made.insert(d);
  // What the grader exposes, at its own path; then argv[0].
  for (const auto& p : spec.expose_ro) add_expose(plan, made, p, false);
  for (const auto& p : spec.expose_rw) add_expose(plan, made, p, true);
  if (!spec.argv.empty() && fs::path(spec.argv[0]).is_absolute() && !under_system_dir(spec.argv[0]))
    add_expose(plan, made, spec.argv[0], false);
  // Hidden folders (where a system folder holds them), masked files.
  // (Everything else is absent from the private root anyway; a hidden folder holding an exposed
  // path is left alone.)
  for (const auto& h : spec.hide) {
    fs::path hp = fs::absolute(h, ec).lexically_normal();
    if (ec || !under_system_dir(hp) || !fs::is_directory(hp, ec)) continue;
    bool holds_exposed = false;
    for (const auto* list : {&spec.expose_ro, &spec.expose_rw})
      for (const auto& p : *list) holds_exposed = holds_exposed || under(fs::absolute(p).lexically_normal(), hp);
    if (!holds_exposed) plan.ops.push_back({FsOp::TmpfsRo, "", plan.root + hp.string(), 0, true});
  }
  if (!spec.mask.empty()) plan.ops.push_back({FsOp::Touch, "", plan.mask_file, 0444, false});
  for (const auto& m : spec.mask)
    if (fs::exists(m, ec)) plan.ops.push_back({FsOp::Mask, plan.mask_file, plan.root + fs::absolute(m).lexically_normal().string(), 0, false});
  // The working folder: exposed, or an empty folder of the private root owned by the test.
  fs::path cwd = fs::absolute(spec.cwd).lexically_normal();
  bool exposed = false;
  for (const auto& p : spec.expose_rw) exposed = exposed || under(cwd, fs::absolute(p).lexically_normal());
  for (const auto& p : spec.expose_ro) exposed = exposed || under(cwd, fs::absolute(p).lexically_normal());
  if (!exposed) {
    add_dirs(plan, made, cwd);
    if (uid) plan.ops.push_back({FsOp::Chown, "", plan.root + cwd.string(), uid, false});
  }
  if (user_ns) {
    plan.uid_map = std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1\n";
    plan.gid_map = std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1\n";
  }
  return plan;
}

/// Makes a bind mount read-only and nosuid (recursively), keeping its other (locked) flags.
int make_readonly(const char* dst, bool nosuid) {
  struct mount_attr a {};
  a.attr_set = MOUNT_ATTR_RDONLY | (nosuid ? MOUNT_ATTR_NOSUID : 0);
  if (::mount_setattr(AT_FDCWD, dst, AT_RECURSIVE, &a, sizeof a) == 0) return 0;
  struct statvfs sv {};
  if (::statvfs(dst, &sv) != 0) return -1;
  unsigned long fl = MS_REMOUNT | MS_BIND | MS_RDONLY | (nosuid ? MS_NOSUID : 0);
  if (sv.f_flag & ST_NODEV) fl |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) fl |= MS_NOEXEC;
  if (sv.f_flag & ST_NOSUID) fl |= MS_NOSUID;
  if (sv.f_flag & ST_NOATIME) fl |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) fl |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) fl |= MS_RELATIME;
  return ::mount(nullptr, dst, nullptr, fl, nullptr);
}

int write_proc_file(const char* path, const std::string& text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
  return n == static_cast<ssize_t>(text.size()) ? 0 : -1;
}

/// In the new mount namespace (as its root): builds the private root and pivots into it.
/// Returns false after writing why to `err_fd`.
bool enter_private_root(const RootPlan& plan, int err_fd) {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return put_errno(err_fd, "make mounts private", ""), false;
  if (::mount("tmpfs", plan.root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, plan.tmpfs_options.c_str()) != 0)
    return put_errno(err_fd, "mount the private root tmpfs on", plan.root.c_str()), false;
  ::umask(0);
  for (const FsOp& op : plan.ops) {
    const char* src = op.src.c_str();
    const char* dst = op.dst.c_str();
    int rc = 0;
    const char* what = "";
    switch (op.kind) {
      case FsOp::Mkdir:
        rc = ::mkdir(dst, op.mode);
        if (rc != 0 && errno == EEXIST) rc = 0;
        else if (rc == 0) ::chmod(dst, op.mode);
        what = "create";
        break;
      case FsOp::Touch: {
        int fd = ::open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, op.mode);
        if (fd >= 0) ::close(fd);
        rc = fd >= 0 || errno == EEXIST || errno == EROFS ? 0 : -1;
        if (rc == 0 && op.mode == 0444) {
          struct timespec ts[2] = {{0, 0}, {0, 0}};  // a mask is older than anything built from it
          ::utimensat(AT_FDCWD, dst, ts, 0);
        }
        what = "create";
        break;
      }
      case FsOp::Bind:
        what = "bind";
        rc = ::mount(src, dst, nullptr, MS_BIND | MS_REC, nullptr);
        if (rc == 0) {
          struct mount_attr a {};
          a.attr_set = MOUNT_ATTR_NOSUID;
          ::mount_setattr(AT_FDCWD, dst, AT_RECURSIVE, &a, sizeof a);
        }
        break;
      case FsOp::BindRo:
        what = "bind read-only";
        rc = ::mount(src, dst, nullptr, MS_BIND | MS_REC, nullptr);
        if (rc == 0) rc = make_readonly(dst, true);
        break;
      case FsOp::Device:
        what = "bind device";
        rc = ::mount(src, dst, nullptr, MS_BIND, nullptr);
        break;
      case FsOp::Symlink:
        what = "symlink";
        rc = ::symlink(src, dst);
        if (rc != 0 && errno == EEXIST) rc = 0;
        break;
      case FsOp::Proc:
        what = "mount proc on";
        rc = ::mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
        if (rc != 0) {  // e.g. a container with masked /proc paths: the host's, read-only
          rc = ::mount(src, dst, nullptr, MS_BIND | MS_REC, nullptr);
          if (rc == 0) make_readonly(dst, true);
        }
        break;
      case FsOp::TmpfsRo:
        what = "hide";
        rc = ::mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=16k,mode=0755");
        break;
      case FsOp::Mask:
        what = "mask";
        rc = ::mount(src, dst, nullptr, MS_BIND, nullptr);
        if (rc == 0) rc = make_readonly(dst, true);
        break;
      case FsOp::Chown:
        what = "chown";
        rc = ::chown(dst, op.mode, op.mode);
        break;
    }
    if (rc != 0 && !op.optional) return put_errno(err_fd, what, dst), false;
  }
  ::umask(022);
  if (::mkdir(plan.old_root.c_str(), 0700) != 0) return put_errno(err_fd, "create", plan.old_root.c_str()), false;
  if (::syscall(SYS_pivot_root, plan.root.c_str(), plan.old_root.c_str()) != 0)
    return put_errno(err_fd, "pivot_root into", plan.root.c_str()), false;
  if (::chdir("/") != 0) return put_errno(err_fd, "chdir", "/"), false;
  if (::umount2("/.old", MNT_DETACH) != 0) return put_errno(err_fd, "detach the old root", ""), false;
  ::rmdir("/.old");
  // The network namespace has only a loopback device: bring it up (MPI over TCP needs it).
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s >= 0) {
    struct ifreq ifr {};
    std::memcpy(ifr.ifr_name, "lo", 3);
    if (::ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
      ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
      ::ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    ::close(s);
  }
  return true;
}

int namespace_flags(Isolation level) {
  int f = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
  if (level == Isolation::UserNamespaces) f |= CLONE_NEWUSER;
  return f;
}

/// In the supervisor, after unshare: maps the user's own uid and gid into the new user namespace.
bool write_id_maps(const RootPlan& plan, int err_fd) {
  if (plan.uid_map.empty()) return true;
  if (write_proc_file("/proc/self/setgroups", "deny") != 0 && errno != ENOENT)
    return put_errno(err_fd, "write", "/proc/self/setgroups"), false;
  if (write_proc_file("/proc/self/uid_map", plan.uid_map) != 0) return put_errno(err_fd, "write", "/proc/self/uid_map"), false;
  if (write_proc_file("/proc/self/gid_map", plan.gid_map) != 0) return put_errno(err_fd, "write", "/proc/self/gid_map"), false;
  return true;
}

/// Tries the whole namespace setup once in a throw-away process tree.
bool probe_namespaces(Isolation level) {
  fs::path dir;
  try {
    dir = make_temp_dir("mls-grader-probe");
  } catch (...) {
    return false;
  }
  SandboxSpec spec;
  spec.cwd = dir / "work";
  RootPlan plan = make_plan(spec, dir, 0, level == Isolation::UserNamespaces);
  int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  pid_t p = ::fork();
  if (p == 0) {
    int err = devnull >= 0 ? devnull : 2;
    if (::unshare(namespace_flags(level)) != 0) ::_exit(10);
    if (!write_id_maps(plan, err)) ::_exit(11);
    pid_t init = ::fork();
    if (init == 0) ::_exit(enter_private_root(plan, err) ? 0 : 12);
    int st = 0;
    if (init < 0 || ::waitpid(init, &st, 0) != init) ::_exit(13);
    ::_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 14);
  }
  int st = 0;
  bool ok = p > 0 && ::waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  if (devnull >= 0) ::close(devnull);
  remove_tree(dir);
  return ok;
}

IsolationInfo make_info(Isolation level) {
  IsolationInfo i;
  i.level = level;
  switch (level) {
    case Isolation::Namespaces:
      i.name = "namespaces";
      i.summary = "each test and build step in its own PID, mount, network and IPC namespaces, as a reserved "
                  "unprivileged uid, on a private root holding only the system folders and its own files; "
                  "private /tmp, /var/tmp, /dev/shm; no cgroups: memory by RLIMIT_AS, processes by RLIMIT_NPROC";
      break;
    case Isolation::UserNamespaces:
      i.name = "user-namespaces";
      i.summary = "each test and build step in its own user, PID, mount, network and IPC namespaces (the grader "
                  "is not root: the test keeps the user's uid), on a private root holding only the system "
                  "folders and its own files; private /tmp, /var/tmp, /dev/shm; no cgroups";
      break;
    case Isolation::Uid:
      i.name = "uid";
      i.summary = "no namespaces on this machine: a reserved unprivileged uid, rlimits, every process of the uid "
                  "killed and every file it owns in /tmp, /var/tmp, /dev/shm removed after each run; files are "
                  "hidden only by their permissions (keep the course checkout private)";
      break;
    case Isolation::Rlimits:
      i.name = "rlimits";
      i.summary = "WEAK: not root and no user namespaces: rlimits and the process tree only; a test can read "
                  "whatever this user can (the reference solution included). Grade as root or where user "
                  "namespaces are allowed";
      break;
  }
  return i;
}

Isolation detect() {
  bool root = ::geteuid() == 0;
  Isolation best = root ? Isolation::Namespaces : Isolation::UserNamespaces;
  Isolation fallback = root ? Isolation::Uid : Isolation::Rlimits;
  if (const char* f = std::getenv("MLS_GRADER_ISOLATION"); f && *f) {
    std::string_view v(f);
    if (v == "uid" || v == "rlimits") return fallback;
  }
  return probe_namespaces(best) ? best : fallback;
}

}  // namespace

const IsolationInfo& isolation() {
  static const IsolationInfo info = make_info(detect());
  return info;
}

std::string isolation_line() { return "isolation: " + isolation().name + " (" + isolation().summary + ")"; }

SandboxUid::~SandboxUid() {
  if (fd >= 0) ::close(fd);
}

std::shared_ptr<SandboxUid> reserve_sandbox_uid() {
  if (::geteuid() != 0) return nullptr;
  const char* base_env = std::getenv("MLS_GRADER_UID_BASE");
  unsigned base = base_env ? static_cast<unsigned>(std::strtoul(base_env, nullptr, 10)) : 62000u;
  // A uid some process already runs as (left by anything, e.g. another grader) or a user of
  // this machine is never taken.
  std::set<unsigned> busy;
  for (const auto& p : list_processes())
    if (p.state != 'Z') busy.insert(p.uid);
  for (unsigned k = 0; k < 512; ++k) {
    if (busy.count(base + k) || ::getpwuid(base + k) != nullptr) continue;
    // An abstract socket name is held while the socket is open and vanishes with the process:
    // nothing in the file system that an earlier run could have planted or left.
    int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) break;
    std::string name = "mls-grader-uid-" + std::to_string(base + k);
    struct sockaddr_un addr {};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    socklen_t len = static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + 1 + name.size());
    if (::bind(s, reinterpret_cast<struct sockaddr*>(&addr), len) == 0) {
      auto u = std::make_shared<SandboxUid>();
      u->fd = s;
      u->uid = base + k;
      return u;
    }
    ::close(s);
  }
  mls::fail("sandbox: no free sandbox uid (", base, " to ", base + 511, " are all reserved by running graders)");
}

namespace {
int remove_at(int dirfd, const char* name, bool is_dir, int depth) {
  if (!is_dir) return ::unlinkat(dirfd, name, 0) == 0 ? 1 : 0;
  int n = 0;
  if (depth < 64) {
    int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      DIR* d = ::fdopendir(fd);
      if (d) {
        while (dirent* e = ::readdir(d)) {
          if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
          struct stat st {};
          if (::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
          n += remove_at(fd, e->d_name, S_ISDIR(st.st_mode), depth + 1);
        }
        ::closedir(d);
      } else {
        ::close(fd);
      }
    }
  }
  return n + (::unlinkat(dirfd, name, AT_REMOVEDIR) == 0 ? 1 : 0);
}
}  // namespace

int sweep_uid(unsigned uid) {
  if (uid == 0) return 0;
  kill_uid(uid);
  int removed = 0;
  for (const char* dir : {"/tmp", "/var/tmp", "/dev/shm"}) {
    int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    DIR* d = ::fdopendir(fd);
    if (!d) {
      ::close(fd);
      continue;
    }
    std::vector<std::pair<std::string, bool>> victims;
    while (dirent* e = ::readdir(d)) {
      if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
      struct stat st {};
      if (::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (st.st_uid == uid) victims.emplace_back(e->d_name, S_ISDIR(st.st_mode));
    }
    for (const auto& [name, is_dir] : victims) removed += remove_at(fd, name.c_str(), is_dir, 0);
    ::closedir(d);
  }
  return removed;
}

int count_processes_of_uid(unsigned uid) {
  int n = 0;
  for (const auto& p : list_processes())
    if (p.uid == uid && p.state != 'Z') ++n;
  return n;
}

std::vector<std::string> minimal_env(const fs::path& scratch) {
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + scratch.string(),
                                  "TMPDIR=" + scratch.string(), "LANG=C", "LC_ALL=C"};
  for (const char* k : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "OMP_NUM_THREADS", "MLS_NUM_THREADS"}) {
    if (const char* v = std::getenv(k)) env.push_back(std::string(k) + "=" + v);
  }
  return env;
}

bool binary_uses_sanitizer(const fs::path& binary) {
  std::string data;
  try {
    data = read_file(binary);
  } catch (...) {
    return false;
  }
  return data.find("__asan_init") != std::string::npos || data.find("__tsan_init") != std::string::npos ||
         data.find("__msan_init") != std::string::npos;
}

namespace {

// ---- run_sandboxed, one step per function --------------------------------------------------------
//
//   open_pipes      every pipe and /dev/null, owned by `Fd`s (closed on any return: no leak when a
//                   pipe, or the fork, fails)
//   child_setup     what the forked children need (limits, argv, envp), prepared before fork
//   spawn           forks the supervisor, which runs `supervise` (and, at the namespace levels,
//                   `namespace_init`), then `exec_child`
//   drain           reads stdout, stderr, the channel and the status pipe until they close, the
//                   wall clock runs out or the output cap is reached; the kill sequence is
//                   `Killer::fire`, run once
//   reap            kills what is left, releases and reaps the supervisor
//   collect         the captures into the result

/// A file descriptor, closed by its destructor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  /// Moves the descriptor to a number >= 100 (the child's ends: dup2 onto 0..4 never collides).
  void move_high() {
    if (fd_ >= 0) fd_ = dup_high(fd_);
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd r, w;
};

/// Every descriptor of one run. The grader reads out.r, err.r, cout.r and stat.r, writes cin.w
/// and holds release.w; the other ends are the children's (closed in the grader after fork).
struct RunPipes {
  Pipe out, err, stat, release, cin, cout;
  Fd devnull;
};

/// Opens the pipes (the channel's two only with `channel`) and /dev/null; "" or why not.
std::string open_pipes(RunPipes& p, bool channel) {
  auto make = [](Pipe& pp) {
    int f[2];
    if (::pipe2(f, O_CLOEXEC) != 0) return false;
    pp.r.reset(f[0]);
    pp.w.reset(f[1]);
    return true;
  };
  for (Pipe* pp : {&p.out, &p.err, &p.stat, &p.release})
    if (!make(*pp)) return std::string("pipe: ") + std::strerror(errno);
  if (channel && (!make(p.cin) || !make(p.cout))) return std::string("pipe: ") + std::strerror(errno);
  p.devnull.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (p.devnull.get() < 0) return std::string("/dev/null: ") + std::strerror(errno);
  for (Fd* f : {&p.out.w, &p.err.w, &p.cin.r, &p.cout.w, &p.devnull}) {
    const bool open = f->get() >= 0;
    f->move_high();
    if (open && f->get() < 0) return std::string("fcntl(F_DUPFD): ") + std::strerror(errno);
  }
  return "";
}

/// What the forked test program needs, prepared before fork (the children call no allocator).
struct ChildSetup {
  int devnull = -1, out = -1, err = -1, cin = -1, cout = -1;
  rlim_t cpu = 0, fsize = 0, nofile = 0, nproc = 0, as = 0;
  const char* cwd = nullptr;
  unsigned uid = 0;  ///< 0: keep the current uid
  char* const* argv = nullptr;
  char* const* envp = nullptr;
};

/// The argv, environment and working folder strings the ChildSetup points into.
struct ChildStrings {
  std::vector<std::string> env;
  std::vector<char*> argv, envp;
  std::string cwd;
};

ChildSetup child_setup(const SandboxSpec& spec, const RunPipes& p, unsigned uid, bool drop, ChildStrings& s) {
  const SandboxLimits& L = spec.limits;
  s.env = spec.env;
  if (spec.channel_input) s.env.push_back("MLS_GRADER_FD=3,4");
  for (const auto& a : spec.argv) s.argv.push_back(const_cast<char*>(a.c_str()));
  s.argv.push_back(nullptr);
  for (const auto& e : s.env) s.envp.push_back(const_cast<char*>(e.c_str()));
  s.envp.push_back(nullptr);
  s.cwd = fs::absolute(spec.cwd).lexically_normal().string();
  ChildSetup cs;
  cs.out = p.out.w.get();
  cs.err = p.err.w.get();
  cs.cin = p.cin.r.get();
  cs.cout = p.cout.w.get();
  cs.devnull = p.devnull.get();
  cs.cpu = static_cast<rlim_t>(L.cpu_s > 0 ? L.cpu_s : L.wall_s + 1);
  cs.fsize = static_cast<rlim_t>(L.file_size_mb) << 20;
  cs.nofile = static_cast<rlim_t>(L.open_files);
  // RLIMIT_NPROC counts every process of the uid: without a uid of its own, the user's others too.
  cs.nproc = static_cast<rlim_t>(L.processes);
  if (!drop && ::geteuid() != 0) cs.nproc += static_cast<rlim_t>(count_processes_of_uid(::getuid()));
  cs.as = L.address_space_mb > 0 ? static_cast<rlim_t>(L.address_space_mb) << 20 : 0;
  cs.cwd = s.cwd.c_str();
  cs.uid = uid;
  cs.argv = s.argv.data();
  cs.envp = s.envp.data();
  return cs;
}

void apply_limits(const ChildSetup& c) {
  set_limit(RLIMIT_CORE, 0);
  set_limit(RLIMIT_CPU, c.cpu);
  set_limit(RLIMIT_FSIZE, c.fsize);
  set_limit(RLIMIT_NOFILE, c.nofile);
  set_limit(RLIMIT_NPROC, c.nproc);
  if (c.as > 0) set_limit(RLIMIT_AS, c.as);
}

/// The test program: its own session, fds 0..2 (and 3, 4: the channel) and nothing else, the
/// limits, the working folder, the reserved uid, no new privileges, then exec.
[[noreturn]] void exec_child(const ChildSetup& c) {
  ::setsid();
  ::dup2(c.devnull, 0);
  ::dup2(c.out, 1);
  ::dup2(c.err, 2);
  if (c.cin >= 0) {
    ::dup2(c.cin, 3);
    ::dup2(c.cout, 4);
  }
  ::close_range(c.cin >= 0 ? 5 : 3, ~0u, 0);
  apply_limits(c);
  if (::chdir(c.cwd) != 0) {
    put_str(2, "sandbox: cannot enter the working folder\n");
    ::_exit(126);
  }
  if (c.uid) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(c.uid) != 0 || ::setuid(c.uid) != 0) {
      put_str(2, "sandbox: cannot drop privileges\n");
      ::_exit(126);
    }
  }
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::execve(c.argv[0], c.argv, c.envp);
  put_str(2, "sandbox: cannot execute the program\n");
  ::_exit(127);
}

/// Closes every fd from 3 up except those in `keep` (what other grader threads had open at fork
/// time: their pipes must see EOF).
void close_all_but(std::initializer_list<int> keep_list) {
  int keep[8];
  int n = 0;
  for (int k : keep_list)
    if (k >= 3 && n < 8) {  // insertion sort (no allocation after fork)
      int j = n++;
      for (; j > 0 && keep[j - 1] > k; --j) keep[j] = keep[j - 1];
      keep[j] = k;
    }
  unsigned next = 3;
  for (int i = 0; i < n; ++i) {
    unsigned k = static_cast<unsigned>(keep[i]);
    if (k > next) ::close_range(next, k - 1, 0);
    next = std::max(next, k + 1);
  }
  ::close_range(next, ~0u, 0);
}

void close_child_ends(const ChildSetup& cs) {
  for (int fd : {cs.out, cs.err, cs.cin, cs.cout, cs.devnull})
    if (fd >= 0) ::close(fd);
}

/// Status records on the status pipe: {kChildPid, host pid of the child or of the namespace's
/// init}, {kChildStatus, wait status of the test program}.
constexpr int kChildPid = 1, kChildStatus = 2;

[[noreturn]] void setup_failed(int stat_w, bool report_pid) {
  if (report_pid) write_record(stat_w, kChildPid, 0);
  write_record(stat_w, kChildStatus, 126 << 8);
  ::_exit(1);
}

/// pid 1 of the test's PID namespace: builds the private root, runs the test, reports its status
/// and exits (the kernel then kills whatever is left in the namespace).
[[noreturn]] void namespace_init(const ChildSetup& cs, const RootPlan& plan, int stat_w, int release_r) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::setsid();
  if (!enter_private_root(plan, cs.err)) setup_failed(stat_w, false);
  ::close(release_r);
  pid_t t = ::fork();
  if (t == 0) exec_child(cs);
  close_child_ends(cs);
  if (t < 0) setup_failed(stat_w, false);
  while (true) {
    int st = 0;
    pid_t w = ::waitpid(-1, &st, 0);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) ::_exit(0);
    if (w == t) {
      write_record(stat_w, kChildStatus, st);
      ::_exit(0);
    }
  }
}

/// The supervisor (a child subreaper): starts the child, reaps every other descendant while it
/// runs, reports the child's end, then waits for the grader's release to reap the child.
[[noreturn]] void supervise(const ChildSetup& cs, const RootPlan& plan, bool ns, Isolation level, int stat_w,
                            int release_r) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  close_all_but({stat_w, cs.out, cs.err, cs.cin, cs.cout, cs.devnull, release_r});
  if (ns) {
    if (::unshare(namespace_flags(level)) != 0) {
      put_errno(cs.err, "unshare", "");
      setup_failed(stat_w, true);
    }
    if (!write_id_maps(plan, cs.err)) setup_failed(stat_w, true);
  }
  pid_t c = ::fork();
  if (c == 0) {
    if (ns) namespace_init(cs, plan, stat_w, release_r);
    exec_child(cs);
  }
  close_child_ends(cs);
  write_record(stat_w, kChildPid, c < 0 ? -1 : c);
  if (c < 0) ::_exit(1);
  // The child itself stays a zombie once it has ended, so its pid (and process group id) cannot
  // be reused by an unrelated process while the grader still kills by them.
  while (true) {
    siginfo_t si{};
    if (::waitid(P_ALL, 0, &si, WEXITED | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (si.si_pid == c) {
      if (!ns) {  // at the namespace levels the init reports the test program's own status
        int st = si.si_code == CLD_EXITED ? (si.si_status & 0xff) << 8 : (si.si_status & 0x7f);
        write_record(stat_w, kChildStatus, st);
      }
      break;
    }
    ::waitpid(si.si_pid, nullptr, 0);
  }
  ::close(stat_w);  // the grader's pipes see EOF once the test's own writers are gone
  char b;
  while (::read(release_r, &b, 1) < 0 && errno == EINTR) {
  }
  while (true) {
    pid_t w = ::waitpid(-1, nullptr, 0);
    if (w < 0 && errno != EINTR) break;  // ECHILD: every descendant is reaped
  }
  ::_exit(0);
}

/// The kill sequence of a run, fired once (timeout, output cap, or the child's end), then once
/// more by `reap` after the pipes are drained.
struct Killer {
  pid_t supervisor = -1;
  pid_t child = 0;  ///< from the status pipe; 0 until known
  unsigned uid = 0;
  bool fired = false;
  Clock::time_point drain_deadline{};
  void fire() {
    if (fired) return;
    kill_everything(supervisor, child, uid);
    fired = true;
    drain_deadline = Clock::now() + std::chrono::seconds(5);  // what is still in the pipes
  }
};

/// What the grader reads while the run lasts.
struct Streams {
  Capture out, err;
  std::string channel, status;
  std::size_t channel_bytes = 0;
  std::size_t status_used = 0;
  bool child_done = false;
  explicit Streams(const SandboxLimits& L) : out(L.keep_head, L.keep_tail), err(L.keep_head, L.keep_tail) {}
};

/// Takes the complete status records read so far: the child's pid, then its wait status.
void take_status_records(Streams& s, Killer& k, SandboxResult& r, Clock::time_point t0) {
  while (s.status.size() - s.status_used >= 2 * sizeof(int)) {
    int rec[2];
    std::memcpy(rec, s.status.data() + s.status_used, sizeof rec);
    s.status_used += sizeof rec;
    if (rec[0] == kChildPid && k.child == 0) k.child = rec[1];
    if (rec[0] == kChildStatus && !s.child_done) {
      int st = rec[1];
      s.child_done = true;
      if (WIFEXITED(st)) {
        r.exited = true;
        r.exit_code = WEXITSTATUS(st);
      } else if (WIFSIGNALED(st)) {
        r.signal = WTERMSIG(st);
      }
      r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
      k.fire();  // the child is gone: whatever it left behind is killed now, then the pipes drain
    }
  }
}

/// Reads the grader's ends of the pipes until they all close, the wall clock runs out (then
/// timed_out), the output cap is reached (then output_limit), or the drain after a kill ends.
void drain(RunPipes& p, const SandboxSpec& spec, Clock::time_point t0, Killer& k, Streams& s, SandboxResult& r) {
  const SandboxLimits& L = spec.limits;
  Fd* fds[4] = {&p.out.r, &p.err.r, &p.cout.r, &p.stat.r};
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(L.wall_s));
  char buf[65536];
  while (true) {
    pollfd pfd[4];
    int np = 0, idx[4];
    for (int i = 0; i < 4; ++i)
      if (fds[i]->get() >= 0) {
        pfd[np] = {fds[i]->get(), POLLIN, 0};
        idx[np++] = i;
      }
    if (np == 0) return;
    auto now = Clock::now();
    if (!k.fired && now >= deadline) {
      r.timed_out = true;
      k.fire();
    }
    if (k.fired && now >= k.drain_deadline) return;
    int rc = ::poll(pfd, np, 50);
    if (rc < 0 && errno != EINTR) return;
    for (int j = 0; j < np && rc > 0; ++j) {
      if (!(pfd[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int i = idx[j];
      ssize_t n = ::read(fds[i]->get(), buf, sizeof buf);
      if (n <= 0) {
        fds[i]->reset();
        continue;
      }
      const std::size_t un = static_cast<std::size_t>(n);
      if (i == 0) s.out.add(buf, un);
      if (i == 1) s.err.add(buf, un);
      if (i == 2 && !r.channel_limit) {
        // The channel: handed to the caller's decoder as it arrives, or kept up to its cap. Past
        // the cap (or when the decoder refuses more) the group is killed: a flood ends in
        // seconds, and the grader never holds more than the cap.
        s.channel_bytes += un;
        bool more = s.channel_bytes <= L.channel_cap;
        if (more && spec.on_channel) more = spec.on_channel(std::string_view(buf, un));
        else if (more) s.channel.append(buf, un);
        if (!more) {
          r.channel_limit = true;
          k.fire();
        }
      }
      if (i == 3) {
        s.status.append(buf, un);
        take_status_records(s, k, r, t0);
      }
    }
    if (!k.fired && s.out.total + s.err.total > L.output_cap) {
      r.output_limit = true;
      k.fire();
    }
  }
}

/// After the drain: kills everything of the run, lets the supervisor reap the child and every
/// descendant and exit (it is killed if it does not); no pid of the run is used after this.
void reap(RunPipes& p, Killer& k) {
  for (Fd* f : {&p.out.r, &p.err.r, &p.cout.r, &p.stat.r}) f->reset();
  kill_everything(k.supervisor, k.child, k.uid);
  p.release.w.reset();
  int st = 0;
  for (int i = 0; i < 500; ++i) {
    pid_t w = ::waitpid(k.supervisor, &st, WNOHANG);
    if (w == k.supervisor || (w < 0 && errno != EINTR)) return;
    ::usleep(2000);
  }
  ::kill(k.supervisor, SIGKILL);
  ::waitpid(k.supervisor, &st, 0);
}

void collect(Streams& s, Clock::time_point t0, SandboxResult& r) {
  if (!s.child_done) r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.stdout_bytes = s.out.total;
  r.stderr_bytes = s.err.total;
  r.out = s.out.text();
  r.err = s.err.text();
  r.channel = std::move(s.channel);
  r.channel_bytes = s.channel_bytes;
}

/// The empty folder the private root's tmpfs is mounted on (in the test's mount namespace only);
/// removed after the run.
struct MountPoint {
  fs::path p;
  ~MountPoint() {
    if (!p.empty()) ::rmdir(p.c_str());
  }
};

}  // namespace

SandboxResult run_sandboxed(const SandboxSpec& spec) {
  SandboxResult r;
  if (spec.argv.empty()) {
    r.error = "no program given";
    return r;
  }
  const auto t0 = Clock::now();
  const bool root = ::geteuid() == 0;
  const Isolation level = spec.drop_privileges ? isolation().level : (root ? Isolation::Uid : Isolation::Rlimits);
  const bool ns = spec.drop_privileges && (level == Isolation::Namespaces || level == Isolation::UserNamespaces);
  const bool drop = spec.drop_privileges && root;
  r.isolation = spec.drop_privileges ? isolation().name : "none (trusted run)";

  std::shared_ptr<SandboxUid> lease = spec.uid;
  RootPlan plan;
  MountPoint mount_point;
  try {
    if (drop && !lease) lease = reserve_sandbox_uid();
    if (ns) mount_point.p = make_temp_dir("mls-grader-root");
  } catch (const std::exception& e) {
    r.error = e.what();
    return r;
  }
  const unsigned uid = drop && lease ? lease->uid : 0;
  std::error_code ec;
  fs::create_directories(spec.cwd, ec);
  if (uid && !ns && ::chown(spec.cwd.c_str(), uid, uid) != 0) {
    r.error = "cannot hand the working folder to the sandbox uid";
    return r;
  }
  if (ns) plan = make_plan(spec, mount_point.p, uid, level == Isolation::UserNamespaces);

  RunPipes pipes;
  if (std::string why = open_pipes(pipes, spec.channel_input.has_value()); !why.empty()) {
    r.error = why;
    return r;
  }
  ChildStrings strings;
  const ChildSetup cs = child_setup(spec, pipes, uid, drop, strings);
  pid_t sup = ::fork();
  if (sup < 0) {
    r.error = std::string("fork: ") + std::strerror(errno);
    return r;  // `pipes` closes every descriptor
  }
  if (sup == 0) supervise(cs, plan, ns, level, pipes.stat.w.get(), pipes.release.r.get());

  // The children's ends are theirs now; the channel's input is written once and closed.
  for (Fd* f : {&pipes.out.w, &pipes.err.w, &pipes.cin.r, &pipes.cout.w, &pipes.devnull, &pipes.stat.w, &pipes.release.r})
    f->reset();
  if (spec.channel_input) {
    std::string msg = *spec.channel_input + "\n";
    ssize_t n = ::write(pipes.cin.w.get(), msg.data(), msg.size());
    (void)n;
    pipes.cin.w.reset();
  }
  r.started = true;
  Killer killer{sup, 0, uid};
  Streams streams(spec.limits);
  drain(pipes, spec, t0, killer, streams, r);
  reap(pipes, killer);
  // The uid level: nothing of the run may outlive it, in the shared temporary folders either.
  if (uid && !ns && !spec.uid) sweep_uid(uid);
  collect(streams, t0, r);
  return r;
}

}  // namespace mls::grader
