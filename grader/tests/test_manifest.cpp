#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "mls/common/error.hpp"

using namespace mls::grader;
using nlohmann::json;

namespace {
json valid() {
  return json::parse(R"({"lab": 1, "dir": "lab1_tensor", "title": "Strided tensors", "test_binary": "mls_lab1_tests",
    "student_files": ["lab1_tensor/src/strides.cpp"], "time_limit_s": 20,
    "groups": [{"name": "strides", "match": "[strides]", "points": 10, "visibility": "visible"},
               {"name": "views", "match": "[views]", "points": 5, "visibility": "hidden"}],
    "benchmarks": [{"name": "add_vs_memcpy", "binary": "mls_lab1_bench", "filter": "BM_Add", "metric": "ratio",
                    "peer": "BM_Memcpy", "order": "desc"}]})");
}
std::string error_of(const json& j) {
  try {
    parse_manifest(j, "lab.json");
  } catch (const mls::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("manifest: a valid manifest is parsed", "[grader][manifest]") {
  Manifest m = parse_manifest(valid());
  CHECK(m.lab == 1);
  CHECK(m.dir == "lab1_tensor");
  CHECK(m.test_binary == "mls_lab1_tests");
  REQUIRE(m.groups.size() == 2);
  CHECK(m.groups[1].visibility == Visibility::Hidden);
  CHECK(m.total_points() == 15);
  CHECK(m.memory_limit_mb == 4096);
  REQUIRE(m.benchmarks.size() == 1);
  CHECK(m.benchmarks[0].peer == "BM_Memcpy");
  CHECK_FALSE(m.build.has_value());
}

TEST_CASE("manifest: errors name the field", "[grader][manifest]") {
  json j = valid();
  j.erase("test_binary");
  CHECK_THAT(error_of(j), Catch::Contains("'test_binary'") && Catch::Contains("missing"));
  j = valid();
  j["groups"][1]["visibility"] = "secret";
  CHECK_THAT(error_of(j), Catch::Contains("groups[1].visibility"));
  j = valid();
  j["groups"][1]["name"] = "strides";
  CHECK_THAT(error_of(j), Catch::Contains("used twice"));
  j = valid();
  j["student_files"] = json::array({"../outside.cpp"});
  CHECK_THAT(error_of(j), Catch::Contains("relative path"));
  j = valid();
  j["student_file"] = json::array();
  CHECK_THAT(error_of(j), Catch::Contains("not a manifest field"));
  j = valid();
  j["benchmarks"][0].erase("peer");
  CHECK_THAT(error_of(j), Catch::Contains("peer"));
  j = valid();
  j["groups"] = json::array();
  CHECK_THAT(error_of(j), Catch::Contains("groups"));
  // Points in hundredths (each test's share is): a third of a hundredth is refused.
  j = valid();
  j["groups"][0]["points"] = 2.505;
  CHECK_THAT(error_of(j), Catch::Contains("groups[0].points") && Catch::Contains("at most 2 decimal places") &&
                              Catch::Contains("2.505"));
  j["groups"][0]["points"] = 2.55;
  CHECK(error_of(j).empty());
  j = valid();
  j["groups"][0]["run_with"] = "run.sh \"2\"";
  CHECK_THAT(error_of(j), Catch::Contains("groups[0].run_with") && Catch::Contains("without quotes"));
  j["groups"][0]["run_with"] = " ";
  CHECK_THAT(error_of(j), Catch::Contains("groups[0].run_with"));
  j["groups"][0]["run_with"] = 2;
  CHECK_THAT(error_of(j), Catch::Contains("groups[0].run_with") && Catch::Contains("must be a string"));
}

TEST_CASE("manifest: a group's run_with is read, and lab 5's MPI groups run through run_mpi.sh", "[grader][manifest]") {
  json j = valid();
  j["groups"][1]["run_with"] = "lab1_tensor/tests/run.sh 2";
  Manifest m = parse_manifest(j);
  CHECK(m.groups[0].run_with.empty());
  CHECK(m.groups[1].run_with == "lab1_tensor/tests/run.sh 2");
  // Every group that runs under mpirun says how to run it by hand, with a launcher that exists.
  const Manifest lab5 = find_lab(testing::repo_root(), 5);
  int mpi_groups = 0;
  for (const auto& g : lab5.groups) {
    if (!g.mpi) continue;
    ++mpi_groups;
    INFO("group " << g.name);
    CHECK(g.run_with == "lab5_parallel/tests/run_mpi.sh 2");
    CHECK(std::filesystem::exists(testing::repo_root() / "lab5_parallel/tests/run_mpi.sh"));
  }
  CHECK(mpi_groups == 3);  // mpi, mpi_train, mpi_async
}

TEST_CASE("manifest: the fixture lab loads and labs are discovered by folder", "[grader][manifest]") {
  Manifest m = testing::fixture_manifest();
  CHECK(m.lab == 99);
  REQUIRE(m.build.has_value());
  CHECK(m.build->sources.size() == 2);
  fs::path root = make_temp_dir("mls-grader-test");
  testing::put(root, "lab2_b/lab.json", valid().dump());
  json j1 = valid();
  j1["lab"] = 0;
  testing::put(root, "lab0_a/lab.json", j1.dump());
  auto labs = discover_labs(root);
  REQUIRE(labs.size() == 2);
  CHECK(labs[0].lab == 0);
  CHECK(labs[1].lab == 1);
  CHECK_THROWS_WITH(find_lab(root, 5), Catch::Contains("labs with a lab.json: 0, 1"));
  json j2 = valid();
  testing::put(root, "lab3_c/lab.json", j2.dump());  // lab 1 again
  CHECK_THROWS_WITH(discover_labs(root), Catch::Contains("declared by both"));
  remove_tree(root);
}
