#pragma once
/// The one node type of lab 2 (and the IR of lab 3): an operation with input edges, attributes,
/// an inferred shape and dtype (lecture 000, "computational graph": a node is an op, an edge is
/// a tensor flowing between ops).
///
/// Eager mode (define-and-run) and symbolic mode (define-then-run) share this type:
///   - eager: a node is created when the op runs; `value` holds its result at once, and
///     `inputs` are kept only when a gradient may flow through it (that is the tape);
///   - graph: a node belongs to a `Graph`, has no value until an `Executor` runs it, and its
///     shape may contain -1 for a size only known when the graph is fed (the batch).
/// Each op's forward, shape inference and gradient live in one table (`op_def`), used by both.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "mls/tensor/tensor.hpp"

namespace mls::ad {

/// Every operation a node can hold. Leaves first, then the differentiable ops by family.
enum class Op : std::uint8_t {
  // leaves
  Placeholder,  // graph input, fed at run time
  Variable,     // trainable state (a graph variable, or an eager leaf that requires grad)
  Constant,     // a fixed tensor
  Assign,       // graph only: writes input 1 into variable input 0 when run; yields the value
  // elementwise unary
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sin, Cos, Tanh, Sigmoid, Relu, Gelu,
  // elementwise binary (broadcasting)
  Add, Sub, Mul, Div, Pow, Maximum, Minimum,
  // comparisons (bool result, no gradient), cast, select
  Eq, Ne, Lt, Le, Gt, Ge, Cast, Where,
  // reductions and their adjoints
  Sum, Mean, Max, Min, SumLike, BroadcastLike, ExpandMean,
  // shape ops
  Reshape, ReshapeLike, Permute, Slice, SliceBackward, Expand, Unsqueeze, Squeeze, Concat, Stack,
  // linear algebra and normalised exponentials
  Matmul, Softmax, LogSoftmax, LogSumExp,
  // neural-network ops
  SoftmaxCrossEntropy, OneHot, Mse, LayerNorm, BatchNorm, Embedding, EmbeddingBackward, Im2Col,
  Col2Im, Conv2d,
  // eager only: a forward computed by the caller and a backward callback (see mls::ad::custom)
  Custom,
  Count_  // number of ops (not an op)
};

/// The op's name as written in graph dumps ("matmul", "add", ...).
const char* op_name(Op op);
/// Looks an op up by name; throws `mls::Error` for an unknown name.
Op op_from_name(std::string_view name);

/// One attribute value: an integer (also bools and dtypes), a real, or a list of integers.
using AttrValue = std::variant<std::int64_t, double, std::vector<std::int64_t>>;

/// Named attributes of a node (axes, keepdim, shape, eps, ...), in insertion order.
class Attrs {
 public:
  /// Sets (or replaces) `key`; returns *this so calls chain.
  Attrs& set(std::string key, AttrValue value);
  bool has(std::string_view key) const;
  /// The integer `key`; throws `mls::Error` when missing or of another kind.
  std::int64_t i(std::string_view key) const;
  /// The real `key` (an integer attribute converts).
  double f(std::string_view key) const;
  /// The integer list `key`.
  const std::vector<std::int64_t>& ints(std::string_view key) const;
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  /// "axes=[1], keepdim=1" (empty when there are none).
  std::string str() const;
  friend bool operator==(const Attrs&, const Attrs&) = default;

 private:
  const AttrValue* find(std::string_view key) const;
  std::vector<std::pair<std::string, AttrValue>> items_;
};

class Graph;
struct Node;
struct CustomGrad;
using NodePtr = std::shared_ptr<Node>;

/// A node of a computation graph (eager tape entry or graph node).
struct Node {
  Op op = Op::Constant;
  std::vector<NodePtr> inputs;  // input edges (eager: kept only while a gradient can flow)
  Attrs attrs;
  Shape shape;                  // inferred; -1 marks a size known only at run time (graph mode)
  DType dtype = DType::Float32;
  std::string name;             // optional, for dumps ("x", "W", ...)
  std::int64_t id = 0;          // unique, increasing in creation order
  Graph* graph = nullptr;       // owning graph, or nullptr for an eager node
  Tensor value;                 // eager result; the value of a Variable or Constant
  NodePtr grad;                 // eager: the accumulated gradient of a leaf (`Var::grad`)
  bool requires_grad = false;   // a gradient can flow into this node
  bool is_backward = false;     // created by gradients() / backward(create_graph)
  bool freed = false;           // eager: its saved inputs were released by backward()
  std::shared_ptr<const CustomGrad> custom;  // Op::Custom only: its backward callback

  /// True for Placeholder, Variable and Constant nodes.
  bool is_leaf() const { return op == Op::Placeholder || op == Op::Variable || op == Op::Constant; }
};

class Var;

/// Everything the table knows about one op.
struct OpDef {
  const char* name;
  int arity;                 // number of inputs, -1 for any (concat, stack)
  bool differentiable;       // false: comparisons, one_hot (no gradient flows through)
  /// Computes the output from the input values.
  Tensor (*forward)(std::span<const Tensor> in, const Attrs& attrs);
  /// Infers the output shape (-1 where unknown) and dtype from the input nodes.
  void (*infer)(std::span<const Node* const> in, const Attrs& attrs, Shape& shape, DType& dtype);
  /// Reverse mode: given the node `out` (with its inputs) and the adjoint `g` of its output,
  /// returns one adjoint per input (an undefined Var where `needs[i]` is false or no gradient
  /// exists). Written with Var ops, so the same rule runs eagerly (the tape) and symbolically
  /// (gradients() adds its nodes to the graph), and can itself be differentiated.
  std::vector<Var> (*backward)(const Var& out, const Var& g, const std::vector<bool>& needs);
};

/// The table entry of `op`.
const OpDef& op_def(Op op);

/// NumPy broadcasting of two inferred shapes, where -1 is a size known only at run time (it
/// broadcasts against anything). Throws `mls::Error` naming `op` when the shapes cannot broadcast.
Shape broadcast_inferred(const Shape& a, const Shape& b, const char* op);

}  // namespace mls::ad
