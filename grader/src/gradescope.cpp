// The Gradescope autograder archive of a lab (mls/grader/gradescope.hpp).
#include "mls/grader/gradescope.hpp"

#include <algorithm>

#include "mls/common/error.hpp"
#include "mls/grader/build.hpp"
#include "mls/grader/strip.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

namespace {

bool skipped_name(const std::string& name) { return name.empty() || name[0] == '.' || name == "build" || name == "__pycache__"; }

/// Replaces every `@KEY@` of `text` by its value.
std::string fill(std::string text, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [key, value] : values) {
    const std::string at = "@" + key + "@";
    for (std::size_t i = text.find(at); i != std::string::npos; i = text.find(at, i + value.size())) text.replace(i, at.size(), value);
  }
  return text;
}

std::string bench_flag(const Manifest& m) { return m.benchmarks.empty() ? "" : " --bench"; }

/// The lab folders a build of lab `m` configures (MLS_LABS), ';'-separated.
std::string lab_dirs(const std::filesystem::path& root, const Manifest& m) {
  std::string out;
  for (const auto& part : reference_tree_parts(root, m)) {
    if (lab_number_of_dir(part) < 0 || !fs::is_directory(root / part)) continue;
    out += (out.empty() ? "" : ";") + part;
  }
  return out;
}

constexpr const char* kSetup = R"SH(#!/usr/bin/env bash
# setup.sh of the mlsys-labs autograder of lab @LAB@ (written by `mls-grader gradescope --lab @LAB@`).
# Gradescope runs it once, as root, while it builds the autograder's image (base image: Ubuntu
# 22.04, or any Debian 12 root). It installs the packages, builds mls-grader and the lab's
# reference (cached in the image) and grades the handout's stubs once, as a check.
set -euo pipefail
source_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
course="$source_dir/@COURSE@"
say() { echo "setup.sh: $*"; }

# The course tree holds the reference solution and the hidden tests. mls-grader compiles and runs
# each submission as a reserved unprivileged uid; in a container without namespaces (the `uid`
# isolation level) only these modes keep that uid out of them.
chmod 700 "$source_dir"
chmod -R go-rwx "$course"
chmod 755 "$source_dir/setup.sh" "$source_dir/run_autograder"

if [ -r /etc/os-release ]; then
  . /etc/os-release
  say "system: ${PRETTY_NAME:-unknown}"
fi
"$course/scripts/setup.sh"

# CMake 3.25 or newer (Ubuntu 22.04 has 3.22: take it from PyPI).
cmake_version="$(cmake --version | head -n 1 | awk '{print $3}')"
if [ "$(printf '%s\n' 3.25 "$cmake_version" | sort -V | head -n 1)" != 3.25 ]; then
  say "CMake $cmake_version is older than 3.25: installing a newer one with pip"
  apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  python3 -m pip install --quiet 'cmake>=3.25,<4' || python3 -m pip install --quiet --break-system-packages 'cmake>=3.25,<4'
  hash -r
fi
# Catch2 v2 (Debian 12 and Ubuntu 22.04 package it; Ubuntu 24.04 has Catch2 v3, which the labs'
# tests are not written for).
if [ ! -f /usr/include/catch2/catch.hpp ]; then
  say "Catch2 v2 (catch2/catch.hpp) is not installed: choose the Ubuntu 22.04 base image on Gradescope"
  exit 1
fi

cd "$course"
jobs="$(nproc)"
[ "$jobs" -le 64 ] || jobs=64
cmake --preset release -DMLS_LABS="@LAB_DIRS@" -DMLS_HANDOUT_TESTS=OFF >"$source_dir/setup-configure.log" 2>&1 ||
  { tail -n 40 "$source_dir/setup-configure.log"; say "configuring the course failed"; exit 1; }
cmake --build --preset release --target mls-grader -j "$jobs"

# The reference of lab @LAB@ is built here, once, into the image (mls-grader caches it by content),
# and the whole pipeline is tried on the handout's stubs: exit 0 or 1 (tests fail) is right.
empty="$(mktemp -d)"
rc=0
"$course/build/release/bin/mls-grader" grade --root "$course" --lab @LAB@ --submission "$empty"@BENCH@ -j "$jobs" \
  >"$source_dir/setup-check.log" 2>&1 || rc=$?
rmdir "$empty"
if [ "$rc" -gt 1 ]; then
  tail -n 60 "$source_dir/setup-check.log"
  say "grading the handout's stubs failed (mls-grader exit $rc): see above"
  exit 1
fi
say "ready: the handout's stubs graded as follows (a submission is graded the same way):"
head -n 1 "$source_dir/setup-check.log"
grep -m 1 -i 'total' "$source_dir/setup-check.log" || true
)SH";

