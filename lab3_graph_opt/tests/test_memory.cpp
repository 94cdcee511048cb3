// Liveness, buffer assignment and the planned executor.
#include "helpers.hpp"

using namespace graph_opt_test;

TEST_CASE("liveness of a chain: each value dies at its reader, outputs live to the end", "[lab3][memory]") {
  Program p;
  const Var x = p.input("x", {8});
  const Var a = autodiff::exp(x);
  const Var b = autodiff::relu(a);
  const Var c = autodiff::reshape(b, {2, 4});   // a view: keeps b's memory alive
  const Var d = autodiff::tanh(c);
  p.output(d);
  const auto s = p.schedule();
  MLS_ORACLE_CHECK(REQUIRE(s.size() == 5));  // the test's input
  const auto live = liveness(p, s);
  REQUIRE(live.size() == s.size());  // one interval per step
  std::vector<std::int64_t> defs, ends;
  for (const auto& l : live) {
    defs.push_back(l.def);
    ends.push_back(l.last_use);
  }
  MLS_OBSERVE(ends);
  MLS_OBSERVE(defs);
  MLS_ORACLE_CHECK(CHECK(live[1].def == 1);
                   CHECK(live[1].last_use == 2);   // a, read by relu
                   CHECK(live[2].last_use == 4);   // b, read through the view by tanh
                   CHECK(live[3].last_use == 4);
                   CHECK(live[4].last_use == 5));  // the output
}

TEST_CASE("buffer assignment reuses memory and works in place on a chain", "[lab3][memory]") {
  Program p = elementwise_chain(256, 8);
  const MemoryPlan plan = plan_memory(p);
  INFO(plan.summary());
  MLS_OBSERVE(plan.naive_bytes);
  MLS_OBSERVE(plan.peak_bytes);
  MLS_OBSERVE(std::count(plan.in_place.begin(), plan.in_place.end(), true));
  MLS_ORACLE_CHECK(CHECK(plan.naive_bytes == 8 * 256 * 4);
                   CHECK(plan.peak_bytes == 256 * 4);  // everything in place in one buffer
                   CHECK(std::count(plan.in_place.begin(), plan.in_place.end(), true) == 7));
  PlannedExecutor ex(p, plan);
  const auto feeds = random_feeds(p, 5);
  const std::vector<Tensor> got = ex.run(feeds);
  observe_outputs("planned", got, true);
  MLS_OBSERVE(ex.measured_peak_bytes());
  MLS_ORACLE_CHECK(CHECK(error_against(got, p, feeds) == 0.0); CHECK(ex.measured_peak_bytes() == plan.peak_bytes));
}

TEST_CASE("planned peak is below allocate-everything on attention and the MLP, and the executor matches it", "[lab3][memory]") {
  for (const char* name : {"attention", "mlp", "resnet"}) {
    INFO(name);
    Program p = build_model(name);
    const MemoryPlan plan = plan_memory(p);
    INFO(plan.summary());
    MLS_OBSERVE(plan.peak_bytes);
    MLS_OBSERVE(plan.naive_bytes);
    MLS_OBSERVE(plan.live_bytes_max);
    MLS_ORACLE_CHECK(CHECK(plan.peak_bytes < plan.naive_bytes); CHECK(plan.peak_bytes >= plan.live_bytes_max));
    // No two values that are live at once share a buffer.
    const auto live = liveness(p, plan.schedule);
    REQUIRE(live.size() == plan.schedule.size());  // one interval per step
    REQUIRE(plan.buffer.size() == plan.schedule.size());
    REQUIRE(plan.in_place.size() == plan.schedule.size());
    std::int64_t clashes = 0;  // pairs of values live at once in one buffer
    for (std::size_t i = 0; i < plan.schedule.size(); ++i)
      for (std::size_t j = i + 1; j < plan.schedule.size(); ++j)
        if (plan.buffer[i] >= 0 && plan.buffer[i] == plan.buffer[j] && !plan.in_place[j]) {
          clashes += !(live[i].last_use < static_cast<std::int64_t>(j));
          MLS_ORACLE_CHECK(CHECK(live[i].last_use < static_cast<std::int64_t>(j)));
        }
    MLS_OBSERVE(clashes);
    PlannedExecutor ex(p, plan);
    for (std::uint64_t seed : {1u, 2u}) {
      const auto feeds = random_feeds(p, seed);
      const std::vector<Tensor> got = ex.run(feeds);
      observe_outputs("planned", got);
      MLS_ORACLE_CHECK(CHECK(error_against(got, p, feeds) <= 1.0));
    }
    MLS_OBSERVE(ex.measured_peak_bytes());
    MLS_ORACLE_CHECK(CHECK(ex.measured_peak_bytes() == plan.peak_bytes));
    // After optimisation too.
    PassManager pm;
    pm.add_pipeline(default_pipeline());
    pm.run(p);
    const MemoryPlan after = plan_memory(p);
    MLS_OBSERVE(after.peak_bytes);
    PlannedExecutor ex2(p, after);
    const auto feeds = random_feeds(p, 3);
    const std::vector<Tensor> got = ex2.run(feeds);
    observe_outputs("planned after the pipeline", got);
    MLS_ORACLE_CHECK(CHECK(error_against(got, p, feeds) <= 1.0));
    MLS_OBSERVE(ex2.measured_peak_bytes());
    MLS_ORACLE_CHECK(CHECK(ex2.measured_peak_bytes() == after.peak_bytes));
  }
}

TEST_CASE("planning needs known shapes", "[lab3][memory]") {
  Program p;
  const Var x = p.input("x", {-1, 4});
  p.output(autodiff::relu(x));
  require_error([&] { plan_memory(p); }, "has shape [-1, 4]; give the program concrete input shapes");
}
