// The Gradescope autograder archive (mls-grader gradescope): the zip writer, read back by an
// independent reader (Python's zipfile); what the archive holds; run_autograder's behaviour with
// a stand-in grader (the whole archive in a fresh root is scripts/check_gradescope.sh).
#include <sys/stat.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "helpers.hpp"
#include "mls/grader/gradescope.hpp"
#include "mls/grader/zip.hpp"

using namespace mls::grader;

namespace {

int run_shell(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

TEST_CASE("gradescope: crc32 is the IEEE CRC of zip and gzip", "[grader][gradescope]") {
  CHECK(crc32("") == 0u);
  CHECK(crc32("123456789") == 0xCBF43926u);
  CHECK(crc32("The quick brown fox jumps over the lazy dog") == 0x414FA339u);
}

TEST_CASE("gradescope: a zip archive reads back whole in Python's zipfile, modes kept", "[grader][gradescope]") {
  testing::ScopedTmpdir tmp;
  std::string big(200000, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 131) ^ (i >> 7));
  const std::vector<ZipEntry> entries = {
      {"setup.sh", "#!/bin/sh\necho hi\n", true},
      {"course/a/b.txt", "b\n", false},
      {"course/empty", "", false},
      {"course/big.bin", big, false},
      {"course/\xc3\xa9t\xc3\xa9.txt", "utf-8 name\n", false},
  };
  const std::string bytes = zip_archive(entries);
  CHECK(zip_archive(entries) == bytes);  // the same entries, the same bytes
  write_file_atomic(tmp.dir / "a.zip", bytes);
  if (::access("/usr/bin/python3", X_OK) != 0) {
    WARN("SKIPPED: no /usr/bin/python3 to read the archive back");
    return;
  }
  const std::string script =
      "import json, sys, zipfile\n"
      "z = zipfile.ZipFile(sys.argv[1])\n"
      "assert z.testzip() is None\n"
      "print(json.dumps([[i.filename, oct(i.external_attr >> 16), z.read(i).hex()] for i in z.infolist()]))\n";
  write_file_atomic(tmp.dir / "read.py", script);
  REQUIRE(run_shell("/usr/bin/python3 '" + (tmp.dir / "read.py").string() + "' '" + (tmp.dir / "a.zip").string() + "' > '" +
                    (tmp.dir / "out.json").string() + "'") == 0);
  const auto got = nlohmann::json::parse(read_file(tmp.dir / "out.json"));
  REQUIRE(got.size() == entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    INFO(entries[i].path);
    CHECK(got[i][0] == entries[i].path);
    CHECK(got[i][1] == (entries[i].executable ? "0o100755" : "0o100644"));
    std::string hex;
    static const char* digits = "0123456789abcdef";
    for (unsigned char c : entries[i].data) {
      hex += digits[c >> 4];
      hex += digits[c & 15];
    }
    CHECK(got[i][2] == hex);
  }
}

TEST_CASE("gradescope: a bad entry path is an mls::Error naming the entry and the rule", "[grader][gradescope]") {
  auto refused = [](const std::string& path, const std::string& why) {
    INFO(path);
    CHECK_THROWS_WITH(zip_archive({{path, "x", false}}), Catch::Contains("zip_archive") && Catch::Contains(why));
  };
  refused("", "empty");
  refused("/etc/passwd", "absolute");
  refused("a/../b", "'..'");
  refused("a//b", "empty, '.' or '..'");
  refused("./a", "'.'");
  refused("a/", "empty");
  refused("a\\b", "backslash");
  refused(std::string(70000, 'a'), "65535");
  CHECK_THROWS_WITH(zip_archive({{"a", "1", false}, {"a", "2", false}}), Catch::Contains("'a' is given twice"));
}

TEST_CASE("gradescope: the archive of a lab holds its course tree, the scripts, and nothing of later labs",
          "[grader][gradescope]") {
  const fs::path root = testing::repo_root();
  const Manifest m = find_lab(root, 1);
  const std::vector<std::string> files = autograder_course_files(root, m);
  CHECK(has(files, "CMakeLists.txt"));
  CHECK(has(files, "CMakePresets.json"));
  CHECK(has(files, "scripts/setup.sh"));
  CHECK(has(files, "grader/tools/grader.cpp"));
  for (const auto& f : m.student_files) CHECK(has(files, f));
  for (const auto& f : files) {
    INFO(f);
    CHECK_FALSE(starts_with(f, "lab2_"));
    CHECK_FALSE(starts_with(f, "lab6_"));
    CHECK_FALSE(starts_with(f, "grader/tests/"));
    CHECK_FALSE(starts_with(f, "build/"));
    CHECK(f.find("/.") == std::string::npos);
    CHECK(f[0] != '.');
  }
  const std::vector<ZipEntry> entries = autograder_entries(root, m);
  REQUIRE(entries.size() == files.size() + 3);
  CHECK(entries[0].path == "setup.sh");
  CHECK(entries[0].executable);
  CHECK(entries[1].path == "run_autograder");
  CHECK(entries[1].executable);
  for (const auto& e : {entries[0], entries[1]}) {
    INFO(e.path);
    CHECK(e.data.find('@') == std::string::npos);  // every placeholder filled
    CHECK_THAT(e.data, Catch::Contains("--lab 1 ") && Catch::StartsWith("#!/usr/bin/env bash"));
    CHECK_THAT(e.data, Catch::Contains(m.benchmarks.empty() ? "" : " --bench"));
  }
  CHECK_THAT(entries[0].data, Catch::Contains("-DMLS_LABS=\"lab1_tensor\"") && Catch::Contains("chmod 700"));
  for (std::size_t i = 3; i < entries.size(); ++i) CHECK(entries[i].path == "course/" + files[i - 3]);
  const auto setup = std::find_if(entries.begin(), entries.end(), [](const ZipEntry& e) { return e.path == "course/scripts/setup.sh"; });
  REQUIRE(setup != entries.end());
  CHECK(setup->executable);
  // Lab 3's tree holds labs 1 to 3.
  const std::vector<std::string> three = autograder_course_files(root, find_lab(root, 3));
  CHECK(std::any_of(three.begin(), three.end(), [](const std::string& f) { return starts_with(f, "lab2_"); }));
  CHECK_FALSE(std::any_of(three.begin(), three.end(), [](const std::string& f) { return starts_with(f, "lab4_"); }));
  // The fixture lab (a direct build) has no autograder.
  CHECK_THROWS_WITH(autograder_entries(root, testing::fixture_manifest()), Catch::Contains("only the course's labs"));
}

TEST_CASE("gradescope: run_autograder keeps a graded results.json, and says when grading failed", "[grader][gradescope]") {
  testing::ScopedTmpdir tmp;
  const fs::path home = tmp.dir / "autograder";
  const fs::path bin = home / "source" / kAutograderCourseDir / "build" / "release" / "bin";
  fs::create_directories(bin);
  fs::create_directories(home / "submission");
  fs::create_directories(home / "results");
  write_file_atomic(home / "run_autograder", autograder_run_script(find_lab(testing::repo_root(), 1)));
  ::chmod((home / "run_autograder").c_str(), 0755);
  // A stand-in for mls-grader: writes its arguments as results (when asked) and exits with $FAKE_RC.
  write_file_atomic(bin / "mls-grader",
                    "#!/bin/sh\n"
                    "out=''\n"
                    "while [ $# -gt 0 ]; do [ \"$1\" = --results ] && out=\"$2\"; shift; done\n"
                    "[ \"$FAKE_WRITE\" = 1 ] && printf '{\"score\": 7, \"tests\": []}' > \"$out\"\n"
                    "exit $FAKE_RC\n");
  ::chmod((bin / "mls-grader").c_str(), 0755);
  const fs::path results = home / "results" / "results.json";
  auto run = [&](int rc, bool write) {
    write_file_atomic(results, "{\"score\": 1000, \"output\": \"planted before grading\"}");
    return run_shell("cd '" + home.string() + "' && MLS_AUTOGRADER_HOME='" + home.string() + "' FAKE_RC=" + std::to_string(rc) +
                     " FAKE_WRITE=" + (write ? "1" : "0") + " ./run_autograder >/dev/null 2>&1");
  };
  // Graded (every test passed, or some failed): the grader's results.json stays.
  for (int rc : {0, 1}) {
    INFO("grader exit " << rc);
    CHECK(run(rc, true) == 0);
    CHECK(nlohmann::json::parse(read_file(results))["score"] == 7);
  }
  // Not graded: a results.json that says so, whatever was planted there before.
  for (int rc : {1, 2, 3, 4}) {
    INFO("grader exit " << rc << ", no results written");
    CHECK(run(rc, false) == 1);
    const auto j = nlohmann::json::parse(read_file(results));
    CHECK(j["score"] == 0);
    CHECK_THAT(j["output"].get<std::string>(),
               Catch::Contains("exit code " + std::to_string(rc)) && Catch::Contains("not a verdict on your code"));
  }
}
