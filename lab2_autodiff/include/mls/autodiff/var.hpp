#pragma once
/// `mls::autodiff::Var`: a handle to a node, with the differentiable ops of lab 2.
///
/// Eager (define-and-run, PyTorch style; lecture 000 "imperative"):
///   Var x(Tensor::from({2.0}), /*requires_grad=*/true);
///   Var y = log(x) + x * x;        // runs now; the tape records how y was made
///   y.backward();                  // reverse mode along the tape
///   x.grad().value();              // dy/dx
/// Symbolic (define-then-run, TF1 style; lecture 000 "symbolic"): the same functions applied
/// to nodes of a `Graph` (see graph.hpp) add nodes to that graph instead of computing.
#include <cstdint>
#include <functional>
#include <string>
#include <initializer_list>
#include <span>
#include <vector>

#include "mls/autodiff/node.hpp"

namespace mls::autodiff {

/// A handle to a node: an eager tensor with its tape, or a graph node. Cheap to copy.
class Var {
 public:
  /// An undefined handle (no node).
  Var() = default;
  explicit Var(NodePtr node) : node_(std::move(node)) {}
  /// An eager leaf holding `value`; with `requires_grad` its gradient is accumulated in grad().
  explicit Var(Tensor value, bool requires_grad = false);

  bool defined() const { return node_ != nullptr; }
  const NodePtr& node() const { return node_; }
  Node* get() const { return node_.get(); }
  /// Shape (graph nodes: inferred, -1 where unknown) and dtype.
  const Shape& shape() const;
  DType dtype() const;
  std::int64_t ndim() const { return static_cast<std::int64_t>(shape().size()); }
  /// The eager value; throws for a graph node (run it with an Executor instead).
  const Tensor& value() const;
  /// True when gradients flow into this Var.
  bool requires_grad() const;
  /// Marks an eager leaf as needing a gradient (throws for a non-leaf).
  Var& requires_grad_(bool on = true);
  /// The accumulated gradient of an eager leaf (undefined Var until backward() reached it).
  Var grad() const;
  /// Clears the accumulated gradient.
  void zero_grad();
  /// A new eager leaf with the same value that is cut from the tape.
  Var detach() const;
  /// True for a node created by reverse mode (drawn in another colour).
  bool is_backward() const;
  /// The node's name (set_name for dumps); returns *this.
  Var& set_name(std::string name);
  const std::string& name() const;

  /// Reverse mode on the eager tape: accumulates d(this)/d(leaf) into every leaf's grad().
  /// A non-scalar output needs `grad_output` (same shape): the vector of the vector-Jacobian
  /// product. Without `retain_graph` the saved inputs are released, so a second backward()
  /// through the same nodes throws; with `create_graph` the gradient computation is itself
  /// recorded (gradients of gradients) and the graph is retained.
  void backward(const Tensor& grad_output = {}, bool retain_graph = false, bool create_graph = false) const;

