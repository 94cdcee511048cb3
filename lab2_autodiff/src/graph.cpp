// Student file of lab 2: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Define-then-run: the Graph, the Executor, gradients() and Graphviz dumps.
#include "mls/autodiff/graph.hpp"

#include <algorithm>
#include <atomic>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace mls::autodiff {

namespace {
std::atomic<std::int64_t> g_graph_ids{1000000000};

NodePtr leaf(Graph* g, Op op, std::string name, Shape shape, DType dtype) {
  auto n = std::make_shared<Node>();
  n->op = op;
  n->name = std::move(name);
  n->shape = std::move(shape);
  n->dtype = dtype;
  n->graph = g;
  return n;
}

std::string node_title(const Node& n) {
  std::string s = n.name;
  if (!s.empty()) s.push_back('\n');
  s.append(op_name(n.op));
  return s;
}
/// The DOT id of a node: "n<id>".
std::string dot_id(const Node& n) {
  std::string s = std::to_string(n.id);
  s.insert(s.begin(), 'n');
  return s;
}
}  // namespace

void Graph::add(const NodePtr& node) {
  node->graph = this;
  if (node->id == 0) node->id = g_graph_ids.fetch_add(1);
  if (backward_depth > 0) node->is_backward = true;
  nodes_.push_back(node);
}

Var Graph::placeholder(std::string name, Shape shape, DType dtype) {
  for (std::int64_t d : shape)
    MLS_CHECK(d >= -1, "placeholder '", name, "': sizes must be >= 0 or -1 (unknown), got ", shape_str(shape));
  NodePtr n = leaf(this, Op::Placeholder, std::move(name), std::move(shape), dtype);
  n->requires_grad = is_floating(dtype);
  add(n);
  return Var(n);
}
Var Graph::variable(std::string name, Tensor init) {
  MLS_CHECK(init.defined(), "variable '", name, "': the initial value is undefined");
  NodePtr n = leaf(this, Op::Variable, std::move(name), init.shape(), init.dtype());
  n->value = init.clone();
  n->requires_grad = is_floating(init.dtype());
  add(n);
  return Var(n);
}
Var Graph::constant(Tensor value, std::string name) {
  MLS_CHECK(value.defined(), "constant '", name, "': the value is undefined");
  NodePtr n = leaf(this, Op::Constant, std::move(name), value.shape(), value.dtype());
  n->value = std::move(value);
  add(n);
  return Var(n);
}
Var Graph::assign(const Var& variable, const Var& value) {
  MLS_CHECK(variable.defined() && variable.get()->graph == this, "assign: the variable is not a node of this graph");
  return apply(Op::Assign, {variable, value});
}
std::size_t Graph::num_backward() const {
  return static_cast<std::size_t>(std::count_if(nodes_.begin(), nodes_.end(), [](const NodePtr& n) { return n->is_backward; }));
}

void Graph::set_input(const Var& node, std::size_t index, const Var& input) {
  MLS_CHECK(node.defined() && node.get()->graph == this, "set_input: the node is not in this graph");
  MLS_CHECK(input.defined() && input.get()->graph == this, "set_input: the input is not in this graph");
  MLS_CHECK(index < node.get()->inputs.size(), "set_input: node '", node_title(*node.get()), "' has ",
            node.get()->inputs.size(), " inputs, index ", index, " given");
  node.get()->inputs[index] = input.node();
}
std::size_t Graph::replace_all_uses(const Var& from, const Var& to) {
  MLS_CHECK(from.defined() && to.defined() && from.get()->graph == this && to.get()->graph == this,
            "replace_all_uses: both nodes must be in this graph");
  std::size_t moved = 0;
  for (auto& n : nodes_)
    for (auto& in : n->inputs)
      if (in == from.node() && n != to.node()) {
        in = to.node();
        ++moved;
      }
  return moved;
}
std::size_t Graph::prune(const std::vector<Var>& keep) {
  const std::vector<Node*> live = topo_sort(keep);
  const std::unordered_set<Node*> alive(live.begin(), live.end());
  const std::size_t before = nodes_.size();
  std::erase_if(nodes_, [&](const NodePtr& n) { return !alive.count(n.get()); });
  return before - nodes_.size();
}

