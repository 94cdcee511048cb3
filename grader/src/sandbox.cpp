#include "mls/grader/sandbox.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

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

/// A uid reserved for one run, held by an flock so concurrent graders never share one.
struct UidLease {
  int fd = -1;
  unsigned uid = 0;
  UidLease() = default;
  UidLease(const UidLease&) = delete;
  UidLease& operator=(const UidLease&) = delete;
  ~UidLease() {
    if (fd >= 0) ::close(fd);
  }
  bool acquire() {
    const char* base_env = std::getenv("MLS_GRADER_UID_BASE");
    unsigned base = base_env ? static_cast<unsigned>(std::strtoul(base_env, nullptr, 10)) : 61000u;
    for (unsigned k = 0; k < 512; ++k) {
      std::string path = "/tmp/mls-grader-uid-" + std::to_string(base + k) + ".lock";
      int f = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      if (f < 0) continue;
      if (::flock(f, LOCK_EX | LOCK_NB) == 0) {
        fd = f;
        uid = base + k;
        return true;
      }
      ::close(f);
    }
    return false;
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

/// Kills the supervised tree: the child's group, every descendant of the supervisor, and (when a
/// uid was reserved) every process of that uid. Repeats until nothing is left or gives up.
void kill_everything(pid_t supervisor, pid_t child, const UidLease* lease) {
  for (int round = 0; round < 100; ++round) {
    if (child > 0) ::kill(-child, SIGKILL);
    if (lease && lease->fd >= 0) kill_uid(lease->uid);
    auto ds = descendants(supervisor);
    for (int p : ds) ::kill(p, SIGKILL);
    bool uid_clear = !(lease && lease->fd >= 0) || count_processes_of_uid(lease->uid) == 0;
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

void write_int(int fd, int v) {
  ssize_t n = ::write(fd, &v, sizeof v);
  (void)n;
}

}  // namespace

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

SandboxResult run_sandboxed(const SandboxSpec& spec) {
  SandboxResult r;
  if (spec.argv.empty()) {
    r.error = "no program given";
    return r;
  }
  auto t0 = Clock::now();
  const SandboxLimits& L = spec.limits;

  UidLease lease;
  bool drop = spec.drop_privileges && ::geteuid() == 0;
  if (drop && !lease.acquire()) {
    r.error = "no free sandbox uid (all lock files /tmp/mls-grader-uid-*.lock are held)";
    return r;
  }
  std::error_code ec;
  fs::create_directories(spec.cwd, ec);
  if (drop) {
    for (const auto& root : spec.chown_paths) {
      ::lchown(root.c_str(), lease.uid, lease.uid);
      for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec))
        ::lchown(it->path().c_str(), lease.uid, lease.uid);
    }
    if (::chown(spec.cwd.c_str(), lease.uid, lease.uid) != 0) {
      r.error = "cannot hand the scratch folder to the sandbox uid";
      return r;
    }
  }

  // Everything the children need is prepared before fork(): they call no allocator.
  std::vector<std::string> env = spec.env;
  if (spec.channel_input) env.push_back("MLS_GRADER_FD=3,4");
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::string cwd = spec.cwd.string();

  rlim_t nproc = static_cast<rlim_t>(L.processes);
  if (!drop && ::geteuid() != 0) nproc += static_cast<rlim_t>(count_processes_of_uid(::getuid()));
  rlim_t cpu = static_cast<rlim_t>(L.cpu_s > 0 ? L.cpu_s : L.wall_s + 1);

  int out_p[2], err_p[2], cin_p[2] = {-1, -1}, cout_p[2] = {-1, -1}, stat_p[2];
  if (::pipe2(out_p, O_CLOEXEC) || ::pipe2(err_p, O_CLOEXEC) || ::pipe2(stat_p, O_CLOEXEC) ||
      (spec.channel_input && (::pipe2(cin_p, O_CLOEXEC) || ::pipe2(cout_p, O_CLOEXEC)))) {
    r.error = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  // Child-side ends go to high fd numbers so dup2 onto 0..4 never collides.
  int c_out = dup_high(out_p[1]), c_err = dup_high(err_p[1]);
  int c_cin = spec.channel_input ? dup_high(cin_p[0]) : -1;
  int c_cout = spec.channel_input ? dup_high(cout_p[1]) : -1;
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int devnull_h = dup_high(devnull);

  pid_t sup = ::fork();
  if (sup < 0) {
    r.error = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  if (sup == 0) {
    // ---- supervisor: reaps every descendant (subreaper), reports the child's status ----
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    {
      // Close what other grader threads had open at fork time (their pipes must see EOF).
      int keep[6] = {stat_p[1], c_out, c_err, c_cin, c_cout, devnull_h};
      for (int i = 1; i < 6; ++i)
        for (int j = i; j > 0 && keep[j - 1] > keep[j]; --j) std::swap(keep[j - 1], keep[j]);
      unsigned next = 3;
      for (int k : keep) {
        if (k < 3) continue;
        if (static_cast<unsigned>(k) > next) ::close_range(next, static_cast<unsigned>(k) - 1, 0);
        next = static_cast<unsigned>(k) + 1;
      }
      ::close_range(next, ~0u, 0);
    }
    pid_t c = ::fork();
    if (c == 0) {
      // ---- the sandboxed child ----
      ::setsid();
      ::dup2(devnull_h, 0);
      ::dup2(c_out, 1);
      ::dup2(c_err, 2);
      if (c_cin >= 0) {
        ::dup2(c_cin, 3);
        ::dup2(c_cout, 4);
      }
      ::close_range(c_cin >= 0 ? 5 : 3, ~0u, 0);
      set_limit(RLIMIT_CORE, 0);
      set_limit(RLIMIT_CPU, cpu);
      set_limit(RLIMIT_FSIZE, static_cast<rlim_t>(L.file_size_mb) << 20);
      set_limit(RLIMIT_NOFILE, static_cast<rlim_t>(L.open_files));
      set_limit(RLIMIT_NPROC, nproc);
      if (L.address_space_mb > 0) set_limit(RLIMIT_AS, static_cast<rlim_t>(L.address_space_mb) << 20);
      if (::chdir(cwd.c_str()) != 0) {
        static const char msg[] = "sandbox: cannot enter the scratch folder\n";
        ssize_t n = ::write(2, msg, sizeof msg - 1);
        (void)n;
        ::_exit(126);
      }
      if (drop) {
        if (::setgroups(0, nullptr) != 0 || ::setgid(lease.uid) != 0 || ::setuid(lease.uid) != 0) {
          static const char msg[] = "sandbox: cannot drop privileges\n";
          ssize_t n = ::write(2, msg, sizeof msg - 1);
          (void)n;
          ::_exit(126);
        }
      }
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::execve(argv[0], argv.data(), envp.data());
      static const char msg[] = "sandbox: cannot execute the program\n";
      ssize_t n = ::write(2, msg, sizeof msg - 1);
      (void)n;
      ::_exit(127);
    }
    for (int fd : {c_out, c_err, c_cin, c_cout, devnull_h})
      if (fd >= 0) ::close(fd);
    write_int(stat_p[1], c < 0 ? -1 : c);
    if (c < 0) ::_exit(1);
    while (true) {
      int st = 0;
      pid_t w = ::waitpid(-1, &st, 0);
      if (w < 0) {
        if (errno == EINTR) continue;
        break;  // ECHILD: every descendant is reaped
      }
      if (w == c) write_int(stat_p[1], st);
    }
    ::_exit(0);
  }

  // ---- grader side ----
  for (int fd : {c_out, c_err, c_cin, c_cout, devnull_h, stat_p[1]})
    if (fd >= 0) ::close(fd);
  if (spec.channel_input) {
    std::string msg = *spec.channel_input + "\n";
    ssize_t n = ::write(cin_p[1], msg.data(), msg.size());
    (void)n;
    ::close(cin_p[1]);
  }
  r.started = true;
  Capture out(L.keep_head, L.keep_tail), err(L.keep_head, L.keep_tail);
  std::string channel;
  int fds[4] = {out_p[0], err_p[0], spec.channel_input ? cout_p[0] : -1, stat_p[0]};
  std::string stat_buf;
  pid_t child = 0;
  bool child_done = false, killed = false;
  auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(L.wall_s));
  Clock::time_point drain_deadline{};
  char buf[65536];

  while (true) {
    bool any_open = false;
    for (int fd : fds) any_open = any_open || fd >= 0;
    if (!any_open) break;
    auto now = Clock::now();
    if (!killed && now >= deadline) {
      r.timed_out = true;
      kill_everything(sup, child, drop ? &lease : nullptr);
      killed = true;
      drain_deadline = Clock::now() + std::chrono::seconds(5);
    }
    if (killed && now >= drain_deadline) break;
    pollfd pfd[4];
    int np = 0, idx[4];
    for (int i = 0; i < 4; ++i)
      if (fds[i] >= 0) {
        pfd[np] = {fds[i], POLLIN, 0};
        idx[np++] = i;
      }
    int timeout_ms = 50;
    int rc = ::poll(pfd, np, timeout_ms);
    if (rc < 0 && errno != EINTR) break;
    for (int k = 0; k < np && rc > 0; ++k) {
      if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int i = idx[k];
      ssize_t n = ::read(fds[i], buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i]);
        fds[i] = -1;
        continue;
      }
      if (i == 0) out.add(buf, n);
      if (i == 1) err.add(buf, n);
      if (i == 2 && channel.size() < (1u << 20)) channel.append(buf, std::min<std::size_t>(n, (1u << 20) - channel.size()));
      if (i == 3) {
        stat_buf.append(buf, n);
        if (child == 0 && stat_buf.size() >= sizeof(int)) std::memcpy(&child, stat_buf.data(), sizeof(int));
        if (!child_done && stat_buf.size() >= 2 * sizeof(int)) {
          int st;
          std::memcpy(&st, stat_buf.data() + sizeof(int), sizeof(int));
          child_done = true;
          if (WIFEXITED(st)) {
            r.exited = true;
            r.exit_code = WEXITSTATUS(st);
          } else if (WIFSIGNALED(st)) {
            r.signal = WTERMSIG(st);
          }
          r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
          // The child is gone: whatever it left behind is killed now, then the pipes drain.
          if (!killed) {
            kill_everything(sup, child, drop ? &lease : nullptr);
            killed = true;
            drain_deadline = Clock::now() + std::chrono::seconds(5);
          }
        }
      }
    }
    if (!killed && out.total + err.total > L.output_cap) {
      r.output_limit = true;
      kill_everything(sup, child, drop ? &lease : nullptr);
      killed = true;
      drain_deadline = Clock::now() + std::chrono::seconds(5);
    }
  }
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  if (!killed) kill_everything(sup, child, drop ? &lease : nullptr);
  // The supervisor exits once every descendant is reaped; it is killed if it does not.
  int st = 0;
  for (int i = 0; i < 500; ++i) {
    pid_t w = ::waitpid(sup, &st, WNOHANG);
    if (w == sup || (w < 0 && errno != EINTR)) {
      sup = -1;
      break;
    }
    if (i % 50 == 49) kill_everything(sup, child, drop ? &lease : nullptr);
    ::usleep(2000);
  }
  if (sup > 0) {
    ::kill(sup, SIGKILL);
    ::waitpid(sup, &st, 0);
  }
  if (!child_done) r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.stdout_bytes = out.total;
  r.stderr_bytes = err.total;
  r.out = out.text();
  r.err = err.text();
  r.channel = std::move(channel);
  return r;
}

}  // namespace mls::grader
