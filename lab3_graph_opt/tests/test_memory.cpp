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
  REQUIRE(s.size() == 5);
  const auto live = liveness(p, s);
  REQUIRE(live.size() == 5);
  std::vector<std::int64_t> ends;
  for (const auto& l : live) ends.push_back(l.last_use);
  MLS_OBSERVE(ends);
  MLS_OBSERVE(live[1].def);
  CHECK(live[1].def == 1);
  CHECK(live[1].last_use == 2);   // a, read by relu
  CHECK(live[2].last_use == 4);   // b, read through the view by tanh
  CHECK(live[3].last_use == 4);
  CHECK(live[4].last_use == 5);   // the output
}

TEST_CASE("buffer assignment reuses memory and works in place on a chain", "[lab3][memory]") {
  Program p = elementwise_chain(256, 8);
  const MemoryPlan plan = plan_memory(p);
  INFO(plan.summary());
  MLS_OBSERVE(plan.naive_bytes);
  MLS_OBSERVE(plan.peak_bytes);
  MLS_OBSERVE(std::count(plan.in_place.begin(), plan.in_place.end(), true));
  CHECK(plan.naive_bytes == 8 * 256 * 4);
  CHECK(plan.peak_bytes == 256 * 4);  // everything in place in one buffer
  CHECK(std::count(plan.in_place.begin(), plan.in_place.end(), true) == 7);
  PlannedExecutor ex(p, plan);
  const auto feeds = random_feeds(p, 5);
  if (mls::testing::observing()) observe_outputs("planned", ex.run(feeds), true);
  MLS_OBSERVE(ex.measured_peak_bytes());
  CHECK(max_rel_error(ex.run(feeds), run(p, feeds)) == 0.0);
  CHECK(ex.measured_peak_bytes() == plan.peak_bytes);
}

TEST_CASE("planned peak is below allocate-everything on attention and the MLP, and the executor matches it", "[lab3][memory]") {
  for (const char* name : {"attention", "mlp", "resnet"}) {
    INFO(name);
    Program p = build_model(name);
    const MemoryPlan plan = plan_memory(p);
    INFO(plan.summary());
    CHECK(plan.peak_bytes < plan.naive_bytes);
    CHECK(plan.peak_bytes >= plan.live_bytes_max);
    // No two values that are live at once share a buffer.
    const auto live = liveness(p, plan.schedule);
    for (std::size_t i = 0; i < plan.schedule.size(); ++i)
      for (std::size_t j = i + 1; j < plan.schedule.size(); ++j)
        if (plan.buffer[i] >= 0 && plan.buffer[i] == plan.buffer[j] && !plan.in_place[j]) CHECK(live[i].last_use < static_cast<std::int64_t>(j));
    PlannedExecutor ex(p, plan);
    for (std::uint64_t seed : {1u, 2u}) {
      const auto feeds = random_feeds(p, seed);
      if (mls::testing::observing()) observe_outputs("planned", ex.run(feeds));
      CHECK(max_rel_error(ex.run(feeds), run(p, feeds)) <= 1.0);
    }
    CHECK(ex.measured_peak_bytes() == plan.peak_bytes);
    // After optimisation too.
    PassManager pm;
    pm.add_pipeline(default_pipeline());
    pm.run(p);
    const MemoryPlan after = plan_memory(p);
    PlannedExecutor ex2(p, after);
    const auto feeds = random_feeds(p, 3);
    if (mls::testing::observing()) observe_outputs("planned after the pipeline", ex2.run(feeds));
    CHECK(max_rel_error(ex2.run(feeds), run(p, feeds)) <= 1.0);
    CHECK(ex2.measured_peak_bytes() == after.peak_bytes);
  }
}

TEST_CASE("planning needs known shapes", "[lab3][memory]") {
  Program p;
  const Var x = p.input("x", {-1, 4});
  p.output(autodiff::relu(x));
  require_error([&] { plan_memory(p); }, "has shape [-1, 4]; give the program concrete input shapes");
}