// ---- executor -------------------------------------------------------------------------------------
std::vector<Tensor> Executor::run(const std::vector<Var>& fetches, const Feeds& feeds) const {
  for (const Var& f : fetches)
    MLS_CHECK(f.defined() && f.get()->graph == graph_, "run: a fetch is not a node of this graph");
  std::unordered_map<const Node*, Tensor> vals;
  for (const auto& [ph, t] : feeds) {
    MLS_CHECK(ph.defined() && ph.get()->graph == graph_, "run: a fed node is not a node of this graph");
    const Node& n = *ph.get();
    MLS_CHECK(n.op == Op::Placeholder, "run: only placeholders can be fed, '", node_title(n), "' is ",
              op_name(n.op));
    MLS_CHECK(t.defined(), "run: the value fed to placeholder '", n.name, "' is undefined");
    MLS_CHECK(t.dtype() == n.dtype && shape_matches(n.shape, t.shape()), "run: placeholder '", n.name,
              "' expects ", n.dtype, " ", shape_str(n.shape), ", fed ", t.dtype(), " ", shape_str(t.shape()));
    vals[&n] = t;
  }
  const std::vector<Node*> order = topo_sort(fetches);
  std::unordered_map<const Node*, int> left;  // reads still to come, so values are dropped early
  for (Node* n : order)
    for (const NodePtr& x : n->inputs) ++left[x.get()];
  for (const Var& f : fetches) ++left[f.get()];
  std::vector<Tensor> in;
  for (Node* n : order) {
    if (vals.count(n)) continue;
    switch (n->op) {
      case Op::Placeholder:
        fail("run: placeholder '", n->name, "' (", n->dtype, " ", shape_str(n->shape),
             ") is needed by the fetches but was not fed");
      case Op::Variable:
      case Op::Constant: vals[n] = n->value; continue;
      default: break;
    }
    in.assign(n->inputs.size(), Tensor());
    for (std::size_t i = 0; i < n->inputs.size(); ++i) in[i] = vals.at(n->inputs[i].get());
    if (n->op == Op::Assign) {
      Node* var = n->inputs[0].get();
      var->value = in[1].clone();
      vals[n] = var->value;
      continue;
    }
    vals[n] = op_def(n->op).forward(in, n->attrs);
    for (const NodePtr& x : n->inputs)
      if (--left[x.get()] == 0) vals.erase(x.get());
  }
  std::vector<Tensor> out;
  out.reserve(fetches.size());
  for (const Var& f : fetches) out.push_back(vals.at(f.get()));
  return out;
}

// ---- gradients(): the backward graph --------------------------------------------------------------
/// Sum of a node's partial adjoints (the slides' sum(node_to_grad[i])).
[[maybe_unused]] static Var sum_partials(const std::vector<Var>& parts) {
  Var total = parts[0];
  for (std::size_t i = 1; i < parts.size(); ++i) total = total + parts[i];
  return total;
}

