// The C++ code generator: names, scalar expressions and statements, parallel loops, intrinsic
// calls, whole functions and translation units (vectorized loops: codegen_vector.cpp).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>

#include "codegen_internal.hpp"
#include "mls/common/error.hpp"

namespace mls::kernels::te {

namespace codegen_detail {

// ---- small pure functions ----------------------------------------------------------------------

std::string c_float_literal(float v) {
  if (std::isnan(v)) return "__builtin_nanf(\"\")";
  if (std::isinf(v)) return v > 0 ? "__builtin_inff()" : "-__builtin_inff()";
  char buf[64];
  for (int p = 6; p <= 9; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v && std::signbit(std::strtof(buf, nullptr)) == std::signbit(v)) break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

std::string c_int_literal(std::int64_t v) {
  if (v == INT64_MIN) return "(-9223372036854775807LL - 1)";
  std::string s = std::to_string(v);
  return (v > INT32_MAX || v < INT32_MIN) ? s + "LL" : s;
}

bool contiguous_in(const std::vector<Expr>& idx, const VarNode* v) {
  if (idx.empty()) return false;
  for (std::size_t d = 0; d + 1 < idx.size(); ++d)
    if (detail::uses_any(idx[d], {v})) return false;
  std::int64_t coeff = 0;
  for (const auto& t : detail::to_affine(idx.back()).terms) {
    if (t.var == v)
      coeff = t.coeff;
    else if (detail::uses_any(t.atom, {v}))
      return false;
  }
  return coeff == 1;
}

bool interval_condition(const Expr& cond, const VarNode* v) {
  const auto* b = cond.as<Binary>();
  if (!b) return !detail::uses_any(cond, {v});
  if (b->op == BinaryOp::And) return interval_condition(b->a, v) && interval_condition(b->b, v);
  if (!detail::uses_any(cond, {v})) return true;
  if (b->op != BinaryOp::Lt && b->op != BinaryOp::Le && b->op != BinaryOp::Gt && b->op != BinaryOp::Ge)
    return false;
  if (b->a.dtype() != DType::Int) return false;
  for (const auto& t : detail::to_affine(b->a - b->b).terms)
    if (t.var != v && detail::uses_any(t.atom, {v})) return false;
  return true;
}

namespace {
/// "v" when `atom` is the variable v, "//c" or "%c" when it is v // c or v % c (c > 0, how a
/// fused loop's variable reaches its parts), "" otherwise.
std::string v_component(const Expr& atom, const VarNode* v) {
  if (const auto* r = atom.as<VarRef>()) return r->var.get() == v ? "v" : "";
  const auto* b = atom.as<Binary>();
  if (!b || (b->op != BinaryOp::Div && b->op != BinaryOp::Mod)) return "";
  const auto* x = b->a.as<VarRef>();
  const auto* c = b->b.as<IntImm>();
  if (!x || x->var.get() != v || !c || c->value <= 0) return "";
  return (b->op == BinaryOp::Div ? "//" : "%") + std::to_string(c->value);
}
}  // namespace

bool writes_disjoint(const std::vector<Expr>& idx, const std::vector<std::int64_t>& span, const VarNode* v,
                     const detail::Ranges& inner) {
  // A dimension c*part + r, with `part` v or one of v's fused parts, r varying over fewer than |c|
  // values, tells iterations apart by that part; v itself, or both v // c and v % c, tell them all.
  std::set<std::string> told;
  for (std::size_t d = 0; d < idx.size(); ++d) {
    std::string part;
    std::int64_t c = 0, lo = 0, hi = 0;
    bool ok = true;
    for (const auto& t : detail::to_affine(idx[d]).terms) {
      const auto vars = detail::vars_of(t.atom);
      if (std::find(vars.begin(), vars.end(), v) != vars.end()) {
        const std::string comp = v_component(t.atom, v);
        ok = ok && !comp.empty() && part.empty();
        part = comp;
        c = t.coeff;
        continue;
      }
      bool any_inner = false, any_outer = false;
      for (const auto* x : vars) (inner.count(x) ? any_inner : any_outer) = true;
      if (!any_inner) continue;  // fixed while the loop runs
      const auto b = any_outer ? std::nullopt : detail::bound(t.atom, inner);
      if (!b) {
        ok = false;
        continue;
      }
      const std::int64_t x = t.coeff * b->lo, y = t.coeff * b->hi;
      lo += std::min(x, y);
      hi += std::max(x, y);
    }
    const std::int64_t s = d < span.size() ? span[d] : 0;
    if (ok && !part.empty() && hi - lo + s < (c < 0 ? -c : c)) told.insert(part);
  }
  if (told.count("v")) return true;
  for (const auto& p : told)
    if (p.rfind("//", 0) == 0 && told.count("%" + p.substr(2))) return true;
  return false;
}

std::string wrap(const CText& t, int min_prec) { return t.prec < min_prec ? "(" + t.s + ")" : t.s; }

namespace {
const std::set<std::string>& reserved() {
  static const std::set<std::string> r = {
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case",
      "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval",
      "constexpr", "constinit", "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype",
      "default", "delete", "do", "double", "dynamic_cast", "else", "enum", "explicit", "export", "extern",
      "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new",
      "noexcept", "not", "not_eq", "nullptr", "operator", "or", "or_eq", "private", "protected", "public",
      "register", "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static",
      "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local", "throw", "true",
      "try", "typedef", "typeid", "typename", "union", "unsigned", "using", "virtual", "void", "volatile",
      "wchar_t", "while", "xor", "xor_eq", "main", "std", "args", "ptrs", "strides", "extents",
      "parallel_for", "host"};
  return r;
}

std::string indent(int depth) { return std::string(static_cast<std::size_t>(4 * depth), ' '); }

/// The elements of a tile window past its base in each dimension.
std::vector<std::int64_t> window_span(const TileArg& a, const std::vector<std::int64_t>& extents) {
  std::vector<std::int64_t> span;
  for (const auto& row : a.coeff) {
    std::int64_t s = 0;
    for (std::size_t t = 0; t < extents.size(); ++t) s += (row[t] < 0 ? -row[t] : row[t]) * (extents[t] - 1);
    span.push_back(s);
  }
  return span;
}
}  // namespace

// ---- the module's intrinsics ---------------------------------------------------------------------

std::string Module::intrinsic_function(const Intrinsic& in, CallPart part) {
  const std::string src = intrinsic_source(in, part);
  const std::string base = c_identifier(part == CallPart::Reset
                                            ? (in.reset_name.empty() ? in.name + "_reset" : in.reset_name)
                                            : in.name);
  const std::string key = base + '\n' + src;
  if (auto it = intrinsic_ident.find(key); it != intrinsic_ident.end()) return it->second;
  std::string ident = base;
  for (int i = 1; intrinsic_names.count(ident); ++i) ident = base + "_" + std::to_string(i);
  intrinsic_names.insert(ident);
  intrinsic_ident[key] = ident;
  std::string tile;
  for (std::size_t t = 0; t < in.tile.size(); ++t) tile += (t ? "x" : "") + std::to_string(in.tile[t]);
  intrinsic_text += "// Intrinsic '" + in.name + "' (" + (in.pattern == IntrinsicPattern::Gemm ? "gemm " : "copy ") +
                    tile + "), " + (part == CallPart::Reset ? "reset" : "update") + ".\n";
  intrinsic_text += "static inline __attribute__((always_inline)) void " + ident +
                    "(float* const* ptrs, const std::int64_t* strides, const std::int64_t* extents) {\n"
                    "    (void)ptrs;\n    (void)strides;\n    (void)extents;\n";
  std::size_t pos = 0;
  while (pos < src.size()) {
    std::size_t nl = src.find('\n', pos);
    if (nl == std::string::npos) nl = src.size();
    const std::string ln = src.substr(pos, nl - pos);
    intrinsic_text += ln.empty() ? "\n" : (ln[0] == '#' ? ln : "    " + ln) + "\n";
    pos = nl + 1;
  }
  intrinsic_text += "}\n\n";
  return ident;
}

// ---- the emitter: names and expressions ----------------------------------------------------------

Emitter::Emitter(const LoweredFunc& f, Module& m) : f_(f), m_(m) {
  taken_ = m.intrinsic_names;
  for_each_stmt(f.body, [&](const Stmt& s) {
    if (const auto* c = s.as<Call>()) taken_.insert(m_.intrinsic_function(*c->intrinsic, c->part));
  });
  taken_.insert(m.intrinsic_names.begin(), m.intrinsic_names.end());
  auto add = [&](const Buffer& b, bool is_arg) {
    if (bufs_.count(b.get())) return;
    BufVar bv;
    bv.ident = fresh(c_identifier(b->name));
    bv.shape = b->shape;
    bv.strides = buffer_strides(*b);
    bv.size = buffer_span(*b);
    bv.is_arg = bv.live = is_arg;
    bufs_[b.get()] = std::move(bv);
  };
  for (const auto& a : f.args) add(a, true);
  for_each_stmt(f.body, [&](const Stmt& s) {
    if (const auto* a = s.as<Allocate>()) add(a->buffer, false);
  });
}

std::string Emitter::fresh(const std::string& base) {
  std::string n = base;
  for (int i = 1; taken_.count(n) || active_.count(n); ++i) n = base + "_" + std::to_string(i);
  taken_.insert(n);
  return n;
}

std::string Emitter::var(const VarNode* v) const {
  auto it = names_.find(v);
  if (it == names_.end() || it->second.empty())
    fail("generate_cpp: variable '", v->name, "' of '", f_.name, "' is not bound by any loop around it");
  return it->second.back();
}

std::string Emitter::bind(const VarNode* v, const std::string& base, std::int64_t lo, std::int64_t hi) {
  std::string n = base;
  for (int i = 1; taken_.count(n) || active_.count(n); ++i) n = base + "_" + std::to_string(i);
  names_[v].push_back(n);
  active_.insert(n);
  if (lo <= hi) ranges_[v] = {lo, hi};
  return n;
}

void Emitter::unbind(const VarNode* v) {
  active_.erase(names_.at(v).back());
  names_.at(v).pop_back();
  if (names_.at(v).empty()) ranges_.erase(v);
}

BufVar& Emitter::buf(const BufferNode* b, const char* what) {
  auto it = bufs_.find(b);
  MLS_CHECK(it != bufs_.end(), "generate_cpp: buffer '", b->name, "' (", what, " in '", f_.name,
            "') is neither an argument of the function nor allocated in it");
  MLS_CHECK(it->second.live, "generate_cpp: buffer '", b->name, "' (", what, " in '", f_.name,
            "') is used outside its allocation");
  it->second.used = true;
  return it->second;
}

Expr Emitter::flat_index(const BufVar& bv, const std::vector<Expr>& idx) const {
  Expr acc = idx.empty() ? Expr(0) : idx[0] * Expr(bv.strides[0]);
  for (std::size_t d = 1; d < idx.size(); ++d) acc = acc + idx[d] * Expr(bv.strides[d]);
  return detail::simplify(acc);
}

std::string Emitter::element(const BufferNode* b, const std::vector<Expr>& idx, const char* what) {
  BufVar& bv = buf(b, what);
  MLS_CHECK(idx.size() == bv.shape.size(), "generate_cpp: ", idx.size(), " indices for buffer '", b->name,
            "' of shape ", detail::shape_text(bv.shape));
  return bv.ident + "[" + expr(flat_index(bv, idx)).s + "]";
}

CText Emitter::expr(const Expr& e) {
  ExprContext cx;
  cx.dialect = m_.options.fast_exp ? &cpp_fast_exp_dialect() : &cpp_dialect();
  cx.var = [this](const VarNode* v) { return var(v); };
  cx.load = [this](const Load& l) { return element(l.buffer.get(), l.indices, "load"); };
  cx.ranges = &ranges_;
  cx.func = f_.name;
  return c_expr(e, cx);
}

// ---- expressions, shared with the CUDA generator ---------------------------------------------------

const Dialect& cpp_dialect() {
  static const Dialect d{"generate_cpp",    "std::int64_t", "__builtin_expf",   "__builtin_sqrtf",
                         "__builtin_fabsf", "mls_fminf",    "mls_fmaxf",        "__builtin_inff()",
                         "__builtin_nanf(\"\")"};
  return d;
}
const Dialect& cuda_dialect() {
  static const Dialect d{"generate_cuda", "long long", "expf", "sqrtf", "fabsf", "fminf", "fmaxf",
                         "__int_as_float(0x7f800000)", "__int_as_float(0x7fffffff)"};
  return d;
}

namespace {
CText c_binary(const Binary& b, const ExprContext& cx) {
  const bool int_ops = b.a.dtype() != DType::Float;
  const Dialect& d = *cx.dialect;
  auto call = [&](const char* fn) {
    return CText{std::string(fn) + "(" + c_expr(b.a, cx).s + ", " + c_expr(b.b, cx).s + ")", 16};
  };
  auto infix = [&](const char* op, int p, int left_min, int right_min) {
    return CText{wrap(c_expr(b.a, cx), left_min) + op + wrap(c_expr(b.b, cx), right_min), p};
  };
  switch (b.op) {
    case BinaryOp::Add: return infix(" + ", 12, 12, 13);
    case BinaryOp::Sub: return infix(" - ", 12, 12, 13);
    case BinaryOp::Mul: return infix(int_ops ? "*" : " * ", 13, 13, 14);
    case BinaryOp::Div:
    case BinaryOp::Mod: {
      if (!int_ops) return infix(" / ", 13, 13, 14);
      // Floor division is C's truncation where the dividend is never negative.
      const auto* c = b.b.as<IntImm>();
      const auto lo = cx.ranges ? detail::bound(b.a, *cx.ranges) : std::nullopt;
      if (c && c->value > 0 && lo && lo->lo >= 0) {  // parenthesised: (i / 3)*16 reads better than i / 3*16
        const CText q = infix(b.op == BinaryOp::Div ? " / " : " % ", 13, 13, 14);
        return {"(" + q.s + ")", 16};
      }
      return call(b.op == BinaryOp::Div ? "mls_floordiv" : "mls_floormod");
    }
    case BinaryOp::Min: return call(int_ops ? "mls_min" : d.fmin);
    case BinaryOp::Max: return call(int_ops ? "mls_max" : d.fmax);
    case BinaryOp::Lt: return infix(" < ", 10, 11, 11);
    case BinaryOp::Le: return infix(" <= ", 10, 11, 11);
    case BinaryOp::Gt: return infix(" > ", 10, 11, 11);
    case BinaryOp::Ge: return infix(" >= ", 10, 11, 11);
    case BinaryOp::Eq: return infix(" == ", 9, 11, 11);
    case BinaryOp::Ne: return infix(" != ", 9, 11, 11);
    case BinaryOp::And: return infix(" && ", 5, 5, 6);
    case BinaryOp::Or: return infix(" || ", 4, 6, 6);  // && inside || parenthesised (-Wparentheses)
  }
  return {};
}
}  // namespace

CText c_expr(const Expr& e, const ExprContext& cx) {
  const Dialect& d = *cx.dialect;
  MLS_CHECK(e.defined(), d.who, ": an undefined expression in '", cx.func, "'");
  if (const auto* x = e.as<IntImm>()) return {c_int_literal(x->value), x->value < 0 ? 15 : 16};
  if (const auto* x = e.as<FloatImm>()) {
    if (std::isnan(x->value)) return {d.nan, 16};
    if (std::isinf(x->value)) return x->value > 0 ? CText{d.inf, 16} : CText{std::string("-") + d.inf, 15};
    std::string s = c_float_literal(x->value);
    return {s, s[0] == '-' ? 15 : 16};
  }
  if (const auto* x = e.as<VarRef>()) return {cx.var(x->var.get()), 16};
  if (const auto* x = e.as<Load>()) return {cx.load(*x), 16};
  if (const auto* x = e.as<Binary>()) return c_binary(*x, cx);
  if (const auto* x = e.as<Select>())
    return {wrap(c_expr(x->cond, cx), 4) + " ? " + wrap(c_expr(x->then_value, cx), 4) + " : " +
                wrap(c_expr(x->else_value, cx), 4),
            3};
  if (const auto* x = e.as<Unary>()) {
    const CText a = c_expr(x->a, cx);
    const bool is_float = x->a.dtype() == DType::Float;
    auto fn = [&](const char* f) { return std::string(f) + "(" + a.s + ")"; };
    switch (x->op) {
      case UnaryOp::Neg: return {a.s[0] == '-' ? "-(" + a.s + ")" : "-" + wrap(a, 15), 15};
      case UnaryOp::Not: return {"!" + wrap(a, 15), 15};
      case UnaryOp::Exp: return {fn(d.exp), 16};
      case UnaryOp::Sqrt: return {fn(d.sqrt), 16};
      case UnaryOp::Rsqrt: return {"1.0f / " + fn(d.sqrt), 13};
      case UnaryOp::Abs: return {fn(is_float ? d.fabs : "mls_abs"), 16};
      case UnaryOp::ToFloat: return {"static_cast<float>(" + a.s + ")", 16};
    }
  }
  fail(d.who, ": ", to_string(e), " in '", cx.func, "' cannot be compiled (a reduction: lower the schedule first)");
}

// ---- statements ----------------------------------------------------------------------------------

void Emitter::line(int depth, const std::string& text) { out_ += indent(depth) + text + "\n"; }

void Emitter::stmt(const Stmt& s, int depth, bool whole_block) {
  if (const auto* f = s.as<For>()) {
    loop(*f, depth);
  } else if (const auto* st = s.as<Store>()) {
    if (!vec_var_) {
      store(*st, depth);
    } else {
      prefetches(*st, depth);
      if (streamed(*st))
        vstore_streamed(*st, depth);
      else if (!vstore_minmax(*st, depth))
        vstore(*st, depth);
    }
  } else if (const auto* a = s.as<Allocate>()) {
    allocate(*a, depth, whole_block);
  } else if (const auto* q = s.as<Seq>()) {
    for (const auto& c : q->stmts) stmt(c, depth, q->stmts.size() == 1 && whole_block);
  } else if (const auto* i = s.as<IfThenElse>()) {
    if (vec_var_ && detail::uses_any(i->cond, {vec_var_})) return vif(*i, depth);
    line(depth, "if (" + expr(i->cond).s + ") {");
    stmt(i->then_case, depth + 1, true);
    if (i->else_case.defined()) {
      line(depth, "} else {");
      stmt(i->else_case, depth + 1, true);
    }
    line(depth, "}");
  } else if (const auto* c = s.as<Call>()) {
    call(*c, s, depth);
  }
}

void Emitter::loop(const For& f, int depth) {
  const VarNode* v = f.var.get();
  auto it = names_.find(v);
  MLS_CHECK(it == names_.end() || it->second.empty(), "generate_cpp: loop variable '", v->name, "' of '", f_.name,
            "' is bound twice in nested loops");
  MLS_CHECK(f.kind != ForKind::ThreadBinding, "generate_cpp: loop '", v->name, "' of '", f_.name, "' is bound to ",
            thread_tag_name(f.thread), ": bind is for CUDA (generate_cuda); on the CPU use parallel, or the "
            "interpreter");
  const auto* mn = f.min.as<IntImm>();
  const auto* ex = f.extent.as<IntImm>();
  const std::int64_t lo = mn && ex ? mn->value : 1, hi = mn && ex ? mn->value + ex->value - 1 : 0;
  const std::string id = bind(v, c_identifier(v->name), lo, hi);
  const bool copy = !in_vectorized_ && (f.kind == ForKind::Serial || f.kind == ForKind::Parallel) &&
                    transpose_copy(f, depth);  // a transposing copy: emitted in register blocks
  if (copy) {
    // emitted
  } else if (f.kind == ForKind::Parallel && !in_vectorized_)
    parallel_loop(f, depth, id);
  else if (f.kind == ForKind::Vectorized && !in_vectorized_)
    vector_loop(f, depth, id);
  else if ((f.kind != ForKind::Serial && f.kind != ForKind::Unrolled) || !reduce_loop(f, depth, id))
    serial_loop(f, depth, id);
  unbind(v);
}

void Emitter::serial_loop(const For& f, int depth, const std::string& v) {
  if (f.kind == ForKind::Unrolled) {
    const auto* ex = f.extent.as<IntImm>();
    const std::int64_t n = std::min<std::int64_t>(ex ? ex->value : m_.options.max_unroll, m_.options.max_unroll);
    line(depth, "#pragma GCC unroll " + std::to_string(n));
  }
  const std::string lo = expr(f.min).s;
  const std::string end = expr(detail::simplify(f.min + f.extent)).s;
  line(depth, "for (std::int64_t " + v + " = " + lo + "; " + v + " < " + end + "; ++" + v + ") {");
  stmt(f.body, depth + 1, true);
  line(depth, "}");
}

std::string Emitter::parallel_conflict(const For& f) {
  const VarNode* v = f.var.get();
  std::string why;
  detail::Ranges inner;
  std::set<const BufferNode*> private_bufs;
  std::function<void(const Stmt&)> walk = [&](const Stmt& s) {
    if (!why.empty() || !s.defined()) return;
    if (const auto* x = s.as<For>()) {
      const auto* mn = x->min.as<IntImm>();
      const auto* ex = x->extent.as<IntImm>();
      if (mn && ex) inner[x->var.get()] = {mn->value, mn->value + ex->value - 1};
      walk(x->body);
      inner.erase(x->var.get());
    } else if (const auto* x = s.as<Allocate>()) {
      private_bufs.insert(x->buffer.get());
      walk(x->body);
    } else if (const auto* x = s.as<Seq>()) {
      for (const auto& c : x->stmts) walk(c);
    } else if (const auto* x = s.as<IfThenElse>()) {
      walk(x->then_case);
      walk(x->else_case);
    } else if (const auto* x = s.as<Store>()) {
      if (!private_bufs.count(x->buffer.get()) && !writes_disjoint(x->indices, {}, v, inner))
        why = "iterations may write the same element of '" + x->buffer->name + "'";
    } else if (const auto* x = s.as<Call>()) {
      const TileArg& out = x->args.at(0);
      if (!private_bufs.count(out.buffer.get()) &&
          !writes_disjoint(out.base, window_span(out, x->extents), v, inner))
        why = "iterations may write the same element of '" + out.buffer->name + "'";
    }
  };
  walk(f.body);
  return why;
}

void Emitter::parallel_loop(const For& f, int depth, const std::string& v) {
  const std::string ext = expr(f.extent).s;
  if (const std::string why = parallel_conflict(f); !why.empty()) {
    line(depth, "// " + v + " in parallel(" + ext + "): run serially, " + why);
    return serial_loop(f, depth, v);
  }
  uses_parallel_ = true;
  const std::string body = fresh(v + "_body"), b = fresh(v + "_begin"), e = fresh(v + "_end");
  const auto* mn = f.min.as<IntImm>();
  const std::string off = mn && mn->value == 0 ? "" : wrap(expr(f.min), 13) + " + ";
  line(depth, "// " + v + " in parallel(" + ext + "): ranges of iterations on the host's threads");
  line(depth, "auto " + body + " = [&](std::int64_t " + b + ", std::int64_t " + e + ") {");
  // The buffers the body uses, as __restrict pointers of the lambda's own: captured by reference,
  // they would be read through the closure after every store (a store may alias them) and lose
  // the function's __restrict, so the loops would reload every pointer and every row statistic
  // per chunk.
  std::set<const BufferNode*> used;
  for_each_stmt(f.body, [&](const Stmt& st) {
    if (const auto* x = st.as<Store>()) used.insert(x->buffer.get());
    if (const auto* c = st.as<Call>())
      for (const auto& a : c->args) used.insert(a.buffer.get());
  });
  for_each_expr(f.body, [&](const Expr& x) {
    if (const auto* l = x.as<Load>()) used.insert(l->buffer.get());
  });
  std::vector<std::pair<BufVar*, std::string>> outer;  // each buffer's identifier outside the lambda
  for (auto& [node, bv] : bufs_)
    if (bv.live && used.count(node)) outer.emplace_back(&bv, bv.ident);
  std::sort(outer.begin(), outer.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  for (auto& [bv, ident] : outer) {  // in name order: the same source every time
    bv->ident = fresh(ident + "_");
    line(depth + 1, "float* const __restrict " + bv->ident + " = " + ident + ";");
  }
  line(depth + 1, "for (std::int64_t " + v + " = " + off + b + "; " + v + " < " + off + e + "; ++" + v + ") {");
  stmt(f.body, depth + 2, true);
  line(depth + 1, "}");
  if (streams_in(f.body)) line(depth + 1, "mls_stream_fence();  // this thread's non-temporal stores, done");
  line(depth, "};");
  for (auto& [bv, ident] : outer) bv->ident = ident;
  line(depth, "mls_parallel(parallel_for, host, " + ext + ", " + body + ");");
}

void Emitter::store(const Store& st, int depth) {
  const std::string lhs = element(st.buffer.get(), st.indices, "store");
  if (const auto* b = st.value.as<Binary>(); b && (b->op == BinaryOp::Add || b->op == BinaryOp::Mul)) {
    if (const auto* l = b->a.as<Load>(); l && l->buffer == st.buffer) {
      if (element(l->buffer.get(), l->indices, "load") == lhs)
        return line(depth, lhs + (b->op == BinaryOp::Add ? " += " : " *= ") + expr(b->b).s + ";");
    }
  }
  line(depth, lhs + " = " + expr(st.value).s + ";");
}

void Emitter::allocate(const Allocate& a, int depth, bool whole_block) {
  BufVar& bv = bufs_.at(a.buffer.get());
  MLS_CHECK(!bv.live, "generate_cpp: buffer '", a.buffer->name, "' of '", f_.name, "' is allocated inside its own allocation");
  if (!whole_block) line(depth++, "{");
  std::string shape;
  for (std::size_t d = 0; d < bv.shape.size(); ++d) shape += (d ? ", " : "") + std::to_string(bv.shape[d]);
  const bool local = a.buffer->scope != Scope::Global;  // a shared tile is a local one on the CPU
  const std::string note = "  // " + a.buffer->name + ": (" + shape + ")" +
                           (a.buffer->scope == Scope::Shared ? ", shared (local on the CPU)" : local ? ", local" : "");
  if (local && bv.size * 4 <= m_.options.max_stack_bytes) {
    line(depth, "alignas(64) float " + bv.ident + "[" + std::to_string(bv.size) + "];" + note);
  } else {
    const std::string heap = fresh(bv.ident + "_heap");
    line(depth, "mls_heap " + heap + "(" + c_int_literal(bv.size) + ");");
    line(depth, "float* const " + bv.ident + " = " + heap + ".p;" + note);
  }
  bv.live = true;
  stmt(a.body, depth, true);
  bufs_.at(a.buffer.get()).live = false;
  if (!whole_block) line(depth - 1, "}");
}

void Emitter::call(const Call& c, const Stmt& s, int depth) {
  MLS_CHECK(!vec_var_, "generate_cpp: internal error: an intrinsic call inside a vectorized chunk");
  const std::string fn = m_.intrinsic_function(*c.intrinsic, c.part);
  const std::size_t nargs = c.part == CallPart::Reset ? 1 : c.args.size();
  const std::size_t rank = c.extents.size();
  std::string strides, extents, ptrs;
  for (std::size_t a = 0; a < nargs; ++a) {
    const TileArg& arg = c.args[a];
    BufVar& bv = buf(arg.buffer.get(), "call");
    for (std::size_t t = 0; t < rank; ++t) {
      std::int64_t st = 0;
      for (std::size_t d = 0; d < arg.coeff.size(); ++d) st += arg.coeff[d][t] * bv.strides[d];
      strides += (strides.empty() ? "" : ", ") + c_int_literal(st);
    }
    const CText off = expr(flat_index(bv, arg.base));
    ptrs += (a ? ", " : "") + bv.ident + (off.s == "0" ? "" : " + " + wrap(off, 13));
  }
  for (std::size_t t = 0; t < rank; ++t) extents += (t ? ", " : "") + c_int_literal(c.extents[t]);
  std::string text = to_string(s);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  line(depth, "{  // " + text);
  line(depth + 1, "static constexpr std::int64_t strides[" + std::to_string(nargs * rank) + "] = {" + strides + "};");
  line(depth + 1, "static constexpr std::int64_t extents[" + std::to_string(rank) + "] = {" + extents + "};");
  line(depth + 1, "float* const ptrs[" + std::to_string(nargs) + "] = {" + ptrs + "};");
  line(depth + 1, fn + "(ptrs, strides, extents);");
  line(depth, "}");
}

std::string Emitter::function() {
  MLS_CHECK(f_.body.defined(), "generate_cpp: function '", f_.name, "' has no body");
  out_.clear();
  stmt(f_.body, 1, true);
  std::string head;
  head += "extern \"C\" void " + c_identifier(f_.name) + "(float* const* args, mls_parallel_for_fn" +
          (uses_parallel_ ? " parallel_for, void* host" : ", void*") + ") {\n";
  for (std::size_t i = 0; i < f_.args.size(); ++i) {
    const BufVar& bv = bufs_.at(f_.args[i].get());
    if (!bv.used) continue;
    head += indent(1) + "float* const __restrict " + bv.ident + " = args[" + std::to_string(i) + "];  // " +
            f_.args[i]->name + ": float32" + detail::layout_text(*f_.args[i]) + "\n";
  }
  return head + out_ + (uses_stream_ ? indent(1) + "mls_stream_fence();\n" : "") + "}\n";
}

namespace {
/// The helpers every generated unit starts with (all prefixed mls_).
const char* const kPrelude = R"(#include <cstddef>
#include <cstdint>
#include <new>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // vector arguments wider than the ISA's registers
// The lowering writes every element of a local tile before reading it, under guards a compiler
// cannot always follow (a tail's `if` around the copy): its "may be used uninitialized" is noise.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// ---- helpers of the generated code -------------------------------------------------------------
typedef void (*mls_range_body_fn)(void* ctx, std::int64_t begin, std::int64_t end);
typedef void (*mls_parallel_for_fn)(void* host, std::int64_t n, mls_range_body_fn body, void* ctx);

template <class F>
static void mls_run_range(void* ctx, std::int64_t begin, std::int64_t end) {
    (*static_cast<F*>(ctx))(begin, end);
}
// Runs body(begin, end) over ranges covering [0, n): on the host's threads, or here without a host.
template <class F>
static inline void mls_parallel(mls_parallel_for_fn parallel_for, void* host, std::int64_t n, F& body) {
    if (parallel_for)
        parallel_for(host, n, &mls_run_range<F>, &body);
    else
        body(0, n);
}

// Integer division and modulo rounding towards minus infinity (Python's // and %).
[[maybe_unused]] static inline std::int64_t mls_floordiv(std::int64_t a, std::int64_t b) {
    const std::int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
[[maybe_unused]] static inline std::int64_t mls_floormod(std::int64_t a, std::int64_t b) {
    const std::int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
[[maybe_unused]] static inline std::int64_t mls_min(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
[[maybe_unused]] static inline std::int64_t mls_max(std::int64_t a, std::int64_t b) { return a > b ? a : b; }
[[maybe_unused]] static inline std::int64_t mls_abs(std::int64_t a) { return a < 0 ? -a : a; }

// A heap array for the lifetime of a scope, 64-byte aligned: a vector of a packed tile never
// straddles two cache lines (new float[] is only 16-byte aligned).
struct mls_heap {
    float* p;
    explicit mls_heap(std::int64_t n) : p(static_cast<float*>(::operator new[](
        static_cast<std::size_t>(n) * sizeof(float), std::align_val_t{64}))) {}
    ~mls_heap() { ::operator delete[](p, std::align_val_t{64}); }
    mls_heap(const mls_heap&) = delete;
    mls_heap& operator=(const mls_heap&) = delete;
};

// Vectors of 4, 8 and 16 floats (GCC vector extensions); loads and stores unaligned.
typedef float mls_f32x4 __attribute__((vector_size(16)));
typedef float mls_f32x8 __attribute__((vector_size(32)));
typedef float mls_f32x16 __attribute__((vector_size(64)));
template <class V>
static inline V mls_load(const float* p) {
    V v;
    __builtin_memcpy(&v, p, sizeof(V));
    return v;
}
template <class V>
static inline void mls_store(float* p, V v) { __builtin_memcpy(p, &v, sizeof(V)); }
template <class V>
static inline V mls_splat(float x) { return V{} + x; }
#define MLS_LANEWISE(name, expr)                                  \
    template <class V>                                            \
    static inline V name(V a) {                                   \
        for (unsigned l = 0; l < sizeof(V) / sizeof(float); ++l) { \
            const float x = a[l];                                 \
            a[l] = (expr);                                        \
        }                                                         \
        return a;                                                 \
    }
MLS_LANEWISE(mls_vexp, __builtin_expf(x))
MLS_LANEWISE(mls_vsqrt, __builtin_sqrtf(x))
MLS_LANEWISE(mls_vrsqrt, 1.0f / __builtin_sqrtf(x))
MLS_LANEWISE(mls_vabs, __builtin_fabsf(x))
#undef MLS_LANEWISE
// fminf / fmaxf as selects (glibc's: the smaller / larger of a and b, a when they are equal, the
// other one when one is NaN), on floats and lane by lane on vectors: no libm call, so a loop of
// them vectorizes.
[[maybe_unused]] static inline float mls_fminf(float a, float b) { return (a <= b || b != b) ? a : b; }
[[maybe_unused]] static inline float mls_fmaxf(float a, float b) { return (a >= b || b != b) ? a : b; }
template <class V>
static inline V mls_vmin(V a, V b) { return (a <= b || b != b) ? a : b; }
template <class V>
static inline V mls_vmax(V a, V b) { return (a >= b || b != b) ? a : b; }

)";
}  // namespace

}  // namespace codegen_detail

std::string c_identifier(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "_" + s;
  if (codegen_detail::reserved().count(s) || s.rfind("mls_", 0) == 0 || s.rfind("MLS_", 0) == 0) s += "_";
  return s;
}

std::string generate_cpp(std::span<const LoweredFunc> fs, const CodegenOptions& options) {
  MLS_CHECK(!fs.empty(), "generate_cpp: no function to generate");
  MLS_CHECK(options.max_unroll >= 1, "generate_cpp: max_unroll ", options.max_unroll, " must be >= 1");
  MLS_CHECK(options.max_stack_bytes >= 0, "generate_cpp: max_stack_bytes ", options.max_stack_bytes, " must be >= 0");
  MLS_CHECK(options.reduce_chains >= 1, "generate_cpp: reduce_chains ", options.reduce_chains,
            " must be >= 1 (independent accumulators of a fast_reduce loop)");
  MLS_CHECK(options.prefetch_pass_step >= 0, "generate_cpp: prefetch_pass_step ", options.prefetch_pass_step,
            " must be >= 0 (elements further per pass over a prefetched buffer)");
  MLS_CHECK(options.prefetch_level == 1 || options.prefetch_level == 2, "generate_cpp: prefetch_level ",
            options.prefetch_level, " is not 1 (L1) or 2 (L2)");
  MLS_CHECK(!options.fast_exp2 || options.fast_exp,
            "generate_cpp: CodegenOptions::fast_exp2 chooses fast_exp's polynomial, but fast_exp is off");
  codegen_detail::Module m;
  m.options = options;
  m.lanes = resolved_vector_lanes(options);
  for (const auto& f : fs) {
    const std::string sym = c_identifier(f.name);
    MLS_CHECK(!m.intrinsic_names.count(sym), "generate_cpp: two functions are named '", f.name, "' (symbol '", sym, "')");
    m.intrinsic_names.insert(sym);
  }
  std::string functions;
  for (const auto& f : fs) {
    codegen_detail::Emitter e(f, m);
    const std::string text = e.function();
    if (options.comment_loop_nest) {
      std::string nest = to_string(f);
      functions += "// The loop nest (mls::kernels::te::to_string):\n";
      std::size_t pos = 0;
      while (pos < nest.size()) {
        std::size_t nl = nest.find('\n', pos);
        if (nl == std::string::npos) nl = nest.size();
        functions += "//   " + nest.substr(pos, nl - pos) + "\n";
        pos = nl + 1;
      }
    }
    functions += text + "\n";
  }
  std::string head = "// Generated by mls::kernels::te::generate_cpp (lab 4 part 2, ML compilation).\n";
  head += "// Vectorized loops: chunks of " + std::to_string(m.lanes) + " float lanes" +
          (m.lanes == 1 ? " (no SIMD)" : "") + ". Exported: ";
  for (std::size_t i = 0; i < fs.size(); ++i) head += (i ? ", " : "") + c_identifier(fs[i].name);
  head += ".\n";
  return head + codegen_detail::kPrelude + (options.fast_exp ? codegen_detail::fast_exp_prelude(options.fast_exp2) : std::string()) +
         (options.stream_stores.empty() ? "" : codegen_detail::stream_prelude()) +
         (options.fast_reduce || !options.prefetch.empty() ? codegen_detail::fast_reduce_prelude() : "") +
         m.intrinsic_text + functions;
}

std::string generate_cpp(const LoweredFunc& f, const CodegenOptions& options) {
  return generate_cpp(std::span<const LoweredFunc>(&f, 1), options);
}

}  // namespace mls::kernels::te
