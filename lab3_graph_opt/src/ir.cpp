// Student file of lab 3: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Program, verifier, printer, Graphviz drawing, cost model, a reference executor and the
// equivalence check every pass is tested with.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <unordered_set>

#include "mls/common/rng.hpp"
#include "mls/graph_opt/ir.hpp"

namespace mls::graph_opt {

// ---- Program ------------------------------------------------------------------------------------
Program::Program() : graph(std::make_unique<Graph>()) {}

Var Program::input(std::string name, Shape shape, DType dtype) {
  Var v = graph->placeholder(std::move(name), std::move(shape), dtype);
  inputs.push_back(v);
  return v;
}
Var Program::constant(Tensor value, std::string name) { return graph->constant(std::move(value), std::move(name)); }
Var Program::output(const Var& v) {
  MLS_CHECK(v.defined() && v.get()->graph == graph.get(), "output: the value is not a node of this program's graph");
  outputs.push_back(v);
  return v;
}
std::size_t Program::replace(const Var& from, const Var& to) {
  std::size_t moved = graph->replace_all_uses(from, to);
  for (Var& o : outputs)
    if (o.get() == from.get()) {
      o = to;
      ++moved;
    }
  return moved;
}
Var Program::make(Op op, std::vector<Var> ins, autodiff::Attrs attrs) {
  for (const Var& v : ins)
    MLS_CHECK(v.defined() && v.get()->graph == graph.get(), autodiff::op_name(op), ": an input is not a node of this graph");
  return autodiff::apply(op, std::move(ins), std::move(attrs));
}
std::vector<Node*> Program::schedule() const { return autodiff::topo_sort(outputs); }

std::unordered_map<const Node*, int> use_counts(const Program& p) {
  std::unordered_map<const Node*, int> uses;
  for (const NodePtr& n : p.graph->nodes())
    for (const NodePtr& in : n->inputs) ++uses[in.get()];
  for (const Var& o : p.outputs) ++uses[o.get()];
  return uses;
}
std::size_t prune(Program& p) {
  std::vector<Var> keep = p.outputs;
  keep.insert(keep.end(), p.inputs.begin(), p.inputs.end());
  return p.graph->prune(keep);
}
std::size_t count_op(const Program& p, Op op) {
  return static_cast<std::size_t>(
      std::count_if(p.graph->nodes().begin(), p.graph->nodes().end(), [op](const NodePtr& n) { return n->op == op; }));
}

// ---- printer --------------------------------------------------------------------------------------
namespace {
std::unordered_map<const Node*, std::size_t> index_of(const Program& p) {
  std::unordered_map<const Node*, std::size_t> idx;
  for (std::size_t i = 0; i < p.graph->nodes().size(); ++i) idx[p.graph->nodes()[i].get()] = i;
  return idx;
}
std::string ref(const std::unordered_map<const Node*, std::size_t>& idx, const Node* n) {
  auto it = idx.find(n);
  if (it == idx.end()) return "%?";
  return "%" + std::to_string(it->second);
}
/// "'name' (%3 add)" for error messages.
std::string who(const std::unordered_map<const Node*, std::size_t>& idx, const Node& n) {
  std::string s = ref(idx, &n);
  s += " ";
  s += autodiff::is_registered(n.op) ? autodiff::op_name(n.op) : ("op#" + std::to_string(static_cast<int>(n.op)));
  if (!n.name.empty()) s += " '" + n.name + "'";
  return s;
}
}  // namespace

std::string node_ref(const Program& p, const Node* n) { return ref(index_of(p), n); }

std::string print(const Program& p) {
  const auto idx = index_of(p);
  std::ostringstream os;
  for (const NodePtr& n : p.graph->nodes()) {
    os << ref(idx, n.get()) << " = " << autodiff::op_name(n->op) << "(";
    for (std::size_t i = 0; i < n->inputs.size(); ++i) os << (i ? ", " : "") << ref(idx, n->inputs[i].get());
    os << ")";
    if (n->op == kFusedElementwise) os << " {" << fused_expression(*n) << "}";
    else if (!n->attrs.items().empty()) os << " {" << n->attrs.str() << "}";
    if (n->op == Op::Constant && n->value.defined() && n->value.numel() == 1) os << " = " << n->value.item();
    os << "  " << n->dtype << " " << shape_str(n->shape);
    if (!n->name.empty()) os << "  " << n->name;
    os << "\n";
  }
  os << "inputs:";
  for (const Var& v : p.inputs) os << " " << ref(idx, v.get());
  os << "\noutputs:";
  for (const Var& v : p.outputs) os << " " << ref(idx, v.get());
  os << "\n";
  return os.str();
}

DotGraph to_dot(const Program& p, const std::string& title) {
  DotGraph dot(title, {{"rankdir", "TB"}, {"fontname", "Helvetica"}});
  const auto idx = index_of(p);
  std::unordered_set<const Node*> outs;
  for (const Var& o : p.outputs) outs.insert(o.get());
  for (const NodePtr& n : p.graph->nodes()) {
    std::string label = n->name.empty() ? "" : n->name + "\n";
    label += autodiff::op_name(n->op);
    if (n->op == kFusedElementwise) label += "\n" + fused_expression(*n);
    if (n->op == kGemm)
      label += std::string(n->attrs.i("trans_a") ? " Aᵀ" : "") + (n->attrs.i("trans_b") ? " Bᵀ" : "") +
               (n->inputs.size() == 3 ? " +bias" : "") + (n->attrs.i("act") == 1 ? " relu" : n->attrs.i("act") == 2 ? " gelu" : "");
    label += "\n" + shape_str(n->shape);
    const char* fill = (n->op == kGemm || n->op == kFusedElementwise) ? "#ffe8a3"
                       : n->op == Op::Placeholder ? "#cfe2ff"
                       : n->op == Op::Variable   ? "#d4edda"
                       : n->op == Op::Constant   ? "#eeeeee"
                                                 : "#ffffff";
    DotAttrs attrs{{"shape", n->is_leaf() ? "ellipse" : "box"}, {"style", "filled"}, {"fillcolor", fill}, {"color", "#1c3d6e"}};
    if (outs.count(n.get())) attrs.push_back({"peripheries", "2"});
    dot.node("n" + std::to_string(idx.at(n.get())), label, attrs);
  }
  for (const NodePtr& n : p.graph->nodes())
    for (const NodePtr& in : n->inputs)
      if (idx.count(in.get()))
        dot.edge("n" + std::to_string(idx.at(in.get())), "n" + std::to_string(idx.at(n.get())), shape_str(in->shape));
  return dot;
}

// ---- verifier -------------------------------------------------------------------------------------
void verify(const Program& p) {
  MLS_CHECK(p.graph != nullptr, "verify: the program has no graph");
  const Graph* g = p.graph.get();
  const auto idx = index_of(p);
  for (const NodePtr& np : g->nodes()) {
    const Node& n = *np;
    MLS_CHECK(autodiff::is_registered(n.op), "verify: node ", who(idx, n), " has an unknown op (", static_cast<int>(n.op), ")");
    MLS_CHECK(n.graph == g, "verify: node ", who(idx, n), " belongs to another graph");
    const int arity = autodiff::op_def(n.op).arity;
    MLS_CHECK(arity < 0 || static_cast<int>(n.inputs.size()) == arity, "verify: node ", who(idx, n), " has ",
              n.inputs.size(), " inputs, ", autodiff::op_name(n.op), " takes ", arity);
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      MLS_CHECK(n.inputs[i] != nullptr, "verify: input ", i, " of node ", who(idx, n), " is undefined");
      MLS_CHECK(idx.count(n.inputs[i].get()), "verify: input ", i, " of node ", who(idx, n),
                " is not a node of this graph (deleted, or from another graph)");
    }
  }
  // BEGIN SOLUTION
  // Acyclic: depth-first search with three colours over every node.
  std::unordered_map<const Node*, int> colour;  // 0 new, 1 on stack, 2 done
  for (const NodePtr& root : g->nodes()) {
    if (colour[root.get()]) continue;
    std::vector<std::pair<const Node*, std::size_t>> stack{{root.get(), 0}};
    colour[root.get()] = 1;
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      if (i < n->inputs.size()) {
        const Node* in = n->inputs[i++].get();
        const int c = colour[in];
        MLS_CHECK(c != 1, "verify: the graph has a cycle through node ", who(idx, *in));
        if (c == 0) {
          colour[in] = 1;
          stack.push_back({in, 0});
        }
      } else {
        colour[n] = 2;
        stack.pop_back();
      }
    }
  }
  // Types and shapes, in an order where inputs come first.
  for (const NodePtr& np : g->nodes()) {
    const Node& n = *np;
    if (n.op == Op::Constant || n.op == Op::Variable) {
      MLS_CHECK(n.value.defined(), "verify: ", who(idx, n), " has no value");
      MLS_CHECK(n.value.shape() == n.shape && n.value.dtype() == n.dtype, "verify: ", who(idx, n), " is declared ",
                n.dtype, " ", shape_str(n.shape), " but holds ", n.value.dtype(), " ", shape_str(n.value.shape()));
      continue;
    }
    if (n.op == Op::Placeholder) continue;
    Shape s;
    DType d = DType::Float32;
    try {
      autodiff::infer_node(n, s, d);
    } catch (const NotImplemented&) {
      throw;
    } catch (const Error& e) {
      fail("verify: node ", who(idx, n), ": ", e.what());
    }
    MLS_CHECK(s == n.shape && d == n.dtype, "verify: node ", who(idx, n), " is declared ", n.dtype, " ",
              shape_str(n.shape), " but its inputs give ", d, " ", shape_str(s));
  }
  // END SOLUTION
  for (std::size_t i = 0; i < p.inputs.size(); ++i) {
    const Var& v = p.inputs[i];
    MLS_CHECK(v.defined() && idx.count(v.get()), "verify: input ", i, " is not a node of the graph");
    MLS_CHECK(v.get()->op == Op::Placeholder, "verify: input ", i, " (", who(idx, *v.get()), ") is not a placeholder");
  }
  for (std::size_t i = 0; i < p.outputs.size(); ++i)
    MLS_CHECK(p.outputs[i].defined() && idx.count(p.outputs[i].get()), "verify: output ", i,
              " is not a node of the graph (was it deleted?)");
}

