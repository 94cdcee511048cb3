#pragma once
/// What build.cpp's steps share with the files above it (not a public interface): the clock, and
/// how one build command runs (sandboxed for a grading copy, trusted for the instructor's builds).
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mls/grader/build.hpp"
#include "mls/grader/sandbox.hpp"

namespace mls::grader::detail {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// How a build step runs: a grading copy's steps sandboxed (the tree read-only, the build folder
/// writable), the instructor's own builds trusted.
struct StepEnv {
  bool sandbox = false;
  std::shared_ptr<SandboxUid> uid;
  fs::path tree, build_dir;
  std::vector<fs::path> hide;    ///< never visible (the instructor's checkout, the submission)
  double memory_mb = 4096, cpu_s = 900;
  int jobs = 1;
  std::vector<std::string> extra_env;  ///< trusted builds: ccache's settings
};
/// Runs one build command (sandboxed or trusted, see StepEnv) in `cwd`.
/// `capture` > 0: the whole output is kept, up to that many bytes (then the step is stopped).
SandboxResult run_tool(const std::vector<std::string>& argv, const fs::path& cwd, double wall_s, const StepEnv& env,
                       std::size_t capture = 0);
/// The full path of a program in /usr/local/bin, /usr/bin or /bin (else the name).
std::string which(const std::string& prog);
/// Appends a step's output to the build log; true when it succeeded.
bool step(BuildResult& b, const SandboxResult& r, const std::string& what);

}  // namespace mls::grader::detail
