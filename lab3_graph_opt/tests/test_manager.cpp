// The pass manager: pipelines, statistics, verification after each pass, DOT dumps.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "helpers.hpp"

using namespace graph_opt_test;

TEST_CASE("the pass manager runs a pipeline and records nodes before and after each pass", "[lab3][manager]") {
  Program p = mlp(8, 16);
  const Program ref = clone(p);
  PassManager pm;
  pm.add_pipeline("simplify,cse,epilogue,fuse-elementwise,dce");
  REQUIRE(pm.size() == 5);
  const PassReport r = pm.run(p);
  REQUIRE(r.stats.size() == 5);
  for (const auto& st : r.stats) mls::testing::observe("pass", st.name);
  if (mls::testing::observing()) observe_outputs("optimised", run(p, random_feeds(ref, 11)));
  CHECK(r.stats[0].name == "simplify");
  CHECK(r.stats[0].nodes_before == ref.size());
  for (std::size_t i = 1; i < r.stats.size(); ++i) CHECK(r.stats[i].nodes_before == r.stats[i - 1].nodes_after);
  CHECK(r.stats.back().nodes_after == p.size());
  CHECK(p.size() < ref.size());
  CHECK(r.stats[1].rewrites > 0);  // cse found the duplicate
  CHECK(r.table().find("fuse-elementwise") != std::string::npos);
  CHECK(equivalent(ref, p));
}

TEST_CASE("the pass manager refuses a pass that breaks the verifier and names it", "[lab3][manager]") {
  Program p = slides_expression(4);
  PassManager pm;
  pm.add_pipeline("cse");
  pm.add({"vandal", "breaks a shape", [](Program& q) {
            q.outputs[0].get()->shape = {3};
            return 1;
          }});
  require_error([&] { pm.run(p); }, "pass 'vandal' broke the graph: verify: node");
  require_error([] { PassManager().add_pipeline("dce,nope"); }, "unknown pass 'nope'");
  Program bad = slides_expression(4);
  bad.outputs[0].get()->shape = {2};
  require_error([&] { PassManager().add_pipeline("dce").run(bad); }, "the input program is invalid");
}

TEST_CASE("dump-after writes the graph after the named pass", "[lab3][manager]") {
  Program p = slides_expression(4);
  const std::string path = (std::filesystem::temp_directory_path() / "lab3_dump_after_test.dot").string();
  std::remove(path.c_str());
  PassManager pm;
  pm.add_pipeline("fuse-elementwise,dce").dump_after("fuse-elementwise", path);
  pm.run(p);
  std::ifstream f(path);
  REQUIRE(f.good());
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (mls::testing::observing()) observe_outputs("after the pipeline", run(p, random_feeds(p, 11)));
  CHECK(text.find("fused_elementwise") != std::string::npos);
  CHECK(text.find("after fuse-elementwise") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("the default pipeline optimises the three example models", "[lab3][manager]") {
  for (const char* name : {"resnet", "attention", "mlp"}) {
    INFO(name);
    Program p = build_model(name);
    const Program ref = clone(p);
    PassManager pm;
    pm.add_pipeline(default_pipeline());
    const PassReport r = pm.run(p);
    INFO(r.table());
    if (mls::testing::observing()) observe_outputs(name, run(p, random_feeds(ref, 11)));
    CHECK(p.size() < ref.size());
    CHECK(program_cost(p).bytes < program_cost(ref).bytes);
    CHECK(equivalent(ref, p, 2));
  }
  require_error([] { build_model("vgg"); }, "unknown model 'vgg'");
}