// ---- cost model -----------------------------------------------------------------------------------
namespace {
double bytes_of(const Node& n) { return autodiff::shape_numel(n.shape) * static_cast<double>(itemsize(n.dtype)); }
}  // namespace

NodeCost node_cost(const Node& n) {
  NodeCost c;
  const autodiff::OpDef& def = autodiff::op_def(n.op);
  if (n.is_leaf() || def.view) return c;
  for (const NodePtr& in : n.inputs) c.bytes_read += bytes_of(*in);
  c.bytes_written = bytes_of(n);
  c.flops = def.flops ? def.flops(n) : autodiff::shape_numel(n.shape);
  return c;
}

ProgramCost program_cost(const Program& p) {
  ProgramCost pc;
  for (Node* n : p.schedule()) {
    if (n->is_leaf()) continue;
    ++pc.nodes;
    const NodeCost c = node_cost(*n);
    pc.flops += c.flops;
    pc.bytes += c.bytes_read + c.bytes_written;
  }
  return pc;
}

// ---- running a program: lab 2's executor ------------------------------------------------------------
std::vector<Tensor> run(const Program& p, const std::vector<Tensor>& feeds) {
  MLS_CHECK(feeds.size() == p.inputs.size(), "run: the program has ", p.inputs.size(), " inputs, ", feeds.size(),
            " fed");
  autodiff::Feeds fed;
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    const Node& n = *p.inputs[i].get();
    MLS_CHECK(feeds[i].defined() && feeds[i].dtype() == n.dtype && autodiff::shape_matches(n.shape, feeds[i].shape()),
              "run: input ", i, " '", n.name, "' expects ", n.dtype, " ", shape_str(n.shape), ", fed ",
              feeds[i].defined() ? std::string(dtype_name(feeds[i].dtype())) + " " + shape_str(feeds[i].shape())
                                 : std::string("nothing"));
    fed.emplace_back(p.inputs[i], feeds[i]);
  }
  return autodiff::Executor(*p.graph).run(p.outputs, fed);
}

