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
/// Each op's forward, shape inference and gradient live in one registry entry (`OpDef`, looked
/// up by `op_def`), used by both; later labs add their ops with `register_op`.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "mls/tensor/tensor.hpp"

namespace mls::autodiff {

/// The stable identifier of an op. The named values are lab 2's built-in ops (leaves first, then
/// the differentiable ops by family); an op registered by a later lab gets the next free value
/// from `register_op` (look it up by name with `op_from_name`: its number depends on the order
/// of registration, its name does not, so files store names).
enum class Op : std::uint16_t {
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
  Col2Im, Conv2d, ReluBackward,
  // eager only: a forward computed by the caller and a backward callback (see mls::autodiff::custom)
  Custom,
  // the rest of the workload tour (ops_pool.cpp, ops_graph.cpp; declared in workload.hpp)
  MaxPool2d, MaxPool2dBackward, MaxPool2dSelect, AvgPool2d, AvgPool2dBackward, ConvTranspose2d,
  Spmm, SpmmT, Sddmm, Dropout,
  // control flow (control.hpp, control_flow.cpp): nodes holding sub-graphs, and their adjoints
  Cond, WhileLoop, CondGrad, WhileGrad,
  Count_  // number of built-in ops (not an op); registered ops follow
};

/// The op's name as written in graph dumps ("matmul", "add", ...).
const char* op_name(Op op);
/// Looks an op up by name; throws `mls::Error` for an unknown name.
Op op_from_name(std::string_view name);

/// One attribute value: an integer (also bools and dtypes), a real, a list of integers, or a list
/// of strings (e.g. lab 3's fused programs, whose instructions name their ops).
using AttrValue = std::variant<std::int64_t, double, std::vector<std::int64_t>, std::vector<std::string>>;

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
  /// The string list `key`.
  const std::vector<std::string>& strs(std::string_view key) const;
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

/// Computes the output from the input values.
using ForwardFn = Tensor (*)(std::span<const Tensor> in, const Attrs& attrs);
/// Infers the output shape (-1 where unknown) and dtype from the input nodes; throws
/// `mls::Error` naming the op when the inputs do not fit it.
using InferFn = void (*)(std::span<const Node* const> in, const Attrs& attrs, Shape& shape, DType& dtype);
/// Reverse mode: given the node `out` (with its inputs) and the adjoint `g` of its output,
/// returns one adjoint per input (an undefined Var where `needs[i]` is false or no gradient
/// exists). Written with Var ops, so the same rule runs eagerly (the tape) and symbolically
/// (gradients() adds its nodes to the graph), and can itself be differentiated.
using BackwardFn = std::vector<Var> (*)(const Var& out, const Var& g, const std::vector<bool>& needs);
/// Forward mode: the output tangent of `node` from its input values `x`, input tangents `t`
/// (undefined = zero) and output value `y`; undefined = zero.
using JvpFn = Tensor (*)(const Node& node, const std::vector<Tensor>& x, const std::vector<Tensor>& t,
                         const Tensor& y);
/// Floating-point operations of one node (shapes known), for cost models.
using FlopsFn = double (*)(const Node& node);

/// Everything the registry knows about one op: one entry, one place.
struct OpDef {
  std::string name{};        // stable key, as written in graph dumps and files ("matmul", "gemm")
  int arity = 1;             // number of inputs, -1 for any (concat, stack)
  bool differentiable = true;  // false: comparisons, one_hot (no gradient flows through)
  ForwardFn forward = nullptr;
  InferFn infer = nullptr;
  BackwardFn backward = nullptr;  // nullptr: no gradient rule (an error if one is needed)
  /// nullptr for lab 2's built-in ops (their tangents are `jvp_rule`'s switch, a lab 2 task;
  /// relu_backward, not a task, brings its own) and for ops without a forward-mode rule.
  JvpFn jvp = nullptr;
  std::string doc{};         // one line: what the op computes
  /// A float elementwise map a fusion pass may put into one loop; then exactly one of `unary`
  /// and `binary` names lab 1's scalar function (mls/tensor/scalar.hpp) it applies.
  bool elementwise = false;
  std::optional<UnaryOp> unary{};
  std::optional<BinaryOp> binary{};
  /// Two inputs that may be swapped without changing the result (add, mul, maximum, minimum, eq,
  /// ne): CSE sorts their inputs, rewrite rules on them also try the swapped operands.
  bool commutative = false;
  bool view = false;         // moves no data (reshape, permute, ...): free in a cost model
  FlopsFn flops = nullptr;   // nullptr: one operation per output element
};

/// The registry entry of `op`; throws `mls::Error` for an unregistered op.
const OpDef& op_def(Op op);
/// True when `op` names a registered op.
bool is_registered(Op op);
/// Adds an op and returns its identifier (the next free value after the built-in ops). Call it
/// once per op, from a static initialiser or an explicit setup function of the lab that owns the
/// op; thread-safe. Throws `mls::Error` when the name is taken or forward/infer are missing.
///   const Op kSoftplus = register_op({.name = "softplus", .arity = 1, .forward = softplus_fwd,
///                                     .infer = same_infer, .backward = softplus_bwd, .doc = "..."});
Op register_op(OpDef def);
/// Every registered op, built-in ones first, in registration order.
std::vector<Op> registered_ops();

/// Runs `node`'s op on input values (the registry's forward with the node's attributes).
Tensor eval_node(const Node& node, std::span<const Tensor> inputs);
/// Infers `node`'s shape and dtype from its input nodes (the registry's infer).
void infer_node(const Node& node, Shape& shape, DType& dtype);
/// Number of elements with unknown (-1) and zero sizes counted as 1, as a double (cost models).
double shape_numel(const Shape& s);
/// True when the two shapes have the same rank and agree wherever `pattern` is not -1.
bool shape_matches(const Shape& pattern, const Shape& actual);

/// NumPy broadcasting of two inferred shapes, where -1 is a size known only at run time (it
/// broadcasts against anything). Throws `mls::Error` naming `op` when the shapes cannot broadcast.
Shape broadcast_inferred(const Shape& a, const Shape& b, const char* op);

}  // namespace mls::autodiff
