#include <unistd.h>

#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "mls/grader/intake.hpp"

using namespace mls::grader;

TEST_CASE("intake: definitions of main, Catch2 and harness symbols are found, comments and strings are not",
          "[grader][intake]") {
  CHECK(forbidden_symbols("int add(int a, int b) { return a + b; }\n").empty());
  CHECK(forbidden_symbols("// int main() {}\nconst char* s = \"main(\";\n/* main */\n").empty());
  CHECK(forbidden_symbols("struct A { int main; };\nint f(A a) { return a.main; }\n").size() == 1);  // a member named main is still refused in declarations
  CHECK(forbidden_symbols("int f(A* p) { return p->main; }\n").empty());
  CHECK_FALSE(forbidden_symbols("int main() { return 0; }\n").empty());
  CHECK_FALSE(forbidden_symbols("#include <catch2/catch.hpp>\n").empty());
  CHECK_FALSE(forbidden_symbols("#include \"catch.hpp\"\n").empty());
  CHECK_FALSE(forbidden_symbols("void f() { Catch::cout(); }\n").empty());
  CHECK_FALSE(forbidden_symbols("void f() { getenv(\"x\"); mls_grader_harness::channel(); }\n").empty());
  CHECK(strip_comments_and_strings("a // b\nc /* d\ne */ f \"g\\\"h\" 'i'\n") == "a     \nc     \n     f \"    \" ' '\n");
}

TEST_CASE("intake: only allowlisted files are taken, symlinks, binaries and big files are refused", "[grader][intake]") {
  Manifest m = testing::fixture_manifest();
  fs::path sub = make_temp_dir("mls-grader-test");
  SECTION("by base name, with other files ignored") {
    testing::put(sub, "student.cpp", "int x;\n");
    testing::put(sub, "notes.txt", "hello\n");
    testing::put(sub, "evil/test_fixture.cpp", "// replace the tests\n");
    IntakeReport r = intake_submission(sub, m);
    REQUIRE(r.ok());
    REQUIRE(r.accepted.size() == 1);
    CHECK(r.accepted[0].rel == m.student_files[0]);
    CHECK(r.missing.empty());
    REQUIRE(r.notes.size() == 1);
    CHECK_THAT(r.notes[0], Catch::Contains("ignored 2 file(s)"));
  }
  SECTION("at the repository path") {
    testing::put(sub, m.student_files[0], "int x;\n");
    IntakeReport r = intake_submission(sub, m);
    REQUIRE(r.accepted.size() == 1);
    CHECK(r.accepted[0].source == sub / m.student_files[0]);
  }
  SECTION("a symlink is refused and the file counts as missing") {
    testing::put(sub, "target.txt", "int x;\n");
    REQUIRE(::symlink((sub / "target.txt").c_str(), (sub / "student.cpp").c_str()) == 0);
    IntakeReport r = intake_submission(sub, m);
    CHECK(r.accepted.empty());
    CHECK(r.missing.size() == 1);
    CHECK_THAT(r.notes[0], Catch::Contains("symbolic link"));
  }
  SECTION("a binary (object) file is refused") {
    testing::put(sub, "student.cpp", std::string("\x7f" "ELF\0\0\0", 7));
    IntakeReport r = intake_submission(sub, m);
    CHECK(r.accepted.empty());
    CHECK_THAT(r.notes[0], Catch::Contains("binary"));
  }
  SECTION("a file over 1 MiB is refused") {
    testing::put(sub, "student.cpp", std::string(kMaxStudentFileBytes + 1, ' '));
    IntakeReport r = intake_submission(sub, m);
    CHECK(r.accepted.empty());
    CHECK_THAT(r.notes[0], Catch::Contains("over the limit"));
  }
  SECTION("a source defining main rejects the submission") {
    testing::put(sub, "student.cpp", "int main() { return 0; }\n");
    IntakeReport r = intake_submission(sub, m);
    CHECK_FALSE(r.ok());
    CHECK_THAT(r.errors[0], Catch::Contains("main"));
  }
  SECTION("nothing submitted") {
    IntakeReport r = intake_submission(sub, m);
    CHECK(r.ok());
    CHECK(r.missing.size() == 1);
  }
  remove_tree(sub);
}
