#pragma once
/// Define-then-run (TF1 style; lecture 000 "tinyflow"): a `Graph` of placeholders, variables and
/// ops; `gradients(loss, {w...})` adds the backward graph to the same graph (lecture 002,
/// "Construct the backward graph"); an `Executor` runs any nodes given a feed of placeholders.
///
///   Graph g;
///   Var x = g.placeholder("x", {-1, 784});
///   Var W = g.variable("W", Tensor::zeros({784, 10}));
///   Var loss = softmax_cross_entropy(matmul(x, W), g.placeholder("y", {-1}, DType::Int64));
///   Var dW = gradients(loss, {W})[0];
///   auto [l, d] = Executor(g).run({loss, dW}, {{x, xs}, {y, ys}});  // two tensors
#include <string>
#include <utility>
#include <vector>

#include "mls/autodiff/var.hpp"
#include "mls/common/dot.hpp"

namespace mls::autodiff {

/// A computation graph: owns its nodes in creation order. Not copyable or movable (nodes
/// point back to it).
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// An input fed at run time; -1 in `shape` for a size given by the feed (e.g. the batch).
  Var placeholder(std::string name, Shape shape, DType dtype = DType::Float32);
  /// Trainable state with an initial value (its value persists across runs).
  Var variable(std::string name, Tensor init);
  /// A fixed tensor.
  Var constant(Tensor value, std::string name = "");
  /// A node that, when run, writes `value` into `variable` and yields the new value (tf.assign).
  Var assign(const Var& variable, const Var& value);

  /// Every node, in creation order.
  const std::vector<NodePtr>& nodes() const { return nodes_; }
  std::size_t size() const { return nodes_.size(); }
  /// Number of nodes created by gradients().
  std::size_t num_backward() const;

  /// Rewriting (lab 3): points input `index` of `node` at `input` (which must be in this graph).
  void set_input(const Var& node, std::size_t index, const Var& input);
  /// Rewriting: every use of `from` as an input now uses `to`; returns the number of edges moved.
  std::size_t replace_all_uses(const Var& from, const Var& to);
  /// Drops nodes not reachable from `keep` (dead-code elimination); returns how many went.
  std::size_t prune(const std::vector<Var>& keep);

  /// Adds a node built elsewhere (apply() does this); marks it backward inside gradients().
  void add(const NodePtr& node);
  /// While > 0, new nodes are marked `is_backward` (gradients() raises it).
  int backward_depth = 0;

 private:
  std::vector<NodePtr> nodes_;
};

/// Placeholder values for one run.
using Feeds = std::vector<std::pair<Var, Tensor>>;

/// Runs graph nodes: evaluates each needed node once, in topological order.
class Executor {
 public:
  explicit Executor(const Graph& graph) : graph_(&graph) {}
  /// The values of `fetches`. Every placeholder they depend on must be fed, with a matching
  /// dtype and shape (-1 matches any size); otherwise `mls::Error` names the placeholder.
  std::vector<Tensor> run(const std::vector<Var>& fetches, const Feeds& feeds = {}) const;

 private:
  const Graph* graph_;
};

/// Reverse-mode AD as graph construction (lecture 002, `gradient(out)` with `node_to_grad`):
/// walks the nodes that lead to `y` in reverse topological order, sums each node's partial
/// adjoints, asks the op's rule for the adjoints of its inputs, and returns d(sum y)/d(x) for
/// each x as new nodes of the same graph (zeros when y does not depend on x). Because the
/// results are ordinary nodes, gradients() of them gives second derivatives.
std::vector<Var> gradients(const Var& y, const std::vector<Var>& xs);

/// Options of to_dot.
struct DotOptions {
  std::string title = "graph";
  bool show_backward = true;  // include the nodes created by gradients()
};
/// Graphviz drawing of a graph: one node per op ("name\nop\n[shape]"), backward nodes filled in
/// another colour, edges labelled with the shape that flows along them.
DotGraph to_dot(const Graph& graph, const DotOptions& options = {});
/// The same for the nodes reachable from `outputs` (eager tapes or part of a graph).
DotGraph to_dot(const std::vector<Var>& outputs, const DotOptions& options = {});

}  // namespace mls::autodiff
