#pragma once
/// Lab 4 part 2, ML compilation: tensor expressions (TE), the way TVM's `te.compute` writes a
/// tensor function before any loop exists (slides 001, "ML Compilation").
///
///     Tensor A = placeholder("A", {1024, 1024});
///     Tensor B = placeholder("B", {1024, 1024});
///     IterVar k = reduce_axis(1024, "k");
///     Tensor C = compute("C", {1024, 1024},
///                        [&](Var y, Var x) { return sum(A(k, y) * B(k, x), {k}); });
///
/// The same `Expr` type serves the tensor expressions and the loop-nest IR (mls/kernels/
/// loop_ir.hpp): an immutable tree of `ExprNode`s, each a `std::variant` of plain structs, so a
/// pass walks it with `std::visit`. Invariants of every Expr built through this header:
///   - dtype Int (int64 index arithmetic), Float (float32 values) or Bool (conditions);
///   - Binary operands have the same dtype (an Int operand next to a Float is converted: an
///     IntImm to a FloatImm, anything else through Unary ToFloat);
///   - Int division and modulo are floor division and floor modulo (Python's // and %);
///   - a Reduce appears only as the whole body of a compute, never inside another expression;
///   - Select evaluates only the branch its condition picks (a load there may be out of bounds
///     in the other branch: convolution padding).
/// Identity is by pointer: two Vars are the same variable only if they share their node.
#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace mls::kernels::te {

/// The type of an expression's value.
enum class DType { Int, Float, Bool };

/// A named integer variable (a tensor index, a loop variable). `id` is unique in the process.
struct VarNode {
  std::string name;
  std::int64_t id = 0;
};

/// Handle to a variable; copies share the variable.
class Var {
 public:
  Var() = default;
  /// A fresh variable (a new identity) called `name`.
  explicit Var(std::string name);
  const std::string& name() const { return node_->name; }
  const VarNode* get() const { return node_.get(); }
  bool defined() const { return node_ != nullptr; }
  bool same_as(const Var& o) const { return node_ == o.node_; }

 private:
  std::shared_ptr<const VarNode> node_;
};

/// Data-parallel (an output index) or reduction (summed over) axis.
enum class IterKind { DataPar, Reduce };

/// An axis: a variable with its range [0, extent) and its kind. `owner` names the compute the
/// axis belongs to ("" until `compute` claims it); a reduction axis serves one compute only.
struct IterVarNode {
  Var var;
  std::int64_t extent = 0;
  IterKind kind = IterKind::DataPar;
  mutable std::string owner;
};

/// Handle to an axis; copies share the axis. Converts to an Expr (its variable).
class IterVar {
 public:
  IterVar() = default;
  IterVar(Var var, std::int64_t extent, IterKind kind);
  const Var& var() const { return node_->var; }
  const std::string& name() const { return node_->var.name(); }
  std::int64_t extent() const { return node_->extent; }
  IterKind kind() const { return node_->kind; }
  const IterVarNode* get() const { return node_.get(); }
  bool defined() const { return node_ != nullptr; }
  bool same_as(const IterVar& o) const { return node_ == o.node_; }

 private:
  std::shared_ptr<const IterVarNode> node_;
};

/// Where a buffer lives: main memory (inputs, outputs, intermediates), a small local buffer
/// (a cache tile: the slide's AL, BL, CL), or a GPU block's shared memory (a tile the threads of
/// one block fill together and all read: `Schedule::cache_read(..., Scope::Shared)`; on the CPU a
/// shared tile is a local one).
enum class Scope { Global, Local, Shared };