std::vector<Tensor> random_feeds(const Program& p, std::uint64_t seed, std::int64_t unknown_size) {
  Rng rng(seed, "lab3-feeds");
  std::vector<Tensor> feeds;
  for (const Var& v : p.inputs) {
    Shape s = v.shape();
    for (auto& d : s)
      if (d < 0) d = unknown_size;
    if (is_floating(v.dtype())) feeds.push_back(Tensor::randn(s, rng, 0.0, 1.0, v.dtype()));
    else feeds.push_back(Tensor::zeros(s, v.dtype()));
  }
  return feeds;
}

double max_rel_error(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  MLS_CHECK(a.size() == b.size(), "max_rel_error: ", a.size(), " tensors vs ", b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    MLS_CHECK(a[i].shape() == b[i].shape() && a[i].dtype() == b[i].dtype(), "max_rel_error: output ", i, " is ",
              a[i].dtype(), " ", shape_str(a[i].shape()), " vs ", b[i].dtype(), " ", shape_str(b[i].shape()));
    // Tolerance from the dtype: rewrites reassociate sums of up to ~1e3 terms, so allow
    // 2^10 units of roundoff, relative and absolute.
    const double eps = a[i].dtype() == DType::Float64 ? std::numeric_limits<double>::epsilon()
                                                      : std::numeric_limits<float>::epsilon();
    const double tol = 1024 * eps;
    const auto x = a[i].to(DType::Float64).compact().to_vector<double>();
    const auto y = b[i].to(DType::Float64).compact().to_vector<double>();
    for (std::size_t j = 0; j < x.size(); ++j) {
      if (std::isnan(x[j]) && std::isnan(y[j])) continue;
      worst = std::max(worst, std::abs(x[j] - y[j]) / (tol + tol * std::abs(y[j])));
    }
  }
  return worst;
}

