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

TEST_CASE("a reshape is planned as a view exactly where lab 1's reshape views the planned value, and runs equal lab 2's executor",
          "[lab3][memory]") {
  // Attention's heads: reshape(slice(qkv)) to [B, T, H, D] re-splits the slice's last dim (a
  // view); permuted to [B, H, T, D] and flattened back to [B, T, C] it cannot be (a copy); a
  // reshape of an expand copies.
  Rng rng(29, "reshape views");
  for (int trial = 0; trial < 8; ++trial) {
    INFO("trial " << trial);
    const std::int64_t B = rng.randint(1, 4), T = rng.randint(2, 6), H = rng.randint(1, 4), D = rng.randint(2, 5), C = H * D;
    Program p;
    const Var x = p.input("x", {B, T, 3 * C}), w = p.input("w", {3 * C, 3 * C});
    const Var qkv = autodiff::matmul(x, w);  // a computed value: compact in its buffer
    const Var k = autodiff::reshape(autodiff::slice(qkv, 2, C, 2 * C), {B, T, H, D});          // a view
    const Var kt = autodiff::permute(k, {0, 2, 1, 3});
    const Var merged = autodiff::reshape(kt, {B, H * T, D});                                    // a copy (a view where T or H is 1)
    const Var flat = autodiff::reshape(autodiff::permute(kt, {0, 2, 1, 3}), {B, T, C});          // back to [B, T, H, D]: a view
    const Var cols = autodiff::reshape(autodiff::transpose(autodiff::slice(qkv, 2, 0, C), 1, 2), {B, C * T});  // a copy
    const Var e = autodiff::reshape(autodiff::expand(autodiff::unsqueeze(autodiff::sum(qkv), {0}), {4}), {2, 2});  // a copy
    p.output(autodiff::exp(merged) * 2.0);
    p.output(autodiff::tanh(flat));
    p.output(cols * 3.0);
    p.output(e + 1.0);
    const MemoryPlan plan = plan_memory(p);
    auto buffered = [&](const Var& v) {
      for (std::size_t i = 0; i < plan.schedule.size(); ++i)
        if (plan.schedule[i] == v.get()) return plan.buffer[i] >= 0;
      return false;
    };
    MLS_OBSERVE(buffered(k));
    MLS_OBSERVE(buffered(merged));
    MLS_OBSERVE(buffered(flat));
    MLS_OBSERVE(buffered(cols));
    MLS_OBSERVE(buffered(e));
    PlannedExecutor ex(p, plan);
    for (int run_no = 0; run_no < 3; ++run_no) {  // the buffers' views are made once and stay right
      const auto feeds = random_feeds(p, 200 + static_cast<std::uint64_t>(10 * trial + run_no));
      const std::vector<Tensor> got = ex.run(feeds);
      observe_outputs("reshape views run " + std::to_string(run_no), got);
      MLS_ORACLE_CHECK(CHECK(max_rel_error(got, run(p, feeds)) <= 1.0));
    }
    MLS_ORACLE_CHECK(CHECK_FALSE(buffered(k)); CHECK(buffered(merged) == (T > 1 && H > 1)); CHECK_FALSE(buffered(flat));
                     CHECK(buffered(cols) == (T > 1 && C > 1)); CHECK(buffered(e)));
  }
}

TEST_CASE("embedding and embedding_backward computed in their planned buffers equal lab 2's, and a bad index is still an error",
          "[lab3][memory]") {
  Rng rng(29, "embedding into");
  for (int trial = 0; trial < 6; ++trial) {
    INFO("trial " << trial);
    const DType dt = trial % 2 ? DType::Float64 : DType::Float32;
    const std::int64_t V = rng.randint(1, 9), Dm = rng.randint(1, 20), B = rng.randint(1, 4), T = rng.randint(1, 7);
    Program p;
    const Var w = p.input("w", {V, Dm}, dt), ids = p.input("ids", {B, T}, DType::Int64), g = p.input("g", {B, T, Dm}, dt);
    const Var y = autodiff::embedding(w, ids);  // repeated indices: rows added in index order
    p.output(y * 2.0);
    p.output(autodiff::embedding_backward(g * 1.5, ids, w) + 1.0);
    std::vector<Tensor> feeds = random_feeds(p, 300 + static_cast<std::uint64_t>(trial));
    std::vector<std::int64_t> iv(static_cast<std::size_t>(B * T));
    for (auto& i : iv) i = rng.randint(0, V);
    feeds[1] = Tensor::from_vector(iv, {B, T});
    PlannedExecutor ex(p, plan_memory(p));
    const std::vector<Tensor> got = ex.run(feeds);
    observe_outputs("embedding in planned buffers", got, true);
    MLS_ORACLE_CHECK(CHECK(max_rel_error(got, run(p, feeds)) == 0.0));
    iv[0] = V;  // one past the last row
    feeds[1] = Tensor::from_vector(iv, {B, T});
    require_error([&] { (void)ex.run(feeds); }, "embedding: index " + std::to_string(V) + " is out of range for " + std::to_string(V) + " rows");
  }
}

TEST_CASE("the planned executor takes an output's buffer back once its caller lets go of it, never while the caller holds it",
          "[lab3][memory]") {
  Program p;
  const Var x = p.input("x", {4, 6});
  const Var h = autodiff::tanh(autodiff::matmul(x, autodiff::transpose(x)));  // [4, 4]
  p.output(h * 2.0);
  p.output(autodiff::exp(h));
  PlannedExecutor ex(p, plan_memory(p));
  const auto feeds1 = random_feeds(p, 401), feeds2 = random_feeds(p, 402), feeds3 = random_feeds(p, 403);
  std::vector<const void*> first;
  {
    const std::vector<Tensor> out = ex.run(feeds1);
    observe_outputs("first run", out);
    for (const Tensor& t : out) first.push_back(t.data_ptr());
  }  // let go: the next run takes the buffers back
  const std::vector<Tensor> kept = ex.run(feeds2);
  observe_outputs("second run", kept);
  std::vector<Tensor> kept_copy;
  for (const Tensor& t : kept) kept_copy.push_back(t.clone());
  const std::vector<Tensor> third = ex.run(feeds3);  // kept is still held: new buffers
  observe_outputs("third run", third);
  const bool reused = kept[0].data_ptr() == first[0] && kept[1].data_ptr() == first[1];
  const bool fresh = third[0].data_ptr() != kept[0].data_ptr() && third[1].data_ptr() != kept[1].data_ptr();
  MLS_OBSERVE(reused);
  MLS_OBSERVE(fresh);
  CHECK(reused);
  CHECK(fresh);
  CHECK(max_rel_error(kept, kept_copy) == 0.0);  // the third run wrote nothing the caller holds
  MLS_ORACLE_CHECK(CHECK(max_rel_error(kept, run(p, feeds2)) <= 1.0); CHECK(max_rel_error(third, run(p, feeds3)) <= 1.0));
}