struct ComputeOp;
/// A float32 array, row-major. `op` is the compute that defines it (null for a placeholder and
/// for a buffer the lowering made). `strides` (in floats, one per dimension) place element
/// [i0][i1]... at sum(i_d * strides[d]); empty means compact (each stride the product of the
/// extents after it). A strided buffer is an operand read or written where it lies: a row of a
/// larger matrix (BLAS's leading dimension), never a copy. Its last stride is 1 and each stride is
/// at least the span of the dimensions after it (rows never overlap): strided_placeholder and
/// with_strides check this.
struct BufferNode {
  std::string name;
  std::vector<std::int64_t> shape;
  Scope scope = Scope::Global;
  std::shared_ptr<const ComputeOp> op;
  std::vector<std::int64_t> strides = {};
  /// A shared tile kept in two copies (Stage::double_buffer): generate_cuda fills the next
  /// iteration's copy while this one is read. Nothing else reads the flag.
  bool double_buffer = false;
};
using Buffer = std::shared_ptr<const BufferNode>;

/// The strides of `b` (its own, or the compact ones when it has none).
std::vector<std::int64_t> buffer_strides(const BufferNode& b);
/// The floats `b` spans from its first element to its last, inclusive: the product of the shape
/// when compact, 1 + sum((shape[d] - 1) * strides[d]) when strided (a span bound to it must have
/// exactly this size).
std::int64_t buffer_span(const BufferNode& b);

struct ExprNode;
/// Handle to an immutable expression; copies share the tree. Built from int / float literals,
/// Vars, IterVars, tensor loads `A(i, k)`, the operators below and the functions of this header.
class Expr {
 public:
  Expr() = default;
  explicit Expr(std::shared_ptr<const ExprNode> node) : node_(std::move(node)) {}
  /// An IntImm.
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  Expr(T v) : Expr(make_int(static_cast<std::int64_t>(v))) {}  // NOLINT: implicit on purpose
  /// A FloatImm.
  template <std::floating_point T>
  Expr(T v) : Expr(make_float(static_cast<float>(v))) {}  // NOLINT
  Expr(const Var& v);      // NOLINT: the variable
  Expr(const IterVar& v);  // NOLINT: the axis's variable
  const ExprNode& operator*() const { return *node_; }
  const ExprNode* operator->() const { return node_.get(); }
  const ExprNode* get() const { return node_.get(); }
  bool defined() const { return node_ != nullptr; }
  DType dtype() const;
  /// The node's alternative, or null: `if (auto* b = e.as<Binary>()) ...`.
  template <class T>
  const T* as() const;

 private:
  static Expr make_int(std::int64_t v);
  static Expr make_float(float v);
  std::shared_ptr<const ExprNode> node_;
};

enum class BinaryOp { Add, Sub, Mul, Div, Mod, Min, Max, Lt, Le, Gt, Ge, Eq, Ne, And, Or };
enum class UnaryOp { Neg, Exp, Sqrt, Rsqrt, Abs, Not, ToFloat };

/// How a reduction combines: acc = op(acc, value), starting from `init` (Add with 0 for sum), or
/// from the output's own value when `accumulate` (C += sum ...: BLAS's beta = 1; the output is
/// read, so it must be bound, never a temporary, and the lowering emits no init for it).
struct Combiner {
  BinaryOp op = BinaryOp::Add;
  float init = 0.0f;
  bool accumulate = false;
};

struct IntImm { std::int64_t value; };
struct FloatImm { float value; };
struct VarRef { Var var; };
struct Binary { BinaryOp op; Expr a, b; };
struct Unary { UnaryOp op; Expr a; };
/// cond ? then_value : else_value (only the chosen branch is evaluated).
struct Select { Expr cond, then_value, else_value; };
/// buffer[indices...]; one Int index per dimension.
struct Load { Buffer buffer; std::vector<Expr> indices; };
/// The combination of `source` over every point of `axes` (all IterKind::Reduce).
struct Reduce { Combiner combiner; Expr source; std::vector<IterVar> axes; };

struct ExprNode {
  DType dtype = DType::Float;
  std::variant<IntImm, FloatImm, VarRef, Binary, Unary, Select, Load, Reduce> v;
};

inline DType Expr::dtype() const { return node_->dtype; }
template <class T>
const T* Expr::as() const {
  return node_ ? std::get_if<T>(&node_->v) : nullptr;
}

