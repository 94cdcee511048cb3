// Lab 3's passes inside the sub-graphs of lab 2's cond and while_loop (PassManager::run): CSE,
// simplification, folding, fusion and DCE in a loop body and in both branches, the optimised
// program equal to the original; a loop whose gradient exists left as it is.
#include "helpers.hpp"

#include "mls/autodiff/control.hpp"

using namespace graph_opt_test;
using V = std::vector<Var>;

namespace {
Tensor randn64(const Shape& s, std::uint64_t seed) { return graph_opt_test::randn64(s, seed, "lab3-subgraph-passes"); }
/// Nodes of every sub-graph of the control node `n` (what the passes shrink).
std::size_t sub_nodes(const Node& n) {
  std::size_t total = 0;
  for (const autodiff::SubGraph& sg : autodiff::control_flow(n)->subs) total += sg.graph->size();
  return total;
}
std::size_t sub_count(const Node& n, Op op) {
  std::size_t c = 0;
  for (const autodiff::SubGraph& sg : autodiff::control_flow(n)->subs)
    for (const NodePtr& m : sg.graph->nodes()) c += m->op == op;
  return c;
}
/// x <- tanh((x * 1 + 0) w + x) + (exp(x) - exp(x)) for `steps` iterations: CSE, simplify,
/// epilogue and fusion all have work in the body.
V loop(Program& p, const Var& x, const Tensor& wv, std::int64_t steps) {
  const Var w = p.constant(wv, "w");
  return autodiff::while_loop(
      [&](const V& s) { return autodiff::lt(s[0], int_like(s[0], steps)); },
      [&](const V& s) {
        const Var h = s[1] * 1.0 + 0.0;
        return V{s[0] + int_like(s[0], 1),
                 autodiff::tanh(autodiff::matmul(h, w) + s[1]) + (autodiff::exp(s[1]) - autodiff::exp(s[1]))};
      },
      {int_like(x, 0), x});
}
}  // namespace

TEST_CASE("the passes run inside a while_loop's body: fewer nodes, the same values", "[lab3][manager]") {
  const Tensor xv = randn64({3, 5}, 1), wv = randn64({5, 5}, 2);
  Program p;
  const Var x = p.input("x", {3, 5}, DType::Float64);
  p.output(loop(p, x, wv, 4)[1]);
  const Program ref = clone(p);
  const std::vector<Tensor> want = run(ref, {xv});
  const Node& before = *p.outputs[0].get();
  const std::size_t nodes_before = sub_nodes(before), exps_before = sub_count(before, Op::Exp);
  const std::int64_t id_before = before.attrs.i("body");
  PassManager pm;
  pm.add_pipeline(default_pipeline());
  const PassReport r = pm.run(p);
  INFO(r.table());
  const Node& after = *p.outputs[0].get();
  MLS_OBSERVE(r.subgraphs);
  MLS_OBSERVE(sub_nodes(after));
  MLS_OBSERVE(sub_count(after, Op::Exp));
  const std::vector<Tensor> got = run(p, {xv});
  observe_outputs("loop after the passes", got);
  MLS_ORACLE_CHECK(CHECK(r.subgraphs == 2);  // the condition and the body
                   CHECK(after.attrs.i("body") != id_before);
                   CHECK(sub_nodes(after) < nodes_before);
                   CHECK(exps_before == 2); CHECK(sub_count(after, Op::Exp) <= 1);  // CSE
                   CHECK(max_rel_error(got, want) <= 1.0));
  // The planned executor runs it too (the body's buffers planned once).
  PlannedExecutor ex(p, plan_memory(p));
  const std::vector<Tensor> planned = ex.run({xv});
  observe_outputs("planned", planned);
  MLS_ORACLE_CHECK(CHECK(max_rel_error(planned, want) <= 1.0));
}

TEST_CASE("the passes run inside both branches of a cond, each branch equal to the original", "[lab3][manager]") {
  const Tensor xv = randn64({4, 3}, 3);
  for (bool take : {true, false}) {
    INFO("predicate " << take);
    Program p;
    const Var x = p.input("x", {4, 3}, DType::Float64);
    const Var pred = p.input("pred", {}, DType::Bool);
    const V out = autodiff::cond(
        pred, [](const V& v) { return V{autodiff::exp(v[0]) * 1.0 + autodiff::exp(v[0])}; },
        [](const V& v) { return V{autodiff::relu((v[0] + 0.0) * 2.0 + 1.0)}; }, {x});
    p.output(out[0]);
    const Program ref = clone(p);
    const std::vector<Tensor> feeds{xv, Tensor::scalar(take ? 1.0 : 0.0, DType::Bool)};
    const std::vector<Tensor> want = run(ref, feeds);
    const std::size_t nodes_before = sub_nodes(*p.outputs[0].get());
    PassManager pm;
    pm.add_pipeline(default_pipeline());
    const PassReport r = pm.run(p);
    const std::vector<Tensor> got = run(p, feeds);
    MLS_OBSERVE(r.subgraphs);
    MLS_OBSERVE(sub_nodes(*p.outputs[0].get()));
    observe_outputs("cond after the passes", got);
    MLS_ORACLE_CHECK(CHECK(r.subgraphs == 2); CHECK(sub_nodes(*p.outputs[0].get()) < nodes_before);
                     CHECK(sub_count(*p.outputs[0].get(), kFusedElementwise) >= 1);
                     CHECK(max_rel_error(got, want) <= 1.0));
  }
}

TEST_CASE("a while_loop whose gradient exists is left as it is, and the gradient still equals the original's", "[lab3][manager]") {
  const Tensor xv = randn64({2, 5}, 4), wv = randn64({5, 5}, 5);
  Program p;
  const Var x = p.input("x", {2, 5}, DType::Float64);
  const V out = loop(p, x, wv, 3);
  p.output(out[1]);
  p.output(autodiff::gradients(autodiff::sum(out[1]), {x})[0]);
  const Program ref = clone(p);
  const std::vector<Tensor> want = run(ref, {xv});
  const std::int64_t id = out[1].get()->attrs.i("body");
  PassManager pm;
  pm.add_pipeline(default_pipeline());
  const PassReport r = pm.run(p);
  const std::vector<Tensor> got = run(p, {xv});
  MLS_OBSERVE(r.subgraphs);
  observe_outputs("loop and its gradient after the passes", got);
  MLS_ORACLE_CHECK(CHECK(r.subgraphs == 0); CHECK(out[1].get()->attrs.i("body") == id);
                   CHECK(max_rel_error(got, want) <= 1.0));
}
