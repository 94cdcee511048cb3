#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "helpers.hpp"
#include "mls/common/error.hpp"
#include "mls/grader/strip.hpp"

// The marker lines, spelled so that this file itself holds no marker text (repository-wide
// marker checks scan every source file).
#define MLS_BEGIN "// BEGIN " "SOLUTION"
#define MLS_END "// END " "SOLUTION"

using namespace mls::grader;

TEST_CASE("strip: a region becomes MLS_TODO with the function name, keeping indentation", "[grader][strip]") {
  std::string src =
      "/// Returns a view.\n"
      "Tensor Tensor::permute(std::span<const int64_t> dims) const {\n"
      "  " MLS_BEGIN "\n"
      "  auto t = *this;\n"
      "  return t;\n"
      "  " MLS_END "\n"
      "}\n";
  StripResult r = strip_solutions(src, "lab1_tensor/src/tensor.cpp", "lab1");
  CHECK(r.regions == 1);
  CHECK(r.text ==
        "/// Returns a view.\n"
        "Tensor Tensor::permute(std::span<const int64_t> dims) const {\n"
        "  MLS_TODO(\"lab1: Tensor::permute\");\n"
        "}\n");
  CHECK_FALSE(contains_marker_text(r.text));
}

TEST_CASE("strip: function names from multi-line signatures, operators, and the file:line fallback", "[grader][strip]") {
  std::string src =
      "int64_t offset_of(std::span<const int64_t> index,\n"
      "                  std::span<const int64_t> strides) {\n"
      "    " MLS_BEGIN "\n"
      "    return 0;\n"
      "    " MLS_END "\n"
      "}\n"
      "Tensor operator+(const Tensor& a, const Tensor& b) {\n"
      "  " MLS_BEGIN "\n"
      "  return a;\n"
      "  " MLS_END "\n"
      "}\n"
      "namespace {\n"
      "" MLS_BEGIN "\n"
      "int helper = 1;\n"
      "" MLS_END "\n"
      "}\n";
  StripResult r = strip_solutions(src, "lab1_tensor/src/x.cpp", "lab1");
  REQUIRE(r.regions == 3);
  CHECK(r.functions[0] == "offset_of");
  CHECK(r.functions[1] == "operator+");
  CHECK(r.functions[2] == "x.cpp:13");
  CHECK_THAT(r.text, Catch::Contains("    MLS_TODO(\"lab1: offset_of\");\n"));
}

TEST_CASE("strip: nested, unclosed and unopened markers are refused with file and line", "[grader][strip]") {
  CHECK_THROWS_WITH(strip_solutions("f() {\n" MLS_BEGIN "\n" MLS_BEGIN "\n" MLS_END "\n}\n", "a.cpp", "lab1"),
                    Catch::Contains("a.cpp:3") && Catch::Contains("nested"));
  CHECK_THROWS_WITH(strip_solutions("f() {\n  " MLS_BEGIN "\n  x;\n}\n", "b.cpp", "lab1"),
                    Catch::Contains("b.cpp:2") && Catch::Contains("never closed"));
  CHECK_THROWS_WITH(strip_solutions("f() {\n  x;\n  " MLS_END "\n}\n", "c.cpp", "lab1"),
                    Catch::Contains("c.cpp:3") && Catch::Contains("without"));
  CHECK(strip_solutions("no regions\n", "d.cpp", "lab1").text == "no regions\n");
}