/// Builds a node; checks the invariants above (mls::Error naming `op` otherwise).
Expr make_binary(BinaryOp op, Expr a, Expr b);
Expr make_unary(UnaryOp op, Expr a);

Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator*(const Expr& a, const Expr& b);
/// Float: division; Int: floor division.
Expr operator/(const Expr& a, const Expr& b);
/// Int only: floor modulo.
Expr operator%(const Expr& a, const Expr& b);
Expr operator-(const Expr& a);
Expr operator<(const Expr& a, const Expr& b);
Expr operator<=(const Expr& a, const Expr& b);
Expr operator>(const Expr& a, const Expr& b);
Expr operator>=(const Expr& a, const Expr& b);
Expr operator&&(const Expr& a, const Expr& b);
Expr operator||(const Expr& a, const Expr& b);
Expr operator!(const Expr& a);
/// Equality conditions (named functions: an operator== that does not return bool would make
/// C++20's rewritten comparisons ambiguous).
Expr eq(const Expr& a, const Expr& b);
Expr ne(const Expr& a, const Expr& b);
Expr min(const Expr& a, const Expr& b);
Expr max(const Expr& a, const Expr& b);
Expr exp(const Expr& a);
Expr sqrt(const Expr& a);
Expr rsqrt(const Expr& a);
Expr abs(const Expr& a);
/// Int -> Float.
Expr to_float(const Expr& a);
/// cond ? a : b (TVM's `te.if_then_else`; cond Bool, a and b of one dtype).
Expr select(const Expr& cond, const Expr& a, const Expr& b);

/// A reduction axis over [0, extent) (extent >= 1).
IterVar reduce_axis(std::int64_t extent, const std::string& name);
/// sum over `axes` of `source`: combiner (Add, 0).
Expr sum(const Expr& source, const std::vector<IterVar>& axes);
/// max over `axes`: combiner (Max, -inf).
Expr max_reduce(const Expr& source, const std::vector<IterVar>& axes);
/// min over `axes`: combiner (Min, +inf).
Expr min_reduce(const Expr& source, const std::vector<IterVar>& axes);
/// Any reduction: `combiner.op` must be Add, Mul, Min or Max.
Expr reduce(Combiner combiner, const Expr& source, const std::vector<IterVar>& axes);
/// out += sum over `axes` of `source` (combiner (Add, 0, accumulate)): the output's own value is
/// where the sum starts. Only as the whole body of the compute of an output.
Expr sum_into(const Expr& source, const std::vector<IterVar>& axes);

/// What defines a computed tensor: out[axes...] = body (body may be a Reduce).
struct ComputeOp {
  std::string name;
  std::vector<IterVar> axes;  // data-parallel, one per output dimension
  Expr body;
};

/// A tensor: its buffer and, for a computed one, the op that defines it. Calling it with one
/// Int index per dimension gives a Load: `A(k, y)`.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Buffer buffer) : buffer_(std::move(buffer)) {}
  const Buffer& buffer() const { return buffer_; }
  const std::string& name() const { return buffer_->name; }
  const std::vector<std::int64_t>& shape() const { return buffer_->shape; }
  std::size_t ndim() const { return buffer_->shape.size(); }
  /// The defining op; null for a placeholder.
  const std::shared_ptr<const ComputeOp>& op() const { return buffer_->op; }
  /// The op's i-th data-parallel axis (the compute's `axis[i]`).
  IterVar axis(std::size_t i) const;
  /// The op's i-th reduction axis.
  IterVar reduce_axis(std::size_t i) const;
  bool defined() const { return buffer_ != nullptr; }
  bool same_as(const Tensor& o) const { return buffer_ == o.buffer_; }
  /// A load; mls::Error when the count of indices differs from ndim() or one is not Int.
  Expr load(std::vector<Expr> indices) const;
  template <class... I>
  Expr operator()(I&&... idx) const {
    return load(std::vector<Expr>{Expr(std::forward<I>(idx))...});
  }

 private:
  Buffer buffer_;
};