 private:
  NodePtr node_;
};

/// True while eager ops record the tape (the default); false inside a NoGradGuard.
bool grad_enabled();
/// Turns recording on or off for this thread (prefer the guards).
void set_grad_enabled(bool on);
/// RAII scope in which eager ops record nothing (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : saved_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(saved_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool saved_;
};
/// RAII scope that sets recording to `on`.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool on) : saved_(grad_enabled()) { set_grad_enabled(on); }
  ~GradModeGuard() { set_grad_enabled(saved_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool saved_;
};

/// Applies `op` to `inputs`: eagerly (all inputs eager) or as a new node of their graph.
/// Every op function below goes through here.
Var apply(Op op, std::vector<Var> inputs, Attrs attrs = {});

/// The backward of a custom op: given the adjoint `g` of its output and which inputs need a
/// gradient, returns one adjoint per input (undefined where not needed).
struct CustomGrad {
  std::string name;
  std::function<std::vector<Var>(const Var& g, const std::vector<bool>& needs)> backward;
};
/// A custom eager op (Op::Custom): `value` is its output, computed by the caller from the
/// inputs' values; on the tape its gradient rule is `backward`. It lets later labs put ops
/// with side effects on the tape, e.g. lab 5's allreduce-in-backward of tensor parallelism:
///   Var y = custom("copy_to_tp", {x}, x.value(), [&](const Var& g, auto&) { ... });
/// Eager only: an input that is a graph node is an mls::Error.
Var custom(std::string name, std::vector<Var> inputs, Tensor value,
           std::function<std::vector<Var>(const Var& g, const std::vector<bool>& needs)> backward);

/// Tracing (lab 3's `compile`): while a `TraceHooks` is installed on a thread (`TraceScope`),
/// apply() builds every op as a node of `graph`, handing each eager input (and each node of another
/// graph: how control.hpp's sub-graphs capture values of the graph around them) to `lift`, which returns
/// the node of `graph` standing for it (a constant, or a placeholder fed at each call); and reading
/// a graph node's value on the host (Var::value, Var::backward) calls `host_read`, which throws an
/// error naming the tracer and the node.
struct TraceHooks {
  Graph* graph = nullptr;
  std::function<Var(const Var& eager)> lift;
  std::function<void(const Node& node, const char* what)> host_read;
};
/// The hooks installed on this thread (nullptr when none).
const TraceHooks* trace_hooks();
/// RAII scope that installs `hooks` on this thread (restoring the previous ones at its end).
class TraceScope {
 public:
  explicit TraceScope(const TraceHooks& hooks);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  const TraceHooks* saved_;
};

/// Nodes reachable from `outputs` through input edges, each after all of its inputs (a
/// topological order). Throws `mls::Error` naming a node on a cycle.
std::vector<Node*> topo_sort(std::span<const Var> outputs);

/// A constant in the same world as `like` (its graph, or eager), holding `value`.
Var constant_like(const Var& like, Tensor value);
/// A 0-d constant of `like`'s dtype (float32 when `like` is not floating) holding `s`.
Var scalar_like(const Var& like, double s);

// ---- elementwise ----------------------------------------------------------------------------
Var neg(const Var& a);
Var abs(const Var& a);
Var exp(const Var& a);
Var log(const Var& a);
Var sqrt(const Var& a);
Var rsqrt(const Var& a);
Var sin(const Var& a);
Var cos(const Var& a);
Var tanh(const Var& a);
Var sigmoid(const Var& a);
Var relu(const Var& a);
/// relu's adjoint in one pass: `g` where `x` > 0, else 0 (PyTorch's threshold_backward), with
/// broadcasting. Linear in `g` (its own adjoint is relu_backward again); no gradient into `x`.
Var relu_backward(const Var& g, const Var& x);
/// GELU, tanh approximation (as lab 1).
Var gelu(const Var& a);
Var add(const Var& a, const Var& b);
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);
Var div(const Var& a, const Var& b);
Var pow(const Var& a, const Var& b);
Var pow(const Var& a, double s);
/// Elementwise max/min; on ties the gradient is split half and half.
Var maximum(const Var& a, const Var& b);
Var minimum(const Var& a, const Var& b);
/// Comparisons give bool and pass no gradient.
Var eq(const Var& a, const Var& b);
Var ne(const Var& a, const Var& b);
Var lt(const Var& a, const Var& b);
Var le(const Var& a, const Var& b);
Var gt(const Var& a, const Var& b);
Var ge(const Var& a, const Var& b);
/// Converts to `dtype` (the gradient converts back).
Var cast(const Var& a, DType dtype);
/// cond ? a : b with broadcasting; cond is bool and gets no gradient.
Var where(const Var& cond, const Var& a, const Var& b);

Var operator-(const Var& a);
Var operator+(const Var& a, const Var& b);
Var operator-(const Var& a, const Var& b);
Var operator*(const Var& a, const Var& b);
Var operator/(const Var& a, const Var& b);
Var operator+(const Var& a, double s);
Var operator-(const Var& a, double s);
Var operator*(const Var& a, double s);
Var operator/(const Var& a, double s);
Var operator+(double s, const Var& a);
Var operator-(double s, const Var& a);
Var operator*(double s, const Var& a);
Var operator/(double s, const Var& a);

// ---- reductions -----------------------------------------------------------------------------
/// Reduce over `axes` (empty: all); `keepdim` keeps them with size 1. max/min split the
/// gradient equally among tied maxima.
Var sum(const Var& a, std::vector<std::int64_t> axes = {}, bool keepdim = false);
Var mean(const Var& a, std::vector<std::int64_t> axes = {}, bool keepdim = false);
Var max(const Var& a, std::vector<std::int64_t> axes = {}, bool keepdim = false);
Var min(const Var& a, std::vector<std::int64_t> axes = {}, bool keepdim = false);
/// Sums `a` down to the (run-time) shape of `like`: the adjoint of broadcasting.
Var sum_like(const Var& a, const Var& like);
/// Broadcasts `a` to the (run-time) shape of `like`.
Var broadcast_like(const Var& a, const Var& like);
/// The adjoint of mean: `g` (the reduced shape) spread over `like`'s shape and divided by the
/// number of elements reduced.
Var expand_mean(const Var& g, const Var& like, std::vector<std::int64_t> axes, bool keepdim);

