// Student file of lab 4: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 4 part 2. The C++ code generator's vectorized loops: chunks of W lanes in GCC vector extensions, per-lane
// code where a load is not contiguous or a guard does not hold for every lane, a scalar tail.
#include <functional>

#include "codegen_internal.hpp"
#include "mls/common/error.hpp"

namespace mls::kernels::te::codegen_detail {

namespace {
/// The structural keys of an index list (equal lists address the same element).
std::string index_key(const std::vector<Expr>& idx) {
  std::string k;
  for (const auto& i : idx) k += detail::structural_key(i) + "|";
  return k;
}
}  // namespace

std::string Emitter::vector_obstacle(const For& f) const {
  const VarNode* v = f.var.get();
  const std::string vn = v->name;
  std::string why;
  struct Access {
    const BufferNode* buffer;
    std::string key;
  };
  std::vector<Access> loads, stores;
  auto collect_loads = [&](const Expr& e) {
    for_each_expr(e, [&](const Expr& x) {
      if (const auto* l = x.as<Load>()) loads.push_back({l->buffer.get(), index_key(l->indices)});
    });
  };
  std::function<void(const Stmt&)> walk = [&](const Stmt& s) {
    if (!why.empty() || !s.defined()) return;
    if (const auto* x = s.as<For>()) {
      if (detail::uses_any(x->min, {v}) || detail::uses_any(x->extent, {v}))
        why = "the bounds of loop '" + x->var.name() + "' depend on " + vn;
      walk(x->body);
    } else if (const auto* x = s.as<Allocate>()) {
      why = "buffer '" + x->buffer->name + "' is allocated in its body";
    } else if (const auto* x = s.as<Call>()) {
      why = "intrinsic '" + x->intrinsic->name + "' is called in its body";
    } else if (const auto* x = s.as<Seq>()) {
      for (const auto& c : x->stmts) walk(c);
    } else if (const auto* x = s.as<IfThenElse>()) {
      if (detail::uses_any(x->cond, {v})) {
        if (x->else_case.defined())
          why = "the condition " + to_string(x->cond) + " on " + vn + " has an else branch";
        else if (!interval_condition(x->cond, v))
          why = "the condition " + to_string(x->cond) + " does not hold on an interval of " + vn;
      }
      collect_loads(x->cond);
      walk(x->then_case);
      walk(x->else_case);
    } else if (const auto* x = s.as<Store>()) {
      if (!contiguous_in(x->indices, v))
        why = "its store to '" + x->buffer->name + "' is not contiguous in " + vn;
      stores.push_back({x->buffer.get(), index_key(x->indices)});
      collect_loads(x->value);
    }
  };
  walk(f.body);
  if (!why.empty()) return why;
  // Lanes run side by side only if no lane reads or writes an element another lane writes: every
  // access of a buffer written here is at the one element written.
  for (const auto& st : stores) {
    for (const auto* list : {&loads, &stores})
      for (const auto& a : *list)
        if (a.buffer == st.buffer && a.key != st.key)
          return "'" + st.buffer->name + "' is read or written at another element than the one stored";
  }
  return "";
}

/// A loop `for v in vectorized(e)` (v the loop's C name) as C++: when it cannot run in lanes (no
/// constant bounds, under 4 lanes, vector_obstacle), a scalar loop with a comment saying why
/// (given). Yours: one loop over chunks of w lanes, `for (v = lo; v < lo + chunked; v += w)`, whose
/// body is f.body emitted with vec_var_ (this loop's variable), vec_loop_var_ and vec_lanes_ set,
/// so that stores (vstore), expressions (vexpr) and guards (vif) in it work on w lanes starting at
/// v; then, when w does not divide e, the scalar tail `for (v = lo + chunked; v < lo + e; ++v)`: the
/// same body emitted again with vec_var_ null (scalar code). Hint: stmt(body, depth + 1, true)
/// emits a body; c_int_literal(n) writes n.
void Emitter::vector_loop(const For& f, int depth, const std::string& v) {
  const auto* mn = f.min.as<IntImm>();
  const auto* ex = f.extent.as<IntImm>();
  const std::string ext = expr(f.extent).s;
  std::string why;
  int w = m_.lanes;
  if (!mn || !ex) {
    why = "its bounds are not constants";
  } else {
    while (w > 1 && w > ex->value) w /= 2;
    if (m_.lanes == 1)
      why = "no SIMD: vector_lanes 1";
    else if (w < 4)
      why = "its extent is under 4 lanes";
  }
  if (why.empty()) why = vector_obstacle(f);
  ++in_vectorized_;
  if (!why.empty()) {
    line(depth, "// " + v + " in vectorized(" + ext + "): a scalar loop, " + why);
    serial_loop(f, depth, v);
    --in_vectorized_;
    return;
  }
  const std::int64_t e = ex->value, chunked = e - e % w;
  line(depth, "// " + v + " in vectorized(" + ext + "): chunks of " + std::to_string(w) + " lanes (mls_f32x" +
                  std::to_string(w) + ")" + (chunked < e ? ", then a scalar tail" : ""));
  // BEGIN SOLUTION
  const std::int64_t lo = mn->value;
  line(depth, "for (std::int64_t " + v + " = " + c_int_literal(lo) + "; " + v + " < " + c_int_literal(lo + chunked) +
                  "; " + v + " += " + std::to_string(w) + ") {");
  vec_var_ = f.var.get();
  vec_loop_var_ = f.var;
  vec_lanes_ = w;
  stmt(f.body, depth + 1, true);
  vec_var_ = nullptr;
  line(depth, "}");
  if (chunked < e) {
    line(depth, "for (std::int64_t " + v + " = " + c_int_literal(lo + chunked) + "; " + v + " < " +
                    c_int_literal(lo + e) + "; ++" + v + ") {");
    stmt(f.body, depth + 1, true);
    line(depth, "}");
  }
  // END SOLUTION
  --in_vectorized_;
}

std::string Emitter::splat(const CText& t, bool vec) const {
  return vec ? t.s : "mls_splat<" + vtype() + ">(" + t.s + ")";
}

CText Emitter::lanewise(const Expr& e) {
  const VarNode* v = vec_var_;
  const std::string base = var(v);
  const std::string t = fresh("mls_t");
  std::string lane = base + "_lane";
  for (int i = 1; taken_.count(lane) || active_.count(lane); ++i) lane = base + "_lane_" + std::to_string(i);
  names_[v].push_back(lane);
  active_.insert(lane);
  vec_var_ = nullptr;
  const std::string value = expr(e).s;
  vec_var_ = v;
  active_.erase(lane);
  names_[v].pop_back();
  pre_.push_back(vtype() + " " + t + " = {};  // lane by lane");
  pre_.push_back("for (std::int64_t " + lane + " = " + base + "; " + lane + " < " + base + " + " +
                 std::to_string(vec_lanes_) + "; ++" + lane + ") " + t + "[" + lane + " - " + base + "] = " + value +
                 ";");
  return {t, 16};
}

/// Expression `e` in a chunk of vec_lanes_ lanes of vec_var_: `vec` says whether the result is a
/// vector (mls_f32x<W>, vtype()) or one scalar for all lanes (e does not read vec_var_: the
/// scalar code of expr(e)). Yours: a load contiguous in vec_var_ (contiguous_in) is one
/// `mls_load<vtype()>(&element)` (element(buffer, indices, "load") is the C++ of the element at
/// the chunk's first lane); any other load, and any expression that is not float, is lanewise(e)
/// (computed lane by lane into a temporary); + - * / of two operands are the same operators on
/// vectors (a scalar operand is broadcast by GCC: wrap() keeps precedence right); min/max are
/// mls_vmin/mls_vmax of two vectors (splat a scalar operand); other binary operators lanewise.
/// Unary operators and select are given below.
CText Emitter::vexpr(const Expr& e, bool& vec) {
  vec = detail::uses_any(e, {vec_var_});
  if (!vec) return expr(e);
  // BEGIN SOLUTION
  if (const auto* l = e.as<Load>()) {
    if (contiguous_in(l->indices, vec_var_))
      return {"mls_load<" + vtype() + ">(&" + element(l->buffer.get(), l->indices, "load") + ")", 16};
    return lanewise(e);
  }
  if (e.dtype() != DType::Float) return lanewise(e);
  if (const auto* b = e.as<Binary>()) {
    bool va = false, vb = false;
    const char* op = b->op == BinaryOp::Add   ? " + "
                     : b->op == BinaryOp::Sub ? " - "
                     : b->op == BinaryOp::Mul ? " * "
                     : b->op == BinaryOp::Div ? " / "
                                              : nullptr;
    if (op) {
      const int p = b->op == BinaryOp::Add || b->op == BinaryOp::Sub ? 12 : 13;
      const CText a = vexpr(b->a, va), c = vexpr(b->b, vb);
      return {wrap(a, p) + op + wrap(c, p + 1), p};
    }
    if (b->op == BinaryOp::Min || b->op == BinaryOp::Max) {
      const CText a = vexpr(b->a, va), c = vexpr(b->b, vb);
      return {std::string(b->op == BinaryOp::Min ? "mls_vmin(" : "mls_vmax(") + splat(a, va) + ", " + splat(c, vb) + ")",
              16};
    }
    return lanewise(e);
  }
  // END SOLUTION
  if (const auto* u = e.as<Unary>()) {
    if (u->op == UnaryOp::ToFloat) return lanewise(e);
    bool va = false;
    const CText a = vexpr(u->a, va);
    switch (u->op) {
      case UnaryOp::Neg: return {a.s[0] == '-' ? "-(" + a.s + ")" : "-" + wrap(a, 15), 15};
      case UnaryOp::Exp:  // the unit's polynomial with CodegenOptions::fast_exp, else expf lane by lane
        return {(m_.options.fast_exp ? "mls_vexp_fast(" : "mls_vexp(") + splat(a, va) + ")", 16};
      case UnaryOp::Sqrt: return {"mls_vsqrt(" + splat(a, va) + ")", 16};
      case UnaryOp::Rsqrt: return {"mls_vrsqrt(" + splat(a, va) + ")", 16};
      case UnaryOp::Abs: return {"mls_vabs(" + splat(a, va) + ")", 16};
      default: return lanewise(e);
    }
  }
  if (const auto* s = e.as<Select>()) {
    // Only the chosen branch may be evaluated (a load of the other may be out of bounds): a
    // condition on the lanes, or a branch needing per-lane statements, makes it per-lane.
    if (detail::uses_any(s->cond, {vec_var_})) return lanewise(e);
    const std::size_t mark = pre_.size();
    bool va = false, vb = false;
    const CText a = vexpr(s->then_value, va), b = vexpr(s->else_value, vb);
    if (pre_.size() != mark) {
      pre_.resize(mark);
      return lanewise(e);
    }
    return {wrap(expr(s->cond), 4) + " ? " + splat(a, va) + " : " + splat(b, vb), 3};
  }
  return lanewise(e);
}

/// A store in a chunk: `mls_store(&element, value);` with element the store's element at the
/// chunk's first lane (element(buffer, indices, "store"); vector_obstacle made sure it is
/// contiguous) and value a vector: vexpr of the stored value, splat when it is a scalar. The
/// statements vexpr asked for (pre_: lane-by-lane temporaries) go first. A reduction's update
/// `X[i] = X[i] + v` (or `*`, the stored element read back at the same indices: index_key equal)
/// reads the chunk once: `mls_load<vtype()>(&element) + v`. Yours, all of it.
void Emitter::vstore(const Store& st, int depth) {
  // BEGIN SOLUTION
  pre_.clear();
  const std::string lhs = element(st.buffer.get(), st.indices, "store");
  std::string value;
  bool vec = false;
  if (const auto* b = st.value.as<Binary>(); b && (b->op == BinaryOp::Add || b->op == BinaryOp::Mul)) {
    if (const auto* l = b->a.as<Load>(); l && l->buffer == st.buffer && index_key(l->indices) == index_key(st.indices)) {
      const CText rhs = vexpr(b->b, vec);
      value = "mls_load<" + vtype() + ">(&" + lhs + ")" + (b->op == BinaryOp::Add ? " + " : " * ") + wrap(rhs, 14);
    }
  }
  if (value.empty()) {
    const CText rhs = vexpr(st.value, vec);
    value = splat(rhs, vec);
  }
  for (const auto& p : pre_) line(depth, p);
  pre_.clear();
  line(depth, "mls_store(&" + lhs + ", " + value + ");");
  // END SOLUTION
}

void Emitter::vif(const IfThenElse& i, int depth) {
  const VarNode* v = vec_var_;
  const std::string base = var(v);
  // The condition at the chunk's last lane, v + (lanes - 1).
  const Expr at_last =
      detail::simplify(detail::substitute(i.cond, {{v, Expr(vec_loop_var_) + Expr(vec_lanes_ - 1)}}));
  line(depth, "if (" + wrap(expr(i.cond), 6) + " && " + wrap(expr(at_last), 6) + ") {  // every lane");
  stmt(i.then_case, depth + 1, true);
  line(depth, "} else {  // lane by lane");
  std::string lane = base + "_lane";
  for (int k = 1; taken_.count(lane) || active_.count(lane); ++k) lane = base + "_lane_" + std::to_string(k);
  line(depth + 1, "for (std::int64_t " + lane + " = " + base + "; " + lane + " < " + base + " + " +
                      std::to_string(vec_lanes_) + "; ++" + lane + ") {");
  names_[v].push_back(lane);
  active_.insert(lane);
  vec_var_ = nullptr;
  line(depth + 2, "if (" + expr(i.cond).s + ") {");
  stmt(i.then_case, depth + 3, true);
  line(depth + 2, "}");
  vec_var_ = v;
  active_.erase(lane);
  names_[v].pop_back();
  line(depth + 1, "}");
  line(depth, "}");
}

namespace {
/// The unit's helper mls_transpose<w>(s, lds, d, ldd): d[i * ldd + j] = s[j * lds + i] for a w x w
/// block, through w vector registers: log2(w) rounds, the round of half-width h swapping the
/// h x h blocks off the diagonal of each 2h x 2h block (rows i and i + h exchange their halves by
/// one two-source shuffle each: __builtin_shufflevector, GCC 12 and clang).
std::string transpose_helper(int w) {
  const std::string v = "mls_f32x" + std::to_string(w), name = "mls_transpose" + std::to_string(w);
  std::string t = "// A " + std::to_string(w) + " x " + std::to_string(w) +
                  " block transposed through registers: d[i * ldd + j] = s[j * lds + i].\n"
                  "static inline __attribute__((always_inline)) void " + name +
                  "(const float* s, std::int64_t lds, float* d, std::int64_t ldd) {\n    " + v + " r[" +
                  std::to_string(w) + "];\n";
  t += "#pragma GCC unroll " + std::to_string(w) + "\n    for (int i = 0; i < " + std::to_string(w) +
       "; ++i) r[i] = mls_load<" + v + ">(s + i * lds);\n";
  for (int h = w / 2; h >= 1; h /= 2) {
    std::string lo, hi;  // row i (bit h clear) and row i + h after the round
    for (int j = 0; j < w; ++j) {
      const bool upper = (j / h) % 2 == 1;
      lo += (j ? ", " : "") + std::to_string(upper ? w + j - h : j);
      hi += (j ? ", " : "") + std::to_string(upper ? w + j : j + h);
    }
    t += "#pragma GCC unroll " + std::to_string(w) + "\n    for (int i = 0; i < " + std::to_string(w) +
         "; ++i) {  // blocks of " + std::to_string(h) + "\n";
    t += "        if (i & " + std::to_string(h) + ") continue;\n";
    t += "        const " + v + " a = r[i], b = r[i + " + std::to_string(h) + "];\n";
    t += "        r[i] = __builtin_shufflevector(a, b, " + lo + ");\n";
    t += "        r[i + " + std::to_string(h) + "] = __builtin_shufflevector(a, b, " + hi + ");\n    }\n";
  }
  t += "#pragma GCC unroll " + std::to_string(w) + "\n    for (int i = 0; i < " + std::to_string(w) +
       "; ++i) mls_store(d + i * ldd, r[i]);\n}\n\n";
  return t;
}
}  // namespace

bool Emitter::transpose_copy(const For& f, int depth) {
  const int w = m_.lanes;
  if (w < 4) return false;
  const Stmt* body = &f.body;
  while (const auto* q = body->as<Seq>()) {  // a block of one statement
    if (q->stmts.size() != 1) return false;
    body = &q->stmts.front();
  }
  const auto* g = body->as<For>();
  if (!g || g->kind != ForKind::Vectorized) return false;
  const auto* st = g->body.as<Store>();
  const auto* ld = st ? st->value.as<Load>() : nullptr;
  if (!ld || ld->buffer.get() == st->buffer.get()) return false;
  const auto *amin = f.min.as<IntImm>(), *aext = f.extent.as<IntImm>(), *bmin = g->min.as<IntImm>(),
             *bext = g->extent.as<IntImm>();
  if (!amin || !aext || !bmin || !bext || aext->value < w || bext->value < w) return false;
  const VarNode *a = f.var.get(), *b = g->var.get();
  BufVar& dv = buf(st->buffer.get(), "store");
  BufVar& sv = buf(ld->buffer.get(), "load");
  if (st->indices.size() != dv.shape.size() || ld->indices.size() != sv.shape.size()) return false;
  const Expr dflat = flat_index(dv, st->indices), sflat = flat_index(sv, ld->indices);
  // The coefficients of a and b in a flat index; false when a or b hides in another term.
  auto coeffs = [&](const Expr& flat, std::int64_t& ca, std::int64_t& cb) {
    ca = cb = 0;
    for (const auto& t : detail::to_affine(flat).terms) {
      if (t.var == a)
        ca = t.coeff;
      else if (t.var == b)
        cb = t.coeff;
      else if (detail::uses_any(t.atom, {a, b}))
        return false;
    }
    return true;
  };
  std::int64_t dca = 0, dcb = 0, sca = 0, scb = 0;
  if (!coeffs(dflat, dca, dcb) || !coeffs(sflat, sca, scb)) return false;
  if (dcb != 1 || sca != 1 || dca < 1 || scb < 1) return false;  // D[a * ldd + b], S[b * lds + a]
  const std::int64_t e0 = aext->value, e1 = bext->value, c1 = e1 - e1 % w;
  const bool parallel = f.kind == ForKind::Parallel;
  if (parallel && !parallel_conflict(f).empty()) return false;  // racy: parallel_loop says why and runs it serially
  const std::string helper = "mls_transpose" + std::to_string(w);
  if (!m_.intrinsic_names.count(helper)) {
    m_.intrinsic_names.insert(helper);
    m_.intrinsic_text += transpose_helper(w);
  }
  // The corner (a, b) = (min, min): the flat indices with the loops at their first values.
  const detail::VarMap first = {{a, Expr(amin->value)}, {b, Expr(bmin->value)}};
  const CText dbase = expr(detail::simplify(detail::substitute(dflat, first)));
  const CText sbase = expr(detail::simplify(detail::substitute(sflat, first)));
  const std::string ldd = c_int_literal(dca), lds = c_int_literal(scb), sn = sv.ident, dn = dv.ident;
  const std::string W = std::to_string(w);
  line(depth, "{  // " + a->name + ", " + b->name + ": a transposing copy " + dn + "[" + a->name + "][" + b->name +
                  "] = " + sn + "[" + b->name + "][" + a->name + "] in " + W + " x " + W +
                  " blocks through registers (" + helper + "), the edges element by element" +
                  (parallel ? "; blocks of " + W + " rows on the host's threads" : ""));
  line(depth + 1, "float* const mls_d = " + dn + (dbase.s == "0" ? "" : " + " + wrap(dbase, 13)) + ";");
  line(depth + 1, "const float* const mls_s = " + sn + (sbase.s == "0" ? "" : " + " + wrap(sbase, 13)) + ";");
  // W rows from mls_i: W x W blocks through registers, then the columns left.
  auto block = [&](int d) {
    line(d, "for (std::int64_t mls_j = 0; mls_j < " + c_int_literal(c1) + "; mls_j += " + W + ")");
    line(d + 1, helper + "(mls_s + mls_j * " + lds + " + mls_i, " + lds + ", mls_d + mls_i * " + ldd + " + mls_j, " + ldd +
                    ");");
    if (c1 < e1) {
      line(d, "for (std::int64_t mls_j = " + c_int_literal(c1) + "; mls_j < " + c_int_literal(e1) + "; ++mls_j)");
      line(d + 1, "for (std::int64_t mls_r = mls_i; mls_r < mls_i + " + W + "; ++mls_r) mls_d[mls_r * " + ldd +
                      " + mls_j] = mls_s[mls_j * " + lds + " + mls_r];");
    }
  };
  // The rows from mls_i to the end, element by element.
  auto tail = [&](int d) {
    line(d, "for (std::int64_t mls_r = mls_i; mls_r < " + c_int_literal(e0) + "; ++mls_r)");
    line(d + 1, "for (std::int64_t mls_j = 0; mls_j < " + c_int_literal(e1) + "; ++mls_j) mls_d[mls_r * " + ldd +
                    " + mls_j] = mls_s[mls_j * " + lds + " + mls_r];");
  };
  const std::int64_t whole = e0 / w, blocks = (e0 + w - 1) / w;
  if (!parallel) {
    line(depth + 1, "for (std::int64_t mls_q = 0; mls_q < " + c_int_literal(whole) + "; ++mls_q) {");
    line(depth + 2, "const std::int64_t mls_i = mls_q * " + W + ";");
    block(depth + 2);
    line(depth + 1, "}");
    if (whole < blocks) {
      line(depth + 1, "{");
      line(depth + 2, "const std::int64_t mls_i = " + c_int_literal(whole * w) + ";");
      tail(depth + 2);
      line(depth + 1, "}");
    }
  } else {
    uses_parallel_ = true;
    line(depth + 1, "auto mls_rows = [&](std::int64_t mls_b, std::int64_t mls_e) {  // blocks [mls_b, mls_e)");
    line(depth + 2, "for (std::int64_t mls_q = mls_b; mls_q < mls_e; ++mls_q) {");
    line(depth + 3, "if (mls_q < 0 || mls_q >= " + c_int_literal(blocks) + ") continue;  // never: the ranges cover the blocks");
    line(depth + 3, "const std::int64_t mls_i = mls_q * " + W + ";");
    if (whole < blocks) {
      line(depth + 3, "if (mls_q == " + c_int_literal(whole) + ") {  // the last rows");
      tail(depth + 4);
      line(depth + 4, "continue;");
      line(depth + 3, "}");
    }
    block(depth + 3);
    line(depth + 2, "}");
    line(depth + 1, "};");
    line(depth + 1, "mls_parallel(parallel_for, host, " + c_int_literal(blocks) + ", mls_rows);");
  }
  line(depth, "}");
  return true;
}

}  // namespace mls::kernels::te::codegen_detail