/// An input tensor: `shape` non-empty, every extent >= 1.
Tensor placeholder(const std::string& name, std::vector<std::int64_t> shape);
/// An input tensor stored with `strides` (see BufferNode): a matrix read in place with a leading
/// dimension, `strided_placeholder("A", {M, K}, {lda, 1})`. mls::Error "placeholder '<name>': ..."
/// unless there is one stride per dimension, the last is 1 and each is >= the span of the
/// dimensions after it.
Tensor strided_placeholder(const std::string& name, std::vector<std::int64_t> shape,
                           std::vector<std::int64_t> strides);
/// The same tensor stored with `strides`: a new buffer (a new identity) with `t`'s name, shape and
/// defining op. For a placeholder, or for an output no other compute reads (a compute's loads keep
/// naming the old buffer): C = with_strides(compute(...), {ldc, 1}) writes C in place with a leading
/// dimension. Errors as strided_placeholder's, naming `t`.
Tensor with_strides(const Tensor& t, std::vector<std::int64_t> strides);

/// out[i...] = f(i...) for every index of `shape`. `f` receives one Var per dimension, named
/// `axis_names[d]` (default i, j, l, m, ...). The body must be Float; a Reduce may only be the
/// whole body; every variable in it must be one of these axes or of the Reduce's axes;
/// mls::Error otherwise.
Tensor compute(const std::string& name, std::vector<std::int64_t> shape,
               const std::function<Expr(const std::vector<Var>&)>& f,
               std::vector<std::string> axis_names = {});

/// The same with f taking 1 to 4 Vars: `compute("C", {m, n}, [&](Var i, Var j) {...})`.
template <class F>
  requires(!std::is_invocable_v<F, const std::vector<Var>&>)
Tensor compute(const std::string& name, std::vector<std::int64_t> shape, F&& f,
               std::vector<std::string> axis_names = {}) {
  auto wrap = [&f](const std::vector<Var>& v) -> Expr {
    if constexpr (std::is_invocable_v<F, Var>) {
      return v.size() == 1 ? Expr(f(v[0])) : Expr();
    } else if constexpr (std::is_invocable_v<F, Var, Var>) {
      return v.size() == 2 ? Expr(f(v[0], v[1])) : Expr();
    } else if constexpr (std::is_invocable_v<F, Var, Var, Var>) {
      return v.size() == 3 ? Expr(f(v[0], v[1], v[2])) : Expr();
    } else {
      static_assert(std::is_invocable_v<F, Var, Var, Var, Var>, "compute: f takes 1 to 4 Vars");
      return v.size() == 4 ? Expr(f(v[0], v[1], v[2], v[3])) : Expr();
    }
  };
  return compute(name, std::move(shape), std::function<Expr(const std::vector<Var>&)>(wrap),
                 std::move(axis_names));
}

/// Every tensor `outputs` depend on, producers before consumers (placeholders included),
/// each once.
std::vector<Tensor> topo_order(const std::vector<Tensor>& outputs);

/// Readable text of an expression, Python-like: `A[k][y] * B[k][x]`, `sum(..., axis=[k])`.
std::string to_string(const Expr& e);

/// The storage a program reads and writes: a span of floats per buffer (row-major; its
/// buffer_span floats, compact or strided).
class Bindings {
 public:
  /// Binds `t`'s buffer to `data` (its size must be buffer_span: the product of the shape when
  /// compact; checked on use).
  Bindings& bind(const Tensor& t, std::span<float> data) { return bind(t.buffer(), data); }
  Bindings& bind(const Buffer& b, std::span<float> data);
  /// The span bound to `b`, or null when there is none.
  const std::span<float>* find(const BufferNode* b) const;

 private:
  std::map<const BufferNode*, std::pair<Buffer, std::span<float>>> map_;
};

/// The reference semantics of the definitions, with no schedule: computes every tensor of
/// `outputs` straight from its compute body (each intermediate in a temporary of its own,
/// reductions in axis order, float32). Placeholders and outputs must be bound in `buffers`;
/// mls::Error for an unbound or wrongly sized buffer or an out-of-bounds load.
void evaluate_naive(const std::vector<Tensor>& outputs, const Bindings& buffers);

}  // namespace mls::kernels::te
