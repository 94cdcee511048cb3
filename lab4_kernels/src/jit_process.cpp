// Lab 4 internal: run a program with a time limit and capture its output (posix_spawn, a pipe, poll).
#include "jit_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "mls/common/file.hpp"

extern char** environ;

namespace mls::kernels::jit::detail {

namespace {

using Clock = std::chrono::steady_clock;

/// The environment of the child: ours, with LC_ALL=C (plain ASCII quotes and English messages).
std::vector<std::string> child_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "LC_ALL=", 7) != 0) env.emplace_back(*e);
  env.emplace_back("LC_ALL=C");
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> p;
  for (auto& s : v) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

/// Milliseconds left until `deadline` (0 when past it).
int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1'000'000));
}

/// Starts the child with its output on `out_fd`; returns its pid or -errno.
pid_t spawn(const std::vector<std::string>& argv, int out_fd) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  // Its own process group, so a timeout kills the driver and what it started (cc1plus, as, ld);
  // default signal handling whatever ours is.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> args = argv, env = child_environment();
  std::vector<char*> cargs = c_strings(args), cenv = c_strings(env);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, cargs[0], &fa, &attr, cargs.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return rc == 0 ? pid : -rc;
}

/// Reads the pipe until EOF or the deadline; keeps at most `max_output` bytes. True at EOF.
bool drain(int fd, Clock::time_point deadline, std::size_t max_output, std::string& output) {
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;  // the deadline
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    const std::size_t keep = std::min<std::size_t>(static_cast<std::size_t>(n), max_output - std::min(max_output, output.size()));
    output.append(buf, keep);
  }
}

}  // namespace

std::string ProcessResult::describe(double timeout_s) const {
  if (spawn_errno != 0) return "could not start: " + mls::errno_text(spawn_errno);
  if (timed_out) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "timed out after %g s and was killed", timeout_s);
    return buf;
  }
  if (exited) return "exit status " + std::to_string(exit_code);
  return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
}

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s, std::size_t max_output) {
  ProcessResult res;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    res.spawn_errno = errno;
    return res;
  }
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  const pid_t pid = spawn(argv, fds[1]);
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    res.spawn_errno = -pid;
    return res;
  }
  const bool eof = drain(fds[0], deadline, max_output, res.output);
  int status = 0;
  bool reaped = false;
  for (;;) {  // the child may close its output before it exits: wait for it, up to the deadline
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      reaped = true;
      break;
    }
    if (w < 0 && errno != EINTR) break;
    if (!eof || ms_left(deadline) == 0) {
      res.timed_out = true;
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      reaped = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (res.timed_out) ::kill(-pid, SIGKILL);  // what the driver started, if still there
  ::close(fds[0]);
  if (!reaped) {  // someone else reaped it (SIGCHLD ignored): its status is unknown
    res.exited = true;
    res.exit_code = -1;
    return res;
  }
  res.exited = WIFEXITED(status);
  res.exit_code = res.exited ? WEXITSTATUS(status) : 0;
  res.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return res;
}

}  // namespace mls::kernels::jit::detail