constexpr const char* kRun = R"SH(#!/usr/bin/env bash
# run_autograder of the mlsys-labs autograder of lab @LAB@ (written by `mls-grader gradescope --lab @LAB@`).
# Gradescope runs it as root for every submission: mls-grader grades /autograder/submission (only
# the lab's student files are taken, each test isolated, every verdict a comparison with the
# reference build's observations) and writes /autograder/results/results.json.
set -uo pipefail
home="${MLS_AUTOGRADER_HOME:-/autograder}"
course="$home/source/@COURSE@"
results="$home/results/results.json"
mkdir -p "$home/results"
# Only root writes the results folder; nothing found there before grading is ever reported.
chown root: "$home/results" 2>/dev/null || true
chmod 755 "$home/results"
rm -f "$results"
jobs="$(nproc)"
[ "$jobs" -le 64 ] || jobs=64
rc=0
"$course/build/release/bin/mls-grader" grade --root "$course" --lab @LAB@ --submission "$home/submission" \
  --results "$results"@BENCH@ -j "$jobs" || rc=$?
if [ "$rc" -le 1 ] && [ -s "$results" ]; then
  exit 0
fi
# Not graded: a problem of the grader or of the course (2: usage or manifest, 3: the reference
# did not build, 4: internal error), never a verdict on the submission. Say so to the student.
tmp="$results.tmp.$$"
printf '{"score": 0, "tests": [], "output": "%s"}\n' \
  "The autograder could not grade this submission: mls-grader stopped with exit code $rc. This is not a verdict on your code. Please tell the course staff." \
  >"$tmp" && mv -f "$tmp" "$results"
echo "run_autograder: mls-grader exit $rc: not graded (see its messages above)" >&2
exit 1
)SH";

constexpr const char* kReadme = R"SH(# mlsys-labs autograder, lab @LAB@

Written by `mls-grader gradescope --lab @LAB@`. Upload this archive as a Gradescope programming
assignment's autograder (base image Ubuntu 22.04). `setup.sh` runs once when the image is built;
`run_autograder` runs for each submission. `@COURSE@/` is the course tree the grader needs (the
reference solution and the hidden tests included): setup.sh makes it readable by root only.
See `handouts/README.md` in the course repository, section "Gradescope", for how to try it
in a fresh root before uploading.
)SH";

}  // namespace

std::vector<std::string> autograder_course_files(const fs::path& root, const Manifest& m) {
  std::vector<std::string> parts = reference_tree_parts(root, m);
  for (const char* extra : {"grader", "scripts"})
    if (fs::is_directory(fs::symlink_status(root / extra))) parts.push_back(extra);
  std::vector<std::string> files;
  for (const auto& part : parts) {
    const fs::path top = root / part;
    if (fs::is_regular_file(fs::symlink_status(top))) {
      files.push_back(part);
      continue;
    }
    for (auto it = fs::recursive_directory_iterator(top); it != fs::recursive_directory_iterator(); ++it) {
      const std::string name = it->path().filename().string();
      const fs::path rel = fs::relative(it->path(), root);
      const auto st = it->symlink_status();
      if (skipped_name(name) || rel == fs::path("grader") / "tests") {
        if (fs::is_directory(st)) it.disable_recursion_pending();
        continue;
      }
      if (fs::is_regular_file(st)) files.push_back(rel.generic_string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string autograder_setup_script(const fs::path& root, const Manifest& m) {
  return fill(kSetup, {{"LAB", std::to_string(m.lab)}, {"COURSE", kAutograderCourseDir},
                       {"LAB_DIRS", lab_dirs(root, m)}, {"BENCH", bench_flag(m)}});
}

std::string autograder_run_script(const Manifest& m) {
  return fill(kRun, {{"LAB", std::to_string(m.lab)}, {"COURSE", kAutograderCourseDir}, {"BENCH", bench_flag(m)}});
}

std::vector<ZipEntry> autograder_entries(const fs::path& root, const Manifest& m) {
  if (m.build)
    throw mls::Error("gradescope: lab " + std::to_string(m.lab) + " (" + m.path.string() +
                     ") is built by a direct compiler call, not CMake: only the course's labs (--lab N) have an autograder");
  std::vector<ZipEntry> out;
  out.push_back({"setup.sh", autograder_setup_script(root, m), true});
  out.push_back({"run_autograder", autograder_run_script(m), true});
  out.push_back({"README.md", fill(kReadme, {{"LAB", std::to_string(m.lab)}, {"COURSE", kAutograderCourseDir}}), false});
  for (const auto& f : autograder_course_files(root, m)) {
    const fs::path p = root / f;
    const bool exec = (fs::status(p).permissions() & fs::perms::owner_exec) != fs::perms::none;
    out.push_back({std::string(kAutograderCourseDir) + "/" + f, read_file(p, "gradescope"), exec});
  }
  return out;
}

}  // namespace mls::grader