TEST_CASE("strip: a student file's first line says what the handout holds, not the markers", "[grader][strip]") {
  const std::string header = "// Student file of lab 3: write the bodies between the " "SOLUTION markers (mls-grader grades this file).";
  CHECK(student_header_lab(header) == 3);
  CHECK(student_header_lab("// Student file of lab 12: x") == 12);
  CHECK(student_header_lab("// Student file of lab x: y") == -1);
  CHECK(student_header_lab("// Student file of lab 3") == -1);
  CHECK(student_header_lab("int f();") == -1);
  const std::string src = header + "\nint f() {\n  " MLS_BEGIN "\n  return 1;\n  " MLS_END "\n}\n";

  // The student's own file: each body is MLS_TODO("lab3: <function>"), and its first line says so.
  StripResult r = strip_solutions(src, "lab3_graph_opt/src/ir.cpp", "lab3");
  CHECK(r.text == handout_student_header(3, true, "lab3") + "\nint f() {\n  MLS_TODO(\"lab3: f\");\n}\n");
  CHECK_THAT(r.text, Catch::StartsWith("// Student file of lab 3: replace each MLS_TODO(\"lab3: <function>\")"));
  CHECK_THAT(r.text, !Catch::Contains("SOLUTION"));
  CHECK(student_header_lab(handout_student_header(3, true, "lab3")) == 3);

  // An earlier lab's file kept as its reference: its first line says it is given complete.
  std::string kept = unmark_solutions(src, "lab3_graph_opt/src/ir.cpp");
  CHECK(kept == handout_student_header(3, false) + "\nint f() {\n  return 1;\n}\n");
  CHECK_THAT(kept, Catch::StartsWith("// Student file of lab 3: given complete here, as lab 3's reference solution"));
  CHECK_THAT(kept, !Catch::Contains("SOLUTION") && !Catch::Contains("MLS_TODO"));

  // A file without regions, or without the header line, keeps its first line.
  CHECK(strip_solutions(header + "\nint g;\n", "a.cpp", "lab3").text == header + "\nint g;\n");
  CHECK(strip_solutions("// other\nint f() {\n  " MLS_BEGIN "\n  " MLS_END "\n}", "b.cpp", "lab3").text ==
        "// other\nint f() {\n  MLS_TODO(\"lab3: f\");\n}");
}

TEST_CASE("strip: every student file of every lab opens with the header the handout rewrites", "[grader][strip]") {
  for (const auto& m : discover_labs(testing::repo_root())) {
    for (const auto& f : m.student_files) {
      INFO(f);
      const std::string text = read_file(testing::repo_root() / f);
      CHECK(student_header_lab(text.substr(0, text.find('\n'))) == m.lab);
      const std::string stripped = strip_solutions(text, f, "lab" + std::to_string(m.lab)).text;
      CHECK(stripped.substr(0, stripped.find('\n')) == handout_student_header(m.lab, true, "lab" + std::to_string(m.lab)));
      const std::string kept = unmark_solutions(text, f);
      CHECK(kept.substr(0, kept.find('\n')) == handout_student_header(m.lab, false));
    }
  }
}

TEST_CASE("unmark: an earlier lab's reference keeps its code and loses its marker lines", "[grader][strip]") {
  CHECK(unmark_solutions("int f() {\n  " MLS_BEGIN "\n  return 1;\n  " MLS_END "\n}\n", "a.cpp") ==
        "int f() {\n  return 1;\n}\n");
  CHECK(unmark_solutions("no regions", "b.cpp") == "no regions");
  CHECK_THROWS_WITH(unmark_solutions("f() {\n  " MLS_BEGIN "\n}\n", "c.cpp"), Catch::Contains("c.cpp:2"));
}

TEST_CASE("strip: the fixture lab's student file strips to stubs", "[grader][strip]") {
  Manifest m = testing::fixture_manifest();
  std::string text = read_file(testing::repo_root() / m.student_files[0]);
  StripResult r = strip_solutions(text, m.student_files[0], "lab99");
  CHECK(r.regions == 3);
  CHECK(r.functions == std::vector<std::string>{"add", "mul", "sum_to"});
  CHECK_THAT(r.text, Catch::Contains("MLS_TODO(\"lab99: sum_to\");"));
}

