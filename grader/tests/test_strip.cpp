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
