#pragma once
// Lab 4 internal: runs a program (an argument vector, no shell) with a time limit and captures its
// output; used by the JIT to run the compiler. Not part of the public API.
#include <string>
#include <vector>

namespace mls::kernels::jit::detail {

struct ProcessResult {
  int spawn_errno = 0;     ///< non-zero: the program could not be started (errno of posix_spawn)
  bool timed_out = false;  ///< killed (its whole process group) after the time limit
  bool exited = false;     ///< ended by exit(); else by `signal`
  int exit_code = 0;
  int signal = 0;
  std::string output;      ///< stdout and stderr together, at most `max_output` bytes kept
  /// "exit status 1", "killed by signal 9", "timed out after 5 s", "could not start: <strerror>".
  std::string describe(double timeout_s) const;
  bool ok() const { return spawn_errno == 0 && !timed_out && exited && exit_code == 0; }
};

/// Runs argv[0] (a path) with arguments argv, stdin from /dev/null, stdout and stderr into one
/// pipe, LC_ALL=C, in its own process group; after `timeout_s` seconds the group is killed.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s,
                          std::size_t max_output = 1 << 20);

}  // namespace mls::kernels::jit::detail
