// The grader's side of a sandboxed run (`run_sandboxed`: the pipes, the fork of the supervisor,
// the drain with its limits, the kill sequence, the reaping) and the sandbox uids (reservation,
// the process tree of a uid, the sweep of the uid level). The forked side (supervisor, namespace
// init, the test program up to exec) is in sandbox_child.cpp; the private root of the namespace
// levels and the detection of the isolation level are in sandbox_root.cpp.
#include "mls/grader/sandbox.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "mls/common/error.hpp"
#include "mls/grader/util.hpp"
#include "sandbox_internal.hpp"

namespace mls::grader {

using namespace sandbox_detail;

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

}  // namespace

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
//                   `namespace_init`), then `exec_child` (sandbox_child.cpp)
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
