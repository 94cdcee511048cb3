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
  MLS_ORACLE_CHECK(REQUIRE(pm.size() == 5));
  const PassReport r = pm.run(p);
  MLS_OBSERVE(r.stats.size());
  MLS_ORACLE_CHECK(REQUIRE(r.stats.size() == 5));
  std::vector<std::int64_t> counts;  // per pass: nodes before, nodes after, rewrites
  for (const auto& st : r.stats) {
    mls::testing::observe("pass", st.name);
    counts.insert(counts.end(), {static_cast<std::int64_t>(st.nodes_before), static_cast<std::int64_t>(st.nodes_after), st.rewrites});
  }
  mls::testing::observe("nodes before, nodes after, rewrites", counts);
  MLS_OBSERVE(p.size());
  for (std::uint64_t seed : {11u, 7u, 8u}) {  // 7 and 8: the inputs equivalent(ref, p) draws
    const auto feeds = random_feeds(ref, seed);
    const std::vector<Tensor> got = run(p, feeds);
    observe_outputs("optimised", got);
  }
  MLS_ORACLE_CHECK(
      CHECK(r.stats[0].name == "simplify");
      CHECK(r.stats[0].nodes_before == ref.size());
      for (std::size_t i = 1; i < r.stats.size(); ++i) CHECK(r.stats[i].nodes_before == r.stats[i - 1].nodes_after);
      CHECK(r.stats.back().nodes_after == p.size());
      CHECK(p.size() < ref.size());
      CHECK(r.stats[1].rewrites > 0);  // cse found the duplicate
      CHECK(r.table().find("fuse-elementwise") != std::string::npos);
      CHECK(equivalent(ref, p)));
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
  const std::string path = mls::testing::temp_path("dump_after.dot");
  std::remove(path.c_str());
  PassManager pm;
  pm.add_pipeline("fuse-elementwise,dce").dump_after("fuse-elementwise", path);
  pm.run(p);
  std::ifstream f(path);
  REQUIRE(f.good());
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  observe_outputs("after the pipeline", run(p, random_feeds(p, 11)));
  // What the dump shows: how many nodes it draws, how many of them are fused loops, its title.
  auto occurrences = [&](const std::string& needle) {
    std::int64_t k = 0;
    for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++k;
    return k;
  };
  mls::testing::observe("nodes drawn", occurrences("shape="));
  mls::testing::observe("fused_elementwise nodes drawn", occurrences("fused_elementwise"));
  mls::testing::observe("first line", text.substr(0, text.find('\n')));
  MLS_ORACLE_CHECK(CHECK(text.find("fused_elementwise") != std::string::npos);
                   CHECK(text.find("after fuse-elementwise") != std::string::npos));
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
    MLS_OBSERVE(p.size());
    mls::testing::observe("bytes moved", program_cost(p).bytes);
    for (std::uint64_t seed : {11u, 7u, 8u}) {  // 7 and 8: the inputs equivalent(ref, p, 2) draws
      const auto feeds = random_feeds(ref, seed);
      observe_outputs(name, run(p, feeds));
    }
    MLS_ORACLE_CHECK(CHECK(p.size() < ref.size()); CHECK(program_cost(p).bytes < program_cost(ref).bytes);
                     CHECK(equivalent(ref, p, 2)));
  }
  require_error([] { build_model("vgg"); }, "unknown model 'vgg'");
}
