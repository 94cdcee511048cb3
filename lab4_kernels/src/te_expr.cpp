// Tensor expressions: nodes, operators, placeholders, computes, reductions and their printing.
#include <algorithm>
#include <atomic>
#include <charconv>
#include <limits>
#include <set>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/kernels/te.hpp"
#include "te_internal.hpp"

namespace mls::kernels::te {

namespace {
std::atomic<std::int64_t> g_next_var_id{1};

Expr node(DType t, decltype(ExprNode::v) v) {
  return Expr(std::make_shared<const ExprNode>(ExprNode{t, std::move(v)}));
}

/// An Int operand next to a Float one becomes Float (an IntImm folds to a FloatImm).
Expr promote_to_float(const Expr& e) {
  if (e.dtype() == DType::Float) return e;
  if (const auto* i = e.as<IntImm>()) return Expr(static_cast<float>(i->value));
  return node(DType::Float, Unary{UnaryOp::ToFloat, e});
}
}  // namespace

Var::Var(std::string name)
    : node_(std::make_shared<const VarNode>(VarNode{std::move(name), g_next_var_id++})) {}

IterVar::IterVar(Var var, std::int64_t extent, IterKind kind)
    : node_(std::make_shared<const IterVarNode>(IterVarNode{std::move(var), extent, kind, {}})) {}

Expr Expr::make_int(std::int64_t v) { return node(DType::Int, IntImm{v}); }
Expr Expr::make_float(float v) { return node(DType::Float, FloatImm{v}); }
Expr::Expr(const Var& v) : Expr(v.defined() ? node(DType::Int, VarRef{v}) : Expr()) {}
Expr::Expr(const IterVar& v) : Expr(v.defined() ? Expr(v.var()) : Expr()) {}

Expr make_binary(BinaryOp op, Expr a, Expr b) {
  const DType t = a.defined() ? a.dtype() : DType::Int;
  const char* name = detail::op_name(op, t);
  MLS_CHECK(a.defined() && b.defined(), "te: operand of '", name, "' is undefined");
  if (op == BinaryOp::And || op == BinaryOp::Or) {
    MLS_CHECK(a.dtype() == DType::Bool && b.dtype() == DType::Bool, "te: '", name,
              "' needs bool operands, got ", detail::dtype_name(a.dtype()), " and ",
              detail::dtype_name(b.dtype()));
    return node(DType::Bool, Binary{op, std::move(a), std::move(b)});
  }
  MLS_CHECK(a.dtype() != DType::Bool && b.dtype() != DType::Bool, "te: '", name,
            "' needs int or float operands, got ", detail::dtype_name(a.dtype()), " and ",
            detail::dtype_name(b.dtype()));
  if (a.dtype() != b.dtype()) {
    a = promote_to_float(a);
    b = promote_to_float(b);
  }
  MLS_CHECK(op != BinaryOp::Mod || a.dtype() == DType::Int,
            "te: '%' needs int operands, got float (use it on indices)");
  const DType out = detail::is_comparison(op) ? DType::Bool : a.dtype();
  return node(out, Binary{op, std::move(a), std::move(b)});
}

Expr make_unary(UnaryOp op, Expr a) {
  MLS_CHECK(a.defined(), "te: operand of '", detail::op_name(op), "' is undefined");
  switch (op) {
    case UnaryOp::Not:
      MLS_CHECK(a.dtype() == DType::Bool, "te: '!' needs a bool operand, got ",
                detail::dtype_name(a.dtype()));
      return node(DType::Bool, Unary{op, std::move(a)});
    case UnaryOp::Neg:
    case UnaryOp::Abs:
      MLS_CHECK(a.dtype() != DType::Bool, "te: '", detail::op_name(op),
                "' needs an int or float operand, got bool");
      {
        const DType t = a.dtype();
        return node(t, Unary{op, std::move(a)});
      }
    case UnaryOp::ToFloat:
      MLS_CHECK(a.dtype() != DType::Bool, "te: 'float' needs an int operand, got bool");
      return promote_to_float(a);
    default:  // exp, sqrt, rsqrt: float functions
      MLS_CHECK(a.dtype() != DType::Bool, "te: '", detail::op_name(op),
                "' needs a float operand, got bool");
      return node(DType::Float, Unary{op, promote_to_float(a)});
  }
}

Expr operator+(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Add, a, b); }
Expr operator-(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Sub, a, b); }
Expr operator*(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Mul, a, b); }
Expr operator/(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Div, a, b); }
Expr operator%(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Mod, a, b); }
Expr operator-(const Expr& a) { return make_unary(UnaryOp::Neg, a); }
Expr operator<(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Lt, a, b); }
Expr operator<=(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Le, a, b); }
Expr operator>(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Gt, a, b); }
Expr operator>=(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Ge, a, b); }
Expr operator&&(const Expr& a, const Expr& b) { return make_binary(BinaryOp::And, a, b); }
Expr operator||(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Or, a, b); }
Expr operator!(const Expr& a) { return make_unary(UnaryOp::Not, a); }
Expr eq(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Eq, a, b); }
Expr ne(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Ne, a, b); }
Expr min(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Min, a, b); }
Expr max(const Expr& a, const Expr& b) { return make_binary(BinaryOp::Max, a, b); }
Expr exp(const Expr& a) { return make_unary(UnaryOp::Exp, a); }
Expr sqrt(const Expr& a) { return make_unary(UnaryOp::Sqrt, a); }
Expr rsqrt(const Expr& a) { return make_unary(UnaryOp::Rsqrt, a); }
Expr abs(const Expr& a) { return make_unary(UnaryOp::Abs, a); }
Expr to_float(const Expr& a) { return make_unary(UnaryOp::ToFloat, a); }

