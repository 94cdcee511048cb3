// The pass registry and the pass manager (per-pass statistics, verifier after each pass, DOT dumps).
#include <iomanip>
#include <memory>
#include <sstream>
#include <unordered_set>

#include "mls/common/timer.hpp"
#include "mls/autodiff/control.hpp"
#include "mls/graph_opt/memory.hpp"
#include "mls/graph_opt/passes.hpp"

namespace mls::graph_opt {

const std::vector<PassInfo>& all_passes() {
  static const std::vector<PassInfo> passes{
      {"dce", "dead-code elimination", dead_code_elimination},
      {"cse", "common-subexpression elimination", common_subexpression_elimination},
      {"fold", "constant folding", constant_folding},
      {"simplify", "algebraic simplification (x*1, x+0, double transpose, reshape of reshape)", algebraic_simplification},
      {"conv-bn", "fold inference batch norm into the preceding conv (W2 = W*R, B2 = B*R + P)", fold_conv_batchnorm},
      {"merge-convs", "conv(x, W1) + conv(x, W2) -> conv(x, W1 + W2)", merge_parallel_convs},
      {"merge-matmuls", "x@Wq, x@Wk, x@Wv -> one x@[Wq|Wk|Wv] and slices", merge_shared_matmuls},
      {"fold-transpose", "matmul of a transposed operand -> gemm with a trans flag", fold_transpose_into_matmul},
      {"batch-reduce", "sum_like to its own shape -> x; sum over the batch of a^T g -> one gemm over B T", fold_batch_reduction},
      {"epilogue", "relu/gelu(matmul + bias) -> one gemm with an epilogue", fuse_matmul_epilogue},
      {"fuse-elementwise", "trees of elementwise ops -> one fused loop", fuse_elementwise},
      {"reshape-like", "reshape_like(x, like) with known shapes -> reshape(x, shape): a view", specialize_reshape_like},
      {"fused-layernorm", "layer_norm -> fused_layer_norm (one pass per row; gradient: fused row kernels); before the backward", fuse_layer_norm},
      {"fuse-gelu", "gelu(x + b) -> bias_gelu (one pass; gradient: one fused kernel); before the backward", fuse_gelu},
      {"fuse-softmax", "softmax(x * s + mask) -> scaled_softmax (one pass per row; gradient: one row kernel); before the backward", fuse_softmax},
      {"fuse-attention", "matmul(softmax(q k^T * s + mask), v) -> fused_attention (gradient: one fused kernel); before the backward", fuse_attention},
      {"concat-slices", "a sum of slice_backward pieces of one value -> one concat", concat_slice_gradients},
  };
  return passes;
}

const PassInfo& find_pass(const std::string& name) {
  std::string known;
  for (const PassInfo& p : all_passes()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  fail("pass manager: unknown pass '", name, "' (known: ", known, ")");
}

std::string default_pipeline() {
  return "simplify,cse,fold,conv-bn,merge-convs,merge-matmuls,fold-transpose,batch-reduce,epilogue,fuse-elementwise,dce";
}

std::string compile_pre_grad_pipeline() { return "fused-layernorm,fuse-gelu,fuse-softmax"; }
std::string compile_pipeline() { return "reshape-like,concat-slices," + default_pipeline(); }

PassManager& PassManager::add(PassInfo pass) {
  MLS_CHECK(pass.run != nullptr, "pass manager: pass '", pass.name, "' has no function");
  passes_.push_back(std::move(pass));
  return *this;
}
PassManager& PassManager::add_pipeline(const std::string& names) {
  std::stringstream ss(names);
  std::string name;
  while (std::getline(ss, name, ','))
    if (!name.empty()) add(find_pass(name));
  return *this;
}
PassManager& PassManager::dump_after(std::string name, std::string path) {
  dumps_.emplace_back(std::move(name), std::move(path));
  return *this;
}

int PassManager::optimise_subgraphs(Program& p) const {
  // Control flows a gradient node of p reads: left alone.
  std::unordered_set<std::int64_t> has_grad, done;
  for (const NodePtr& n : p.graph->nodes())
    if ((n->op == Op::CondGrad || n->op == Op::WhileGrad) && n->attrs.has("body")) has_grad.insert(n->attrs.i("body"));
  int optimised = 0;
  for (Node* n : p.schedule()) {
    if ((n->op != Op::Cond && n->op != Op::WhileLoop) || !n->attrs.has("body")) continue;
    const std::int64_t id = n->attrs.i("body");
    if (!done.insert(id).second || has_grad.count(id)) continue;
    const autodiff::ControlFlow* cf = autodiff::control_flow(*n);
    if (!cf || cf->saves_states) continue;
    bool plain = true;
    for (const autodiff::SubGraph& sg : cf->subs)
      for (const NodePtr& m : sg.graph->nodes()) plain = plain && m->op != Op::Variable && m->op != Op::Assign;
    if (!plain) continue;
    autodiff::ControlFlow copy = *cf;
    for (autodiff::SubGraph& sg : copy.subs) {
      Program q = subgraph_program(sg);
      run(q);  // its own sub-graphs first, then the passes; verified after each
      autodiff::SubGraph opt;
      opt.inputs.resize(sg.inputs.size());
      std::size_t k = 0;
      for (std::size_t i = 0; i < sg.inputs.size(); ++i)
        if (sg.inputs[i].defined()) opt.inputs[i] = q.inputs.at(k++);
      opt.outputs = q.outputs;
      opt.graph = std::shared_ptr<Graph>(std::move(q.graph));
      sg = std::move(opt);
      ++optimised;
    }
    const std::int64_t fresh = autodiff::publish_control_flow(std::move(copy));
    for (const NodePtr& m : p.graph->nodes())
      if ((m->op == Op::Cond || m->op == Op::WhileLoop) && m->attrs.has("body") && m->attrs.i("body") == id)
        m->attrs.set("body", fresh);
  }
  return optimised;
}

PassReport PassManager::run(Program& p) const {
  try {
    verify(p);
  } catch (const NotImplemented&) {
    throw;
  } catch (const Error& e) {
    fail("pass manager: the input program is invalid: ", e.what());
  }
  PassReport report;
  report.subgraphs = optimise_subgraphs(p);
  for (const PassInfo& pass : passes_) {
    PassStat s;
    s.name = pass.name;
    s.nodes_before = p.size();
    Timer t;
    s.rewrites = pass.run(p);
    s.millis = t.millis();
    s.nodes_after = p.size();
    try {
      verify(p);
    } catch (const NotImplemented&) {
      throw;
    } catch (const Error& e) {
      fail("pass '", pass.name, "' broke the graph: ", e.what());
    }
    for (const auto& [name, path] : dumps_)
      if (name == pass.name) to_dot(p, "after " + pass.name).write(path);
    report.stats.push_back(s);
  }
  return report;
}

std::string PassReport::table() const {
  std::ostringstream os;
  os << std::left << std::setw(18) << "pass" << std::right << std::setw(8) << "before" << std::setw(8) << "after"
     << std::setw(10) << "rewrites" << std::setw(10) << "ms" << "\n";
  for (const PassStat& s : stats)
    os << std::left << std::setw(18) << s.name << std::right << std::setw(8) << s.nodes_before << std::setw(8)
       << s.nodes_after << std::setw(10) << s.rewrites << std::setw(10) << std::fixed << std::setprecision(3) << s.millis
       << "\n";
  if (subgraphs > 0) os << "(and inside " << subgraphs << " sub-graph" << (subgraphs == 1 ? "" : "s") << " of cond / while_loop)\n";
  return os.str();
}

}  // namespace mls::graph_opt