// ---- shape ----------------------------------------------------------------------------------
/// Like Tensor::reshape (one dim may be -1).
Var reshape(const Var& a, Shape shape);
/// Reshapes `a` to the (run-time) shape of `like`.
Var reshape_like(const Var& a, const Var& like);
Var permute(const Var& a, std::vector<std::int64_t> dims);
/// Swaps two dims (default: the last two).
Var transpose(const Var& a, std::int64_t dim0 = -2, std::int64_t dim1 = -1);
/// Elements start, start+step, ... < stop along `dim` (Python-style clamping, step >= 1).
Var slice(const Var& a, std::int64_t dim, std::int64_t start, std::int64_t stop, std::int64_t step = 1);
/// Zeros of `like`'s shape with `g` written into the slice: the adjoint of slice.
Var slice_backward(const Var& g, const Var& like, std::int64_t dim, std::int64_t start,
                   std::int64_t stop, std::int64_t step);
/// Broadcasts to `shape` (-1 keeps a size).
Var expand(const Var& a, Shape shape);
/// Inserts size-1 dims at `axes` (positions in the result) / removes size-1 dims at `axes`.
Var unsqueeze(const Var& a, std::vector<std::int64_t> axes);
Var squeeze(const Var& a, std::vector<std::int64_t> axes);
Var concat(const std::vector<Var>& xs, std::int64_t axis = 0);
Var stack(const std::vector<Var>& xs, std::int64_t axis = 0);

// ---- linear algebra, normalised exponentials -------------------------------------------------
/// NumPy matmul: 2-D, batched [..., M, K] x [..., K, N] with broadcast batch dims, 1-D as a
/// vector.
Var matmul(const Var& a, const Var& b);
Var softmax(const Var& a, std::int64_t axis = -1);
Var log_softmax(const Var& a, std::int64_t axis = -1);
Var logsumexp(const Var& a, std::int64_t axis = -1, bool keepdim = false);

// ---- neural-network ops ---------------------------------------------------------------------
/// Mean over the batch of -sum_c t[n, c] log softmax(logits)[n, c], computed stably in one op.
/// `target` is either class indices (int32/int64, shape [N]) or probabilities ([N, C]).
Var softmax_cross_entropy(const Var& logits, const Var& target);
/// One-hot rows [..., classes] of integer `indices` (no gradient).
Var one_hot(const Var& indices, std::int64_t classes, DType dtype = DType::Float32);
/// mean((a - b)^2) over all elements (a scalar).
Var mse_loss(const Var& a, const Var& b);
/// Layer normalisation over the last dim: (x - mean) / sqrt(var + eps) * gamma + beta, with
/// gamma, beta of shape [D].
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps = 1e-5);
/// Batch normalisation of x [N, C] or [N, C, H, W] per channel C. Training: batch statistics,
/// and the running statistics (tensors of shape [C], updated in place) move by `momentum`;
/// inference: the running statistics.
Var batch_norm(const Var& x, const Var& gamma, const Var& beta, const Var& running_mean,
               const Var& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
/// Rows of `weight` [V, D] picked by integer `indices` [...]: result [..., D].
Var embedding(const Var& weight, const Var& indices);
/// Zeros of `like`'s shape [V, D] with the rows of `g` [..., D] added at `indices`.
Var embedding_backward(const Var& g, const Var& indices, const Var& like);
/// embedding's forward computed into `out` (contiguous, the weight's dtype, [..., D] or any shape
/// of that many elements): one row copy per index; a bad index is an mls::Error naming it. Lab 2's
/// op and lab 3's planned executor (in its buffer) both run this.
void embedding_into(const Tensor& weight, const Tensor& indices, Tensor& out);
/// embedding_backward's forward into `out` ([V, D], contiguous, g's dtype, not g's storage): zeros,
/// then g's rows added at the indices in index order.
void embedding_backward_into(const Tensor& g, const Tensor& indices, Tensor& out);
/// Unfolds x [N, C, H, W] into columns [N, C*kh*kw, OH*OW] (zero padding `pad`).
Var im2col(const Var& x, std::int64_t kh, std::int64_t kw, std::int64_t stride, std::int64_t pad);
/// The adjoint of im2col: adds columns back into an image of `like`'s shape.
Var col2im(const Var& cols, const Var& like, std::int64_t kh, std::int64_t kw, std::int64_t stride,
           std::int64_t pad);
/// 2-D convolution (cross-correlation) x [N, C, H, W] with w [O, C, kh, kw] -> [N, O, OH, OW],
/// computed as a matmul over im2col columns.
Var conv2d(const Var& x, const Var& w, std::int64_t stride = 1, std::int64_t pad = 0);

}  // namespace mls::autodiff