Expr select(const Expr& cond, const Expr& a, const Expr& b) {
  MLS_CHECK(cond.defined() && a.defined() && b.defined(), "select: an operand is undefined");
  MLS_CHECK(cond.dtype() == DType::Bool, "select: the condition must be bool, got ",
            detail::dtype_name(cond.dtype()));
  MLS_CHECK(a.dtype() != DType::Bool && b.dtype() != DType::Bool,
            "select: the values must be int or float, got ", detail::dtype_name(a.dtype()),
            " and ", detail::dtype_name(b.dtype()));
  Expr x = a, y = b;
  if (x.dtype() != y.dtype()) {
    x = promote_to_float(x);
    y = promote_to_float(y);
  }
  const DType t = x.dtype();
  return node(t, Select{cond, std::move(x), std::move(y)});
}

IterVar reduce_axis(std::int64_t extent, const std::string& name) {
  MLS_CHECK(extent >= 1, "reduce_axis: extent ", extent, " of '", name, "' must be >= 1");
  return IterVar(Var(name), extent, IterKind::Reduce);
}

Expr reduce(Combiner combiner, const Expr& source, const std::vector<IterVar>& axes) {
  const char* what = detail::op_name(combiner.op, DType::Float);
  MLS_CHECK(combiner.op == BinaryOp::Add || combiner.op == BinaryOp::Mul ||
                combiner.op == BinaryOp::Min || combiner.op == BinaryOp::Max,
            "reduce: combiner '", what, "' must be +, *, min or max");
  MLS_CHECK(source.defined(), "reduce: the source is undefined");
  MLS_CHECK(source.dtype() != DType::Bool, "reduce: the source must be float, got bool");
  MLS_CHECK(!axes.empty(), "reduce: no reduction axes given");
  for (std::size_t i = 0; i < axes.size(); ++i) {
    MLS_CHECK(axes[i].defined(), "reduce: reduction axis ", i, " is undefined");
    MLS_CHECK(axes[i].kind() == IterKind::Reduce, "reduce: axis '", axes[i].name(),
              "' is not a reduction axis (make it with reduce_axis)");
    for (std::size_t j = 0; j < i; ++j)
      MLS_CHECK(!axes[i].same_as(axes[j]), "reduce: axis '", axes[i].name(), "' is given twice");
  }
  return node(DType::Float, Reduce{combiner, promote_to_float(source), axes});
}

Expr sum(const Expr& source, const std::vector<IterVar>& axes) {
  return reduce({BinaryOp::Add, 0.0f}, source, axes);
}
Expr sum_into(const Expr& source, const std::vector<IterVar>& axes) {
  return reduce({BinaryOp::Add, 0.0f, true}, source, axes);
}
Expr max_reduce(const Expr& source, const std::vector<IterVar>& axes) {
  return reduce({BinaryOp::Max, -std::numeric_limits<float>::infinity()}, source, axes);
}
Expr min_reduce(const Expr& source, const std::vector<IterVar>& axes) {
  return reduce({BinaryOp::Min, std::numeric_limits<float>::infinity()}, source, axes);
}

// ---- tensors ------------------------------------------------------------------------------

IterVar Tensor::axis(std::size_t i) const {
  MLS_CHECK(op(), "axis: '", name(), "' is a placeholder: it has no axes");
  MLS_CHECK(i < op()->axes.size(), "axis: '", name(), "' has ", op()->axes.size(),
            " axes, asked for axis ", i);
  return op()->axes[i];
}

