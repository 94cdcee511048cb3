#pragma once
// Helpers of lab 4's JIT and tuning-database tests: environment variables set for a scope, and
// child processes (fork) started together behind a barrier.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kernels_test {

/// Sets (or, with nullopt, unsets) an environment variable for a scope; restores it after.
class EnvGuard {
 public:
  EnvGuard(std::string name, const std::optional<std::string>& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) saved_ = old;
    if (value)
      ::setenv(name_.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ~EnvGuard() {
    if (saved_)
      ::setenv(name_.c_str(), saved_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

/// Runs `body(i)` in `n` forked processes that start together (each waits on one pipe, closed
/// once all exist); returns their exit codes. A child exits 0 when body returns true, 1 when it
/// returns false, 2 when it throws (the message on stderr); it never returns into Catch2.
inline std::vector<int> run_in_processes(int n, const std::function<bool(int)>& body) {
  int gate[2];
  if (::pipe(gate) != 0) return std::vector<int>(static_cast<std::size_t>(n), -1);
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(gate[1]);
      char c;
      while (::read(gate[0], &c, 1) > 0) {
      }
      int code = 2;
      try {
        code = body(i) ? 0 : 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", i, e.what());
      }
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);  // every child reads EOF: all start now
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid) {
      codes.push_back(-1);
      continue;
    }
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

}  // namespace kernels_test
