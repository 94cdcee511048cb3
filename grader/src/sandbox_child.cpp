// The forked side of a sandboxed run: the supervisor, the init of the test's PID namespace (at the
// namespace levels) and the test program up to its exec. All of it runs after fork in a copy of a
// multi-threaded grader, so it calls no allocator and no stdio: system calls only, on what
// `child_setup` (sandbox.cpp) and `make_plan` (sandbox_root.cpp) prepared before fork.
#include "sandbox_internal.hpp"

#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>

namespace mls::grader::sandbox_detail {

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace mls::grader::sandbox_detail