IterVar Tensor::reduce_axis(std::size_t i) const {
  MLS_CHECK(op(), "reduce_axis: '", name(), "' is a placeholder: it has no axes");
  const auto* r = op()->body.as<Reduce>();
  MLS_CHECK(r, "reduce_axis: '", name(), "' is not a reduction");
  MLS_CHECK(i < r->axes.size(), "reduce_axis: '", name(), "' has ", r->axes.size(),
            " reduction axes, asked for axis ", i);
  return r->axes[i];
}

Expr Tensor::load(std::vector<Expr> indices) const {
  MLS_CHECK(defined(), "load: the tensor is undefined");
  MLS_CHECK(indices.size() == ndim(), name(), "(...): ", indices.size(), " indices for a ",
            ndim(), "-D tensor of shape ", detail::shape_text(shape()));
  for (std::size_t d = 0; d < indices.size(); ++d) {
    MLS_CHECK(indices[d].defined(), name(), "(...): index ", d, " is undefined");
    MLS_CHECK(indices[d].dtype() == DType::Int, name(), "(...): index ", d, " is ",
              detail::dtype_name(indices[d].dtype()), ", expected an int expression");
  }
  return node(DType::Float, Load{buffer_, std::move(indices)});
}

namespace {
void check_shape(const char* what, const std::string& name, const std::vector<std::int64_t>& shape) {
  MLS_CHECK(!name.empty(), what, ": the name is empty");
  MLS_CHECK(!shape.empty(), what, " '", name, "': the shape is empty");
  for (auto e : shape)
    MLS_CHECK(e >= 1, what, " '", name, "': shape ", detail::shape_text(shape),
              " must have extents >= 1");
}

/// The checks of `compute` on its body (see te.hpp).
void check_body(const std::string& name, const Expr& body, const std::vector<IterVar>& axes) {
  MLS_CHECK(body.dtype() == DType::Float, "compute '", name, "': the body must be float, got ",
            detail::dtype_name(body.dtype()));
  std::set<const VarNode*> allowed;
  for (const auto& a : axes) allowed.insert(a.var().get());
  const auto* r = body.as<Reduce>();
  if (r) {
    for (const auto& a : r->axes) {
      MLS_CHECK(a.get()->owner.empty(), "compute '", name, "': reduction axis '", a.name(),
                "' already belongs to compute '", a.get()->owner,
                "'; make one reduce_axis per compute");
      allowed.insert(a.var().get());
    }
  }
  for_each_expr(r ? r->source : body, [&](const Expr& e) {
    MLS_CHECK(!e.as<Reduce>(), "compute '", name,
              "': a reduction must be the whole body (one compute per reduction), found one "
              "inside: ", to_string(e));
    if (const auto* v = e.as<VarRef>())
      MLS_CHECK(allowed.count(v->var.get()), "compute '", name, "': variable '", v->var.name(),
                "' is neither an axis of '", name, "' nor a reduction axis of its body");
  });
}
}  // namespace

Tensor placeholder(const std::string& name, std::vector<std::int64_t> shape) {
  check_shape("placeholder", name, shape);
  return Tensor(std::make_shared<const BufferNode>(BufferNode{name, std::move(shape), Scope::Global, nullptr}));
}

namespace {
/// The checks of a buffer's strides (see BufferNode).
void check_strides(const char* what, const std::string& name, const std::vector<std::int64_t>& shape,
                   const std::vector<std::int64_t>& strides) {
  MLS_CHECK(strides.size() == shape.size(), what, " '", name, "': ", strides.size(), " strides ",
            detail::shape_text(strides), " for the ", shape.size(), " dimensions of ", detail::shape_text(shape));
  MLS_CHECK(strides.back() == 1, what, " '", name, "': strides ", detail::shape_text(strides),
            " must end in 1 (the elements of a row are contiguous)");
  std::int64_t span = shape.back();  // the floats the dimensions after d span
  for (std::size_t d = shape.size() - 1; d-- > 0;) {
    MLS_CHECK(strides[d] >= span, what, " '", name, "': stride ", strides[d], " of dimension ", d, " in ",
              detail::shape_text(strides), " is below ", span, ", the span of the dimensions after it in shape ",
              detail::shape_text(shape), " (its rows would overlap)");
    span = strides[d] * (shape[d] - 1) + span;
  }
}
}  // namespace

Tensor strided_placeholder(const std::string& name, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides) {
  check_shape("placeholder", name, shape);
  check_strides("placeholder", name, shape, strides);
  return Tensor(std::make_shared<const BufferNode>(
      BufferNode{name, std::move(shape), Scope::Global, nullptr, std::move(strides)}));
}