TEST_CASE("handout: earlier labs kept, the lab stripped, later labs and hidden tests left out", "[grader][strip][handout]") {
  fs::path root = make_temp_dir("mls-grader-test");
  fs::path out = make_temp_dir("mls-grader-test-out");
  remove_tree(out);
  std::string body = "int f() {\n  " MLS_BEGIN "\n  return 1;\n  " MLS_END "\n}\n";
  testing::put(root, "CMakeLists.txt", "project(x)\n");
  testing::put(root, "README.md", "# The instructor's README: every lab\n");
  testing::put(root, "common/include/a.hpp", "#pragma once\n");
  testing::put(root, "lab1_a/src/a.cpp", body);
  testing::put(root, "lab1_a/tests/test_a.cpp", "// tests\n");
  testing::put(root, "lab2_b/src/b.cpp", body);
  testing::put(root, "lab2_b/tests/test_hidden.cpp", "// hidden\n");
  testing::put(root, "lab3_c/src/c.cpp", body);
  testing::put(root, "handouts/lab2/README.md", "# lab 2\n");
  testing::put(root, "handouts/lab3/README.md", "# lab 3\n");
  testing::put(root, "grader/tests/submissions/x/student.cpp", body);
  auto manifest = [](int n, const std::string& dir, const std::string& file, const std::string& hidden) {
    nlohmann::json j = {{"lab", n}, {"dir", dir}, {"title", "t"}, {"test_binary", "t"}, {"student_files", {file}},
                        {"groups", {{{"name", "g"}, {"match", "[g]"}, {"points", 1}}}}};
    if (!hidden.empty()) j["hidden_files"] = {hidden};
    return j.dump();
  };
  testing::put(root, "lab1_a/lab.json", manifest(1, "lab1_a", "lab1_a/src/a.cpp", ""));
  testing::put(root, "lab2_b/lab.json", manifest(2, "lab2_b", "lab2_b/src/b.cpp", "lab2_b/tests/test_hidden.cpp"));
  testing::put(root, "lab3_c/lab.json", manifest(3, "lab3_c", "lab3_c/src/c.cpp", ""));
  auto labs = discover_labs(root);

  HandoutReport rep = make_handout(root, labs, 2, out);
  CHECK(rep.regions == 1);
  // Reference kept, its markers removed (no solution marker text leaks into a handout).
  CHECK(read_file(out / "lab1_a/src/a.cpp") == "int f() {\n  return 1;\n}\n");
  CHECK_THAT(read_file(out / "lab2_b/src/b.cpp"), Catch::Contains("MLS_TODO(\"lab2: f\");"));
  CHECK_FALSE(fs::exists(out / "lab2_b/tests/test_hidden.cpp"));
  CHECK_FALSE(fs::exists(out / "lab3_c"));
  CHECK(fs::exists(out / "handouts/lab2/README.md"));
  CHECK_FALSE(fs::exists(out / "handouts/lab3"));
  CHECK_FALSE(fs::exists(out / "grader/tests"));
  CHECK(fs::exists(out / "common/include/a.hpp"));
  CHECK(fs::exists(out / "CMakeLists.txt"));
  // The instructor's README is left out; the student's README of lab 2 is in its place.
  const std::string readme = read_file(out / "README.md");
  CHECK_THAT(readme, Catch::StartsWith("# Lab 2: t\n") && Catch::Contains("- `lab2_b/src/b.cpp`"));
  CHECK_THAT(readme, !Catch::Contains("instructor's README"));
  CHECK_THROWS_WITH(make_handout(root, labs, 2, out), Catch::Contains("not an empty folder"));
  remove_tree(out);

  make_handout(root, labs, 2, out, HandoutOptions{true});
  CHECK_THAT(read_file(out / "lab1_a/src/a.cpp"), Catch::Contains("MLS_TODO(\"lab1: f\");"));
  remove_tree(out);

  testing::put(root, "lab1_a/src/other.cpp", body);  // markers in a file no manifest lists
  CHECK_THROWS_WITH(make_handout(root, labs, 2, out), Catch::Contains("lab1_a/src/other.cpp"));
  remove_tree(out);
  remove_tree(root);
}