/// Reverse mode as graph construction: node_to_grad in reverse topological order (graph.hpp).
std::vector<Var> gradients(const Var& y, const std::vector<Var>& xs) {
  MLS_CHECK(y.defined() && y.get()->graph != nullptr,
            "gradients: y must be a graph node (in eager mode call y.backward())");
  Graph& g = *y.get()->graph;
  for (const Var& x : xs)
    MLS_CHECK(x.defined() && x.get()->graph == &g, "gradients: every x must be a node of y's graph");
  MLS_CHECK(is_floating(y.dtype()), "gradients: y must be floating, got ", y.dtype());
  // BEGIN SOLUTION
  std::vector<Var> outs{y};
  const std::vector<Node*> order = topo_sort(outs);
  // Which nodes lie on a path to some x (only those need adjoints)?
  std::unordered_set<const Node*> wrt;
  for (const Var& x : xs) wrt.insert(x.get());
  std::unordered_map<const Node*, bool> leads;
  std::unordered_map<const Node*, NodePtr> owner{{y.get(), y.node()}};
  for (Node* n : order) {
    bool l = wrt.count(n) > 0;
    for (const NodePtr& in : n->inputs) {
      l = l || leads[in.get()];
      owner.emplace(in.get(), in);
    }
    leads[n] = l && op_def(n->op).differentiable;
  }
  ++g.backward_depth;
  struct Restore {
    Graph& g;
    ~Restore() { --g.backward_depth; }
  } restore{g};
  std::unordered_map<const Node*, std::vector<Var>> node_to_grad;
  const Var ones = broadcast_like(g.constant(Tensor::ones({}, y.dtype()), "1"), y);
  node_to_grad[y.get()] = {ones};
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    auto git = node_to_grad.find(n);
    if (git == node_to_grad.end() || n->is_leaf()) continue;
    const Var adjoint = sum_partials(git->second);
    git->second = {adjoint};
    std::vector<bool> needs(n->inputs.size());
    bool any = false;
    for (std::size_t i = 0; i < needs.size(); ++i) any |= (needs[i] = leads[n->inputs[i].get()]);
    if (!any) continue;
    const std::vector<Var> parts = op_def(n->op).backward(Var(owner.at(n)), adjoint, needs);
    for (std::size_t i = 0; i < needs.size() && i < parts.size(); ++i)
      if (needs[i] && parts[i].defined()) node_to_grad[n->inputs[i].get()].push_back(parts[i]);
  }
  std::vector<Var> result;
  for (const Var& x : xs) {
    auto it = node_to_grad.find(x.get());
    if (it == node_to_grad.end()) {
      result.push_back(broadcast_like(g.constant(Tensor::zeros({}, x.dtype()), "0"), x));
    } else {
      result.push_back(sum_partials(it->second));
    }
  }
  return result;
  // END SOLUTION
}

// ---- Graphviz -------------------------------------------------------------------------------------
namespace {
DotGraph draw(const std::vector<Node*>& nodes, const DotOptions& opt) {
  DotGraph dot(opt.title, {{"rankdir", "TB"}, {"fontname", "Helvetica"}});
  std::unordered_set<const Node*> shown;
  for (const Node* n : nodes)
    if (opt.show_backward || !n->is_backward) shown.insert(n);
  for (const Node* n : nodes) {
    if (!shown.count(n)) continue;
    std::string label = node_title(*n);
    if (n->op == Op::Constant && n->value.defined() && n->value.numel() == 1) label = n->name.empty() ? "const" : n->name;
    label.push_back('\n');
    label.append(shape_str(n->shape));
    const char* fill = n->is_backward ? "#f8cfa0" : (n->op == Op::Placeholder ? "#cfe2ff"
                                                     : (n->op == Op::Variable ? "#d4edda" : "#ffffff"));
    dot.node(dot_id(*n), label,
             {{"shape", n->is_leaf() ? "ellipse" : "box"}, {"style", "filled"}, {"fillcolor", fill},
              {"color", n->is_backward ? "#d9480f" : "#1c3d6e"}});
  }
  for (const Node* n : nodes) {
    if (!shown.count(n)) continue;
    for (const NodePtr& in : n->inputs) {
      if (!shown.count(in.get())) continue;
      dot.edge(dot_id(*in), dot_id(*n), shape_str(in->shape),
               n->is_backward ? DotAttrs{{"color", "#d9480f"}} : DotAttrs{});
    }
  }
  return dot;
}
}  // namespace

DotGraph to_dot(const Graph& graph, const DotOptions& options) {
  std::vector<Node*> nodes;
  for (const NodePtr& n : graph.nodes()) nodes.push_back(n.get());
  return draw(nodes, options);
}
DotGraph to_dot(const std::vector<Var>& outputs, const DotOptions& options) {
  return draw(topo_sort(outputs), options);
}

}  // namespace mls::autodiff