Tensor with_strides(const Tensor& t, std::vector<std::int64_t> strides) {
  MLS_CHECK(t.defined(), "with_strides: the tensor is undefined");
  check_strides("with_strides", t.name(), t.shape(), strides);
  const BufferNode& b = *t.buffer();
  return Tensor(std::make_shared<const BufferNode>(BufferNode{b.name, b.shape, b.scope, b.op, std::move(strides)}));
}

std::vector<std::int64_t> buffer_strides(const BufferNode& b) {
  if (!b.strides.empty()) return b.strides;
  std::vector<std::int64_t> s(b.shape.size(), 1);
  for (std::size_t d = b.shape.size(); d-- > 1;) s[d - 1] = s[d] * b.shape[d];
  return s;
}

std::int64_t buffer_span(const BufferNode& b) {
  std::int64_t n = 1;
  if (b.strides.empty()) {
    for (auto e : b.shape) n *= e;
    return n;
  }
  for (std::size_t d = 0; d < b.shape.size(); ++d) n += (b.shape[d] - 1) * b.strides[d];
  return n;
}

Tensor compute(const std::string& name, std::vector<std::int64_t> shape,
               const std::function<Expr(const std::vector<Var>&)>& f,
               std::vector<std::string> axis_names) {
  check_shape("compute", name, shape);
  static const char* kDefault[] = {"i", "j", "l", "m", "n", "p", "q", "r"};
  MLS_CHECK(axis_names.empty() || axis_names.size() == shape.size(), "compute '", name, "': ",
            axis_names.size(), " axis names for ", shape.size(), " dimensions");
  std::vector<Var> vars;
  std::vector<IterVar> axes;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    std::string n = !axis_names.empty() ? axis_names[d]
                    : d < 8             ? kDefault[d]
                                        : "i" + std::to_string(d);
    vars.emplace_back(n);
    axes.emplace_back(vars.back(), shape[d], IterKind::DataPar);
  }
  Expr body = f(vars);
  MLS_CHECK(body.defined(), "compute '", name, "': f gave no expression (does it take ",
            shape.size(), " indices, one per dimension of ", detail::shape_text(shape), "?)");
  check_body(name, body, axes);
  auto op = std::make_shared<ComputeOp>(ComputeOp{name, axes, body});
  for (const auto& a : axes) a.get()->owner = name;
  if (const auto* r = body.as<Reduce>())
    for (const auto& a : r->axes) a.get()->owner = name;
  return Tensor(std::make_shared<const BufferNode>(BufferNode{name, std::move(shape), Scope::Global, op}));
}

std::vector<Tensor> topo_order(const std::vector<Tensor>& outputs) {
  std::vector<Tensor> order;
  std::set<const BufferNode*> done, active;
  std::function<void(const Buffer&)> visit = [&](const Buffer& b) {
    if (done.count(b.get())) return;
    MLS_CHECK(!active.count(b.get()), "topo_order: '", b->name, "' depends on itself");
    active.insert(b.get());
    if (b->op)
      for_each_expr(b->op->body, [&](const Expr& e) {
        if (const auto* l = e.as<Load>()) visit(l->buffer);
      });
    active.erase(b.get());
    done.insert(b.get());
    order.emplace_back(b);
  };
  for (const auto& t : outputs) {
    MLS_CHECK(t.defined(), "topo_order: an output tensor is undefined");
    visit(t.buffer());
  }
  return order;
}

Bindings& Bindings::bind(const Buffer& b, std::span<float> data) {
  MLS_CHECK(b != nullptr, "bind: the buffer is undefined");
  map_[b.get()] = {b, data};
  return *this;
}

const std::span<float>* Bindings::find(const BufferNode* b) const {
  auto it = map_.find(b);
  return it == map_.end() ? nullptr : &it->second.second;
}

// ---- printing -----------------------------------------------------------------------------

namespace detail {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Int: return "int";
    case DType::Float: return "float";
    case DType::Bool: return "bool";
  }
  return "?";
}

const char* op_name(BinaryOp op, DType operand) {
  switch (op) {
    case BinaryOp::Add: return "+";
    case BinaryOp::Sub: return "-";
    case BinaryOp::Mul: return "*";
    case BinaryOp::Div: return operand == DType::Int ? "//" : "/";
    case BinaryOp::Mod: return "%";
    case BinaryOp::Min: return "min";
    case BinaryOp::Max: return "max";
    case BinaryOp::Lt: return "<";
    case BinaryOp::Le: return "<=";
    case BinaryOp::Gt: return ">";
    case BinaryOp::Ge: return ">=";
    case BinaryOp::Eq: return "==";
    case BinaryOp::Ne: return "!=";
    case BinaryOp::And: return "and";
    case BinaryOp::Or: return "or";
  }
  return "?";
}

