#pragma once
// Internal helpers of the tensor-expression library (not installed): substitution, a small
// simplifier, affine forms, interval bounds, scalar semantics and expression printing. Each is a
// small pure function with its own tests (tests/test_te_analysis.cpp).
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/kernels/loop_ir.hpp"
#include "mls/kernels/te.hpp"

namespace mls::kernels::te::detail {

/// Variable -> replacement.
using VarMap = std::map<const VarNode*, Expr>;

/// `e` with every variable of `m` replaced (Reduce axes are never replaced).
Expr substitute(const Expr& e, const VarMap& m);

/// `e` with every Load passed through `f` after its indices were rewritten; `f` returns the
/// replacement (or an undefined Expr to keep the load with its rewritten indices).
Expr rewrite_loads(const Expr& e, const std::function<Expr(const Load&)>& f);

/// Constant folding, x + 0, x * 1, x * 0 (Int), and Int expressions put in the affine normal
/// form of `to_affine` (terms in order of first appearance, zero terms dropped).
Expr simplify(const Expr& e);

/// The distinct variables of `e`, in order of first appearance.
std::vector<const VarNode*> vars_of(const Expr& e);
/// Whether `e` reads any variable of `vars`.
bool uses_any(const Expr& e, const std::vector<const VarNode*>& vars);

/// e = sum(coeff * atom) + constant, where an atom is a variable or an Int sub-expression that is
/// not affine (a floor division, a product of two variables, ...). Always succeeds.
struct Term {
  Expr atom;
  std::string key;            // structural_key(atom): equal atoms share it
  const VarNode* var = nullptr;  // the variable when the atom is one
  std::int64_t coeff = 0;
};
struct Affine {
  std::vector<Term> terms;
  std::int64_t constant = 0;
  /// Adds c * atom (merging with an equal atom).
  void add(const Term& t, std::int64_t scale);
};
Affine to_affine(const Expr& e);
Expr from_affine(const Affine& a);

/// Text that is equal for structurally equal expressions (variables by identity).
std::string structural_key(const Expr& e);

/// A closed integer interval [lo, hi].
struct Interval {
  std::int64_t lo = 0, hi = 0;
};
using Ranges = std::map<const VarNode*, Interval>;
/// Bounds of an Int expression when every variable lies in its range; nullopt when a variable
/// has no range or an operation is not bounded here (a load, a division by a variable).
std::optional<Interval> bound(const Expr& e, const Ranges& ranges);

// ---- scalar semantics shared by the interpreter and the naive evaluator --------------------
inline std::int64_t floordiv(std::int64_t a, std::int64_t b) {
  MLS_CHECK(b != 0, "te: integer division by zero (", a, " // 0)");
  const std::int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline std::int64_t floormod(std::int64_t a, std::int64_t b) {
  MLS_CHECK(b != 0, "te: integer modulo by zero (", a, " % 0)");
  const std::int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
inline std::int64_t apply_int(BinaryOp op, std::int64_t a, std::int64_t b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return floordiv(a, b);
    case BinaryOp::Mod: return floormod(a, b);
    case BinaryOp::Min: return a < b ? a : b;
    case BinaryOp::Max: return a > b ? a : b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::And: return (a != 0) && (b != 0);
    case BinaryOp::Or: return (a != 0) || (b != 0);
  }
  return 0;
}
/// Float arithmetic (Add..Max); comparisons go through `compare_float`.
inline float apply_float(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Min: return std::fmin(a, b);
    case BinaryOp::Max: return std::fmax(a, b);
    default: return std::numeric_limits<float>::quiet_NaN();
  }
}
inline bool compare_float(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    default: return false;
  }
}
inline float apply_unary_float(UnaryOp op, float a) {
  switch (op) {
    case UnaryOp::Neg: return -a;
    case UnaryOp::Exp: return std::exp(a);
    case UnaryOp::Sqrt: return std::sqrt(a);
    case UnaryOp::Rsqrt: return 1.0f / std::sqrt(a);
    case UnaryOp::Abs: return std::fabs(a);
    default: return a;
  }
}
inline bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Lt || op == BinaryOp::Le || op == BinaryOp::Gt || op == BinaryOp::Ge ||
         op == BinaryOp::Eq || op == BinaryOp::Ne;
}

/// The spelling of an operator or function ("+", "//", "max", "exp", ...).
const char* op_name(BinaryOp op, DType operand);
const char* op_name(UnaryOp op);
const char* dtype_name(DType t);
/// "[2, 3]".
std::string shape_text(const std::vector<std::int64_t>& shape);
/// A buffer's shape, with its strides when it has its own: "[2, 3]", "[2, 3] (strides [5, 1])".
std::string layout_text(const BufferNode& b);

/// Python-like text of `e`; `name` gives each variable's printed name.
std::string expr_text(const Expr& e, const std::function<std::string(const VarNode*)>& name);

}  // namespace mls::kernels::te::detail