TEST_CASE("handout: the checked command blocks of a write-up", "[grader][strip][handout]") {
  const std::string md =
      "# Lab\n```\nnot checked\n```\n" + std::string(kCheckedCommandsMarker) + "\nSome text.\n```\ncmake a\n\nctest b   # c\n```\n"
      "```\nnot checked either\n```\n  " + std::string(kCheckedCommandsMarker) + "\n```sh\nrun c\n```\n" +
      std::string(kCheckedCommandsMarker) + "\n";
  auto blocks = checked_command_blocks(md);
  REQUIRE(blocks.size() == 2);
  CHECK(blocks[0] == std::vector<std::string>{"cmake a", "", "ctest b   # c"});
  CHECK(blocks[1] == std::vector<std::string>{"run c"});
  CHECK(checked_command_blocks("no blocks\n```\nx\n```\n").empty());
}

TEST_CASE("handout: a test name for the student README, from the sources, by tags", "[grader][strip][handout]") {
  const std::vector<std::pair<std::string, std::string>> sources = {
      {"tests/test_a.cpp", "TEST_CASE(\"bad, name\", \"[views]\") {}\n"
                           "TEST_CASE(\"views: transpose\", \"[views][lab1]\") {}\n"
                           "METHOD_AS_TEST_CASE(\"x\", \"[sgemm][packed]\")\n"},
      {"tests/test_b.cpp", "TEST_CASE(\n    \"packed: n = 7\",\n    \"[sgemm][packed][lab4]\") {}\n"
                           "TEST_CASE(\"blocked\", \"[sgemm][blocked]\") {}\n"}};
  CHECK(first_test_name("[views]", sources) == "views: transpose");  // the first is not safe on a command line
  CHECK(first_test_name("[sgemm][packed]", sources) == "packed: n = 7");
  CHECK(first_test_name(" [sgemm][blocked] ", sources) == "blocked");
  CHECK(first_test_name("[reduce]", sources).empty());
  CHECK(first_test_name("views: transpose", sources).empty());  // not a spec of tags
  CHECK(first_test_name("", sources).empty());
}