bool equivalent(const Program& p, const Program& q, int trials, std::uint64_t seed) {
  for (int t = 0; t < trials; ++t) {
    const auto feeds = random_feeds(p, seed + static_cast<std::uint64_t>(t));
    if (max_rel_error(run(q, feeds), run(p, feeds)) > 1.0) return false;
  }
  return true;
}

Program clone(const Program& p) {
  Program q;
  std::unordered_map<const Node*, NodePtr> map;
  // Rewrites may point an old node at a newer one, so copy in a topological order of all nodes.
  std::vector<Var> all;
  for (const NodePtr& n : p.graph->nodes()) all.emplace_back(n);
  for (Node* n : autodiff::topo_sort(all)) {
    auto c = std::make_shared<Node>();
    c->op = n->op;
    c->attrs = n->attrs;
    c->shape = n->shape;
    c->dtype = n->dtype;
    c->name = n->name;
    c->value = n->value;
    c->requires_grad = n->requires_grad;
    c->is_backward = n->is_backward;
    for (const NodePtr& in : n->inputs) {
      auto it = map.find(in.get());
      MLS_CHECK(it != map.end(), "clone: node inputs must come before their users");
      c->inputs.push_back(it->second);
    }
    q.graph->add(c);
    map[n] = c;
  }
  for (const Var& v : p.inputs) q.inputs.emplace_back(map.at(v.get()));
  for (const Var& v : p.outputs) q.outputs.emplace_back(map.at(v.get()));
  return q;
}

}  // namespace mls::graph_opt