const char* op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "-";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Not: return "not";
    case UnaryOp::ToFloat: return "float";
  }
  return "?";
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string layout_text(const BufferNode& b) {
  return shape_text(b.shape) + (b.strides.empty() ? "" : " (strides " + shape_text(b.strides) + ")");
}

namespace {
std::string float_text(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

/// Binding strength of an infix operator (higher binds tighter); 100 for atoms and calls.
int precedence(const Expr& e) {
  if (const auto* b = e.as<Binary>()) {
    switch (b->op) {
      case BinaryOp::Or: return 1;
      case BinaryOp::And: return 2;
      case BinaryOp::Lt: case BinaryOp::Le: case BinaryOp::Gt: case BinaryOp::Ge:
      case BinaryOp::Eq: case BinaryOp::Ne: return 4;
      case BinaryOp::Add: case BinaryOp::Sub: return 5;
      case BinaryOp::Mul: case BinaryOp::Div: case BinaryOp::Mod: return 6;
      default: return 100;  // min, max: calls
    }
  }
  if (const auto* u = e.as<Unary>()) return u->op == UnaryOp::Neg ? 7 : u->op == UnaryOp::Not ? 3 : 100;
  if (const auto* i = e.as<IntImm>()) return i->value < 0 ? 7 : 100;
  if (const auto* f = e.as<FloatImm>()) return f->value < 0 ? 7 : 100;
  return 100;
}
}  // namespace

std::string expr_text(const Expr& e, const std::function<std::string(const VarNode*)>& name) {
  if (!e.defined()) return "<undefined>";
  auto sub = [&](const Expr& x, int min_prec) {
    std::string s = expr_text(x, name);
    return precedence(x) < min_prec ? "(" + s + ")" : s;
  };
  return std::visit(
      [&](const auto& n) -> std::string {
        using T = std::decay_t<decltype(n)>;
        if constexpr (std::is_same_v<T, IntImm>) {
          return std::to_string(n.value);
        } else if constexpr (std::is_same_v<T, FloatImm>) {
          return float_text(n.value);
        } else if constexpr (std::is_same_v<T, VarRef>) {
          return name(n.var.get());
        } else if constexpr (std::is_same_v<T, Binary>) {
          const char* op = op_name(n.op, n.a.dtype());
          if (n.op == BinaryOp::Min || n.op == BinaryOp::Max)
            return std::string(op) + "(" + expr_text(n.a, name) + ", " + expr_text(n.b, name) + ")";
          const int p = precedence(e);
          const bool tight = n.op == BinaryOp::Mul && n.a.dtype() == DType::Int;
          const std::string sep = tight ? op : std::string(" ") + op + " ";
          return sub(n.a, p) + sep + sub(n.b, p + 1);
        } else if constexpr (std::is_same_v<T, Unary>) {
          if (n.op == UnaryOp::Neg) return "-" + sub(n.a, 8);
          if (n.op == UnaryOp::Not) return "not " + sub(n.a, 4);
          return std::string(op_name(n.op)) + "(" + expr_text(n.a, name) + ")";
        } else if constexpr (std::is_same_v<T, Select>) {
          return "select(" + expr_text(n.cond, name) + ", " + expr_text(n.then_value, name) +
                 ", " + expr_text(n.else_value, name) + ")";
        } else if constexpr (std::is_same_v<T, Load>) {
          std::string s = n.buffer->name;
          for (const auto& i : n.indices) s += "[" + expr_text(i, name) + "]";
          return s;
        } else {
          const char* f = n.combiner.op == BinaryOp::Add   ? "sum"
                          : n.combiner.op == BinaryOp::Max ? "max_reduce"
                          : n.combiner.op == BinaryOp::Min ? "min_reduce"
                                                           : "prod_reduce";
          std::string s = std::string(f) + (n.combiner.accumulate ? "_into(" : "(") + expr_text(n.source, name) + ", axis=[";
          for (std::size_t i = 0; i < n.axes.size(); ++i)
            s += (i ? ", " : "") + name(n.axes[i].var().get());
          return s + "])";
        }
      },
      e->v);
}

}  // namespace detail

std::string to_string(const Expr& e) {
  return detail::expr_text(e, [](const VarNode* v) { return v->name; });
}

}  // namespace mls::kernels::te