TEST_CASE("handout: the student README says how to build, test, score and submit, with the points", "[grader][strip][handout]") {
  Manifest m = parse_manifest(nlohmann::json::parse(R"({
    "lab": 2, "dir": "lab2_b", "title": "Things", "test_binary": "mls_lab2_tests",
    "student_files": ["lab2_b/src/b.cpp", "lab2_b/src/c.cpp"],
    "groups": [
      {"name": "plumbing", "match": "[plumbing]", "points": 2, "visibility": "visible", "given": true},
      {"name": "views", "match": "[views]", "points": 7.5, "visibility": "visible"},
      {"name": "more", "match": "[more]", "points": 10, "visibility": "hidden"},
      {"name": "mpi", "match": "[mpi]", "points": 0.5, "visibility": "after_due_date", "binary": "mls_lab2_mpi_tests", "mpi": true},
      {"name": "gpu", "match": "[gpu]", "points": 1, "visibility": "visible", "binary": "mls_lab2_gpu_tests", "gpu": true}
    ]})"), "lab2_b/lab.json");
  Manifest m1 = m;
  m1.lab = 1;
  m1.dir = "lab1_a";
  const std::vector<std::pair<std::string, std::string>> sources = {
      {"lab2_b/tests/test_b.cpp", "TEST_CASE(\"plumbing works\", \"[plumbing]\") {}\nTEST_CASE(\"views: one\", \"[views]\") {}\n"}};
  const std::string writeup = "# Lab 2\n" + std::string(kCheckedCommandsMarker) + "\n```\nrun the oracle\n```\n" +
                              std::string(kCheckedCommandsMarker) + "\n```\ncmake --preset release -DMLS_LABS=\"lab1_a;lab2_b\"\nbuild/release/bin/mls-grader test --lab 2\n```\n";

  std::string md = student_readme(m, {m1, m}, writeup, sources);
  CHECK_THAT(md, Catch::StartsWith("# Lab 2: Things\n"));
  CHECK_THAT(md, Catch::Contains("`lab1_a/` is given complete, as reference solutions") && Catch::Contains("handouts/lab2/README.md"));
  CHECK_THAT(md, Catch::Contains("MLS_TODO(\"lab2: <function>\")"));
  // The commands: the write-up's checked block, then one test by name, -a and -x N; one grader line.
  auto blocks = checked_command_blocks(md);
  REQUIRE(blocks.size() == 1);
  CHECK(blocks[0] == std::vector<std::string>{
                         "cmake --preset release -DMLS_LABS=\"lab1_a;lab2_b\"",
                         "build/release/bin/mls-grader test --lab 2",
                         "build/release/lab2_b/mls_lab2_tests \"views: one\"   # one test, with every check it makes",
                         "build/release/lab2_b/mls_lab2_tests \"views: one\" -a   # the same, stopping at its first failed check",
                         "build/release/lab2_b/mls_lab2_tests \"[views]\" -x 3   # a group, stopping after 3 failed checks"});
  // Submit: the student files; the points table, row by row.
  CHECK_THAT(md, Catch::Contains("- `lab2_b/src/b.cpp`\n- `lab2_b/src/c.cpp`\n"));
  CHECK_THAT(md, Catch::Contains("| plumbing | `[plumbing]` | 2 | visible | given: passes from the start |\n"));
  CHECK_THAT(md, Catch::Contains("| views | `[views]` | 7.5 | visible |  |\n"));
  CHECK_THAT(md, Catch::Contains("| more | `[more]` | 10 | hidden |  |\n"));
  CHECK_THAT(md, Catch::Contains("| mpi | `[mpi]` | 0.5 | after_due_date | runs under `mpirun`; program `mls_lab2_mpi_tests` |\n"));
  CHECK_THAT(md, Catch::Contains("| gpu | `[gpu]` | 1 | visible | needs a GPU; program `mls_lab2_gpu_tests` |\n"));
  CHECK_THAT(md, Catch::Contains("| **total** | | **21** | | |\n"));
  CHECK_THAT(md, Catch::Contains("hidden group") && Catch::Contains("after the due date") && Catch::Contains("SKIPPED"));
  CHECK_THAT(md, !Catch::Contains("SOLUTION"));

  // Without a write-up block: the commands come from the manifest (labs up to N, the lab's test
  // programs but a GPU one, mls-grader).
  blocks = checked_command_blocks(student_readme(m, {m1, m}, "# no commands\n", {}));
  REQUIRE(blocks.size() == 1);
  CHECK(blocks[0] == std::vector<std::string>{
                         "cmake --preset release -DMLS_LABS=\"lab1_a;lab2_b\"",
                         "cmake --build --preset release --target mls_lab2_tests mls_lab2_mpi_tests mls-grader",
                         "ctest --preset release -L lab2",
                         "build/release/bin/mls-grader test --lab 2   # the score, each test isolated as in grading"});
}

