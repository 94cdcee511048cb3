// Control flow (lab 2's cond and while_loop) in lab 3: verify, the memory planner (a loop body
// planned once, its buffers reused per iteration; the saved states of a loop with a gradient),
// the planned executor, and the JSON format's named refusal.
#include "helpers.hpp"
#include "mls/graph_opt/compile.hpp"

using namespace graph_opt_test;
using V = std::vector<Var>;

namespace {
Tensor randn64(const Shape& s, std::uint64_t seed) { return graph_opt_test::randn64(s, seed, "lab3-control"); }
/// x <- tanh(x w + x) for `steps` iterations (w captured), in program p.
V loop(Program& p, const Var& x, const Tensor& wv, std::int64_t steps) {
  const Var w = p.constant(wv, "w");
  return autodiff::while_loop([&](const V& s) { return autodiff::lt(s[0], int_like(s[0], steps)); },
                              [&](const V& s) {
                                return V{s[0] + int_like(s[0], 1), autodiff::tanh(autodiff::matmul(s[1], w) + s[1])};
                              },
                              {int_like(x, 0), x});
}
}  // namespace

TEST_CASE("memory: a while loop's body is planned once, its saved states cost (T + 1) x state", "[lab3][memory]") {
  const std::int64_t T = 5, B = 3, D = 7;
  const Tensor xv = randn64({B, D}, 1), wv = randn64({D, D}, 2);
  Tensor ref = xv;  // host reference
  for (std::int64_t t = 0; t < T; ++t) ref = mls::tanh(mls::add(mls::matmul(ref, wv), ref));
  Program p;
  const Var x = p.input("x", {B, D}, DType::Float64);
  const V out = loop(p, x, wv, T);
  p.output(out[1]);
  verify(p);
  const MemoryPlan plan = plan_memory(p);
  const autodiff::ControlFlow& cf = *autodiff::control_flow(*out[1].get());
  const Program body = subgraph_program(cf.subs[1]);
  CHECK(body.inputs.size() == 3);  // the counter, x and the captured w
  const std::size_t body_peak = plan_memory(body).peak_bytes;
  CHECK(body_peak > 0);
  CHECK(plan.subgraph_bytes == body_peak);  // once, not T times
  CHECK(plan.summary().find("sub-graphs") != std::string::npos);
  PlannedExecutor ex(p, plan);
  const auto got = ex.run({xv});
  CHECK(allclose(got[0], ref, 1e-12, 1e-12));
  CHECK(allclose(run(p, {xv})[0], ref, 1e-12, 1e-12));
  // No gradient: no saved states.
  LoopMemory m = control_memory(p, *out[1].get(), T);
  CHECK_FALSE(m.saves_states);
  CHECK(m.saved_bytes == 0);
  CHECK(m.state_bytes == sizeof(std::int64_t) + B * D * sizeof(double));
  CHECK(m.body_bytes == body_peak);
  // With a gradient the forward keeps T + 1 states for the reverse replay: O(T).
  const Var dx = autodiff::gradients(autodiff::sum(out[1]), {x})[0];
  p.output(dx);
  verify(p);
  m = control_memory(p, *out[1].get());  // T from the last run
  CHECK(m.saves_states);
  CHECK(m.trip_count == T);
  CHECK(m.saved_bytes == static_cast<std::size_t>(T + 1) * m.state_bytes);
  CHECK(m.total() == m.body_bytes + m.saved_bytes);
  PlannedExecutor ex2(p, plan_memory(p));
  const auto got2 = ex2.run({xv});
  const auto want2 = run(p, {xv});
  CHECK(allclose(got2[0], ref, 1e-12, 1e-12));
  CHECK(allclose(got2[1], want2[1], 1e-12, 1e-12));
  // The gradient against the unrolled program's.
  Program u;
  const Var ux = u.input("x", {B, D}, DType::Float64);
  Var h = ux;
  const Var uw = u.constant(wv, "w");
  for (std::int64_t t = 0; t < T; ++t) h = autodiff::tanh(autodiff::matmul(h, uw) + h);
  u.output(autodiff::gradients(autodiff::sum(h), {ux})[0]);
  CHECK(allclose(run(u, {xv})[0], want2[1], 1e-10, 1e-12));
  require_error([&] { (void)control_memory(p, *x.get()); }, "is not a cond or while_loop node");
}

TEST_CASE("memory: a cond's branches are planned and run in the planned buffers", "[lab3][memory]") {
  Program p;
  const Var x = p.input("x", {4, 5}, DType::Float64);
  const Var pr = p.input("p", {}, DType::Bool);
  const V out = autodiff::cond(pr, [](const V& v) { return V{autodiff::exp(v[0]) * 2.0}; },
                               [](const V& v) { return V{autodiff::sin(v[0]) + 1.0}; }, {x});
  p.output(out[0]);
  verify(p);
  const MemoryPlan plan = plan_memory(p);
  CHECK(plan.subgraph_bytes > 0);
  const Tensor xv = randn64({4, 5}, 3);
  for (bool b : {true, false}) {
    const Tensor pv = Tensor::scalar(b ? 1 : 0, DType::Bool);
    PlannedExecutor ex(p, plan);
    const Tensor want = b ? mls::mul(mls::exp(xv), 2.0) : mls::add(mls::sin(xv), 1.0);
    CHECK(allclose(ex.run({xv, pv})[0], want, 1e-12, 1e-12));
  }
  CHECK(control_memory(p, *out[0].get()).saved_bytes == 0);
}

TEST_CASE("json: a program with sub-graphs is refused by name", "[lab3][ir]") {
  Program p;
  const Var x = p.input("x", {2, 3}, DType::Float64);
  p.output(loop(p, x, randn64({3, 3}, 4), 2)[1]);
  require_error([&] { (void)to_json(p); },
                "(while_loop) holds sub-graphs, which the JSON format (mls-graph version 1) does not support");
  // A file naming a control op cannot bring its sub-graph: a named error, not a crash.
  const std::string text = R"({"format": "mls-graph", "version": 1, "nodes": [
    {"op": "placeholder", "name": "x", "inputs": [], "attrs": {}, "shape": [2], "dtype": "float64"},
    {"op": "while_loop", "inputs": [0], "attrs": {"body": 999999, "output": 0}, "shape": [2], "dtype": "float64"}],
    "inputs": [0], "outputs": [1]})";
  require_error([&] { (void)from_json(text); }, "while_loop: sub-graph 999999 is not in this process");
}

TEST_CASE("compile: a function using a node of another graph is a named error", "[lab3][compile]") {
  // apply() hands a node of a foreign graph to the tracer's lift (how sub-graphs capture): compile
  // names it rather than reading a value the node does not have.
  autodiff::Graph g;
  const Var w = g.placeholder("w", {3}, DType::Float64);
  auto f = compile([&](Var x) { return x * w; });
  require_error([&] { (void)f(Var(randn64({3}, 5))); }, "a node of another graph; fn must be eager code");
}
