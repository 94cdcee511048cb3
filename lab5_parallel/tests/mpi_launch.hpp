#pragma once
/// Lets a test case of the MPI test program run under mpirun on its own: started directly (by
/// mls-grader, which runs one test case per process, or by hand), a test case re-runs just
/// itself as `run_mpi.sh 2 <this program> <its name>` and passes when every rank passed. Started
/// by mpirun (CTest's lab5:mpi:np2 and np4), it runs in place.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/grader_protocol.hpp"
#include "mls/common/rng.hpp"
#include "mls/observe.hpp"
#include "mls/parallel/mpi.hpp"
#include "run_mpi_script.hpp"

namespace mls::parallel::testing {

/// Catch's escaping of a test name on the command line (',', '[', ']', '"', '~', '\').
inline std::string escape_catch_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == ',' || c == '[' || c == ']' || c == '"' || c == '~' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

/// Runs argv, returns (exit status, stdout+stderr).
inline std::pair<int, std::string> run_capture(const std::vector<std::string>& args) {
  int fds[2];
  MLS_CHECK(::pipe(fds) == 0, "mpi test launcher: pipe failed");
  pid_t pid = ::fork();
  MLS_CHECK(pid >= 0, "mpi test launcher: fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);  // mpirun in its own process group: its signals never reach this program
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::perror("execv");
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t k; (k = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(k));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

/// Observes, rank by rank, what each rank of a relaunched test observed (the files the harness
/// listener of each rank wrote, mls_grader_listener.hpp), labelled "rank R: <label>"; a rank that
/// wrote none observes that. Removes the folder.
inline void forward_rank_observations(const std::string& dir, int np) {
  for (int r = 0; r < np; ++r) {
    const std::string path = dir + "/rank" + std::to_string(r) + ".obs";
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) {
      mls::testing::observe("rank " + std::to_string(r) + ": observations written", false);
      continue;
    }
    std::string text;
    char buf[65536];
    for (std::size_t k; (k = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, k);
    std::fclose(f);
    ::unlink(path.c_str());
    for (std::size_t b = 0, e; b < text.size(); b = e + 1) {
      e = text.find('\n', b);
      if (e == std::string::npos) e = text.size();
      mls::grader_protocol::ObservationRecord rec;
      if (!mls::grader_protocol::decode_observation(std::string_view(text).substr(b, e - b), rec)) continue;
      mls::testing::observe(mls::testing::Observation{"rank " + std::to_string(r) + ": " + rec.label, rec.kind, rec.text,
                                                      rec.shape, rec.strides, rec.offset, rec.values,
                                                      mls::testing::Tolerance{rec.rtol, rec.atol}});
    }
  }
  ::rmdir(dir.c_str());
}

/// True when the caller should return: the test case ran under mpirun in a child job.
inline bool relaunched_under_mpirun(int np = 2) {
  if (under_mpirun()) return false;
  char self[4096];
  const ssize_t k = ::readlink("/proc/self/exe", self, sizeof self - 1);
  MLS_CHECK(k > 0, "mpi test launcher: cannot read /proc/self/exe");
  self[k] = 0;
  const std::string name = Catch::getResultCapture().getCurrentTestName();
  // Graded (mls-grader): the ranks' observations come back through files, with the salt.
  std::string obs_dir;
  if (mls::testing::observing()) {
    const char* t = std::getenv("TMPDIR");
    std::string pattern = std::string(t && *t ? t : "/tmp") + "/mls_mpi_obs_XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back(0);
    if (::mkdtemp(buf.data())) obs_dir = buf.data();
    if (!obs_dir.empty()) {
      char salt[32];
      std::snprintf(salt, sizeof salt, "%llx", static_cast<unsigned long long>(mls::rng_salt()));
      ::setenv("MLS_OBSERVE_RANKS", obs_dir.c_str(), 1);
      ::setenv("MLS_OBSERVE_SALT", salt, 1);
    }
  }
  auto [rc, out] =
      run_capture({"/bin/sh", "-c", kRunMpiScript, "run_mpi.sh", std::to_string(np), self, escape_catch_name(name)});
  if (!obs_dir.empty()) {
    ::unsetenv("MLS_OBSERVE_RANKS");
    ::unsetenv("MLS_OBSERVE_SALT");
    forward_rank_observations(obs_dir, np);
  }
  const std::string tail = out.size() > 6000 ? out.substr(out.size() - 6000) : out;
  if (out.find("SKIPPED: mpirun not found") != std::string::npos) {
    WARN("SKIPPED: mpirun not found: the MPI test '" << name << "' did not run");
    return true;
  }
  if (rc != 0 && out.find("not implemented:") != std::string::npos) {
    const auto at = out.find("not implemented:");
    throw NotImplemented(out.substr(at, out.find('\n', at) - at));
  }
  INFO("mpirun -np " << np << " exited with " << rc << "; output:\n" << tail);
  CHECK(rc == 0);
  // Every rank's Catch2 summary: "All tests passed", or, in the oracle-free twin (MLS_GRADED_BUILD)
  // where a rank may make no assertion, "test cases: 1 | 1 passed" with "assertions: - none -"
  // (rc 0 already says that no assertion failed).
  const bool ranks_passed = out.find("All tests passed") != std::string::npos ||
                            (out.find("1 passed") != std::string::npos && out.find("failed") == std::string::npos);
  CHECK(ranks_passed);
  return true;
}

}  // namespace mls::parallel::testing

/// First line of every MPI test case.
#define MLS_MPI_TEST(np)                                                      \
  do {                                                                        \
    if (::mls::parallel::testing::relaunched_under_mpirun(np)) return;        \
  } while (0)