TEST_CASE("handout: every lab's student README names a real test and carries its write-up's commands", "[grader][strip][handout]") {
  const fs::path root = testing::repo_root();
  const auto labs = discover_labs(root);
  for (const auto& m : labs) {
    INFO("lab " << m.lab);
    std::vector<std::pair<std::string, std::string>> sources;
    for (const auto& e : fs::directory_iterator(root / m.dir / "tests"))
      if (starts_with(e.path().filename().string(), "test_") && e.path().extension() == ".cpp")
        sources.emplace_back(e.path().string(), read_file(e.path()));
    std::sort(sources.begin(), sources.end());
    const std::string writeup = read_file(root / "handouts" / ("lab" + std::to_string(m.lab)) / "README.md");
    const std::string md = student_readme(m, labs, writeup, sources);
    auto blocks = checked_command_blocks(md);
    REQUIRE(blocks.size() == 1);
    // The write-up's block that configures and builds comes first, verbatim.
    std::vector<std::string> own;
    for (const auto& b : checked_command_blocks(writeup))
      if (own.empty() && !b.empty() && starts_with(b[0], "cmake --preset ")) own = b;
    REQUIRE_FALSE(own.empty());
    REQUIRE(blocks[0].size() >= own.size() + 3);
    CHECK(std::equal(own.begin(), own.end(), blocks[0].begin()));
    CHECK_THAT(blocks[0][own.size()], Catch::StartsWith("build/release/" + m.dir + "/" + m.test_binary + " \""));
    for (const auto& f : m.student_files) CHECK_THAT(md, Catch::Contains("- `" + f + "`\n"));
    for (const auto& g : m.groups) CHECK_THAT(md, Catch::Contains("| " + g.name + " | "));
  }
}

TEST_CASE("handout: lab numbers come from folder names", "[grader][strip][handout]") {
  CHECK(lab_number_of_dir("lab1_tensor") == 1);
  CHECK(lab_number_of_dir("lab12_x") == 12);
  CHECK(lab_number_of_dir("lab") == -1);
  CHECK(lab_number_of_dir("labs") == -1);
  CHECK(lab_number_of_dir("common") == -1);
}

TEST_CASE("handout: a private checkout (files 0600, folders 0700, umask 077) gives trees everyone can read",
          "[grader][strip][handout]") {
  // The Gradescope setup makes the course root-only; the grading copy and the reference copy are
  // built and read by a sandboxed uid, so their modes must not follow the checkout's.
  fs::path root = make_temp_dir("mls-grader-test");
  fs::path out = make_temp_dir("mls-grader-test-out");
  remove_tree(out);
  testing::put(root, "CMakeLists.txt", "project(x)\n");
  testing::put(root, "common/include/a.hpp", "#pragma once\n");
  testing::put(root, "lab1_a/src/a.cpp", "int f() {\n  " MLS_BEGIN "\n  return 1;\n  " MLS_END "\n}\n");
  testing::put(root, "lab1_a/tests/run.sh", "#!/bin/sh\n");
  testing::put(root, "lab1_a/lab.json",
               nlohmann::json({{"lab", 1}, {"dir", "lab1_a"}, {"title", "t"}, {"test_binary", "t"},
                               {"student_files", {"lab1_a/src/a.cpp"}},
                               {"groups", {{{"name", "g"}, {"match", "[g]"}, {"points", 1}}}}})
                   .dump());
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it)
    fs::permissions(it->path(), fs::perms(it->is_directory() ? 0700 : 0600));
  fs::permissions(root / "lab1_a/tests/run.sh", fs::perms(0700));
  const mode_t old = ::umask(077);
  make_handout(root, discover_labs(root), 1, out);
  copy_tree(root, out / "copy");
  ::umask(old);
  auto mode = [](const fs::path& p) { return static_cast<unsigned>(fs::status(p).permissions()) & 0777u; };
  for (const fs::path& base : {out, out / "copy"}) {
    INFO(base);
    CHECK(mode(base / "lab1_a") == 0755u);
    CHECK(mode(base / "lab1_a/src") == 0755u);
    CHECK(mode(base / "common/include/a.hpp") == 0644u);
    CHECK(mode(base / "CMakeLists.txt") == 0644u);
    CHECK(mode(base / "lab1_a/tests/run.sh") == 0755u);
    CHECK(mode(base / "lab1_a/src/a.cpp") == 0644u);
  }
  remove_tree(out);
  remove_tree(root);
}
