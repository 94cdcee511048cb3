#pragma once
// Shared helpers of the grader tests.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "mls/grader/grade.hpp"
#include "mls/grader/manifest.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader::testing {

inline std::filesystem::path repo_root() { return MLS_GRADER_TEST_ROOT; }
inline std::filesystem::path fixture_manifest_path() { return repo_root() / "grader/tests/fixture_lab/lab.json"; }
inline Manifest fixture_manifest() { return load_manifest(fixture_manifest_path()); }
inline std::filesystem::path submission(const std::string& name) { return repo_root() / "grader/tests/submissions" / name; }

inline GradeOptions fixture_grade_options(int jobs = 2) {
  GradeOptions go;
  go.build.root = repo_root();
  go.build.jobs = 1;
  go.build.harness_lib = default_harness_lib();
  go.build.common_lib = default_common_lib();
  go.build.cache_dir = default_binary_dir() / "grader-cache";
  go.run.jobs = jobs;
  go.run.gpu_present = false;  // the fixture's GPU test is SKIPPED on every machine
  return go;
}

/// Writes `text` to `dir/name`, creating folders.
inline void put(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  std::filesystem::create_directories((dir / name).parent_path());
  write_file_atomic(dir / name, text);
}

/// Points $TMPDIR at a fresh folder for the life of the object (grading temp files go there).
struct ScopedTmpdir {
  std::filesystem::path dir;
  std::string old;
  bool had_old = false;
  ScopedTmpdir() {
    if (const char* t = std::getenv("TMPDIR")) {
      old = t;
      had_old = true;
    }
    dir = make_temp_dir("mls-grader-test-tmp");
    ::setenv("TMPDIR", dir.c_str(), 1);
  }
  ~ScopedTmpdir() {
    if (had_old) ::setenv("TMPDIR", old.c_str(), 1);
    else ::unsetenv("TMPDIR");
    remove_tree(dir);
  }
};

/// Number of live processes whose command line mentions `needle`.
inline int processes_mentioning(const std::string& needle) {
  int n = 0;
  DIR* d = ::opendir("/proc");
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string base = std::string("/proc/") + e->d_name;
    int fd = ::open((base + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[4096];
    ssize_t k = ::read(fd, buf, sizeof buf);
    ::close(fd);
    if (k <= 0) continue;
    std::string cmd(buf, static_cast<std::size_t>(k));
    if (cmd.find(needle) == std::string::npos) continue;
    // Zombies have an empty cmdline, so any hit is a live process.
    ++n;
  }
  ::closedir(d);
  return n;
}

}  // namespace mls::grader::testing
