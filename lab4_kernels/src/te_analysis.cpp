// Expression analysis for lowering: substitution, simplification, affine forms, bounds.
#include <algorithm>
#include <set>

#include "te_internal.hpp"

namespace mls::kernels::te::detail {

namespace {
Expr node(DType t, decltype(ExprNode::v) v) {
  return Expr(std::make_shared<const ExprNode>(ExprNode{t, std::move(v)}));
}

/// `e` with `f` applied to each direct child (the node itself when no child changed).
Expr map_children(const Expr& e, const std::function<Expr(const Expr&)>& f) {
  return std::visit(
      [&](const auto& n) -> Expr {
        using T = std::decay_t<decltype(n)>;
        if constexpr (std::is_same_v<T, Binary>) {
          Expr a = f(n.a), b = f(n.b);
          if (a.get() == n.a.get() && b.get() == n.b.get()) return e;
          return node(e.dtype(), Binary{n.op, a, b});
        } else if constexpr (std::is_same_v<T, Unary>) {
          Expr a = f(n.a);
          return a.get() == n.a.get() ? e : node(e.dtype(), Unary{n.op, a});
        } else if constexpr (std::is_same_v<T, Select>) {
          Expr c = f(n.cond), a = f(n.then_value), b = f(n.else_value);
          if (c.get() == n.cond.get() && a.get() == n.then_value.get() && b.get() == n.else_value.get())
            return e;
          return node(e.dtype(), Select{c, a, b});
        } else if constexpr (std::is_same_v<T, Load>) {
          std::vector<Expr> idx;
          bool same = true;
          for (const auto& i : n.indices) {
            idx.push_back(f(i));
            same = same && idx.back().get() == i.get();
          }
          return same ? e : node(e.dtype(), Load{n.buffer, std::move(idx)});
        } else if constexpr (std::is_same_v<T, Reduce>) {
          Expr s = f(n.source);
          return s.get() == n.source.get() ? e : node(e.dtype(), Reduce{n.combiner, s, n.axes});
        } else {
          return e;
        }
      },
      e->v);
}
}  // namespace

Expr substitute(const Expr& e, const VarMap& m) {
  if (!e.defined() || m.empty()) return e;
  if (const auto* v = e.as<VarRef>()) {
    auto it = m.find(v->var.get());
    return it == m.end() ? e : it->second;
  }
  return map_children(e, [&](const Expr& c) { return substitute(c, m); });
}

Expr rewrite_loads(const Expr& e, const std::function<Expr(const Load&)>& f) {
  if (!e.defined()) return e;
  Expr r = map_children(e, [&](const Expr& c) { return rewrite_loads(c, f); });
  if (const auto* l = r.as<Load>()) {
    Expr repl = f(*l);
    if (repl.defined()) return repl;
  }
  return r;
}

std::vector<const VarNode*> vars_of(const Expr& e) {
  std::vector<const VarNode*> out;
  if (!e.defined()) return out;
  for_each_expr(e, [&](const Expr& x) {
    if (const auto* v = x.as<VarRef>())
      if (std::find(out.begin(), out.end(), v->var.get()) == out.end()) out.push_back(v->var.get());
  });
  return out;
}

bool uses_any(const Expr& e, const std::vector<const VarNode*>& vars) {
  for (const auto* v : vars_of(e))
    if (std::find(vars.begin(), vars.end(), v) != vars.end()) return true;
  return false;
}

std::string structural_key(const Expr& e) {
  return expr_text(e, [](const VarNode* v) { return v->name + "#" + std::to_string(v->id); });
}

// ---- affine forms -------------------------------------------------------------------------

void Affine::add(const Term& t, std::int64_t scale) {
  const std::int64_t c = t.coeff * scale;
  if (c == 0) return;
  for (auto it = terms.begin(); it != terms.end(); ++it)
    if (it->key == t.key) {
      it->coeff += c;
      if (it->coeff == 0) terms.erase(it);
      return;
    }
  Term n = t;
  n.coeff = c;
  terms.push_back(std::move(n));
}

Affine to_affine(const Expr& e) {
  Affine out;
  auto atom = [&](const Expr& x) {
    Term t{x, structural_key(x), nullptr, 1};
    if (const auto* v = x.as<VarRef>()) t.var = v->var.get();
    out.add(t, 1);
    return out;
  };
  auto merge = [&](const Affine& a, std::int64_t scale) {
    for (const auto& t : a.terms) out.add(t, scale);
    out.constant += a.constant * scale;
  };
  if (const auto* i = e.as<IntImm>()) {
    out.constant = i->value;
    return out;
  }
  if (const auto* b = e.as<Binary>(); b && e.dtype() == DType::Int) {
    if (b->op == BinaryOp::Add || b->op == BinaryOp::Sub) {
      merge(to_affine(b->a), 1);
      merge(to_affine(b->b), b->op == BinaryOp::Add ? 1 : -1);
      return out;
    }
    if (b->op == BinaryOp::Mul) {
      Affine a = to_affine(b->a), c = to_affine(b->b);
      if (c.terms.empty()) {
        merge(a, c.constant);
        return out;
      }
      if (a.terms.empty()) {
        merge(c, a.constant);
        return out;
      }
    }
  }
  if (const auto* u = e.as<Unary>(); u && u->op == UnaryOp::Neg && e.dtype() == DType::Int) {
    merge(to_affine(u->a), -1);
    return out;
  }
  return atom(e);
}

Expr from_affine(const Affine& a) {
  // The first positive term leads (x - y rather than y*-1 + x); the others keep their order.
  std::vector<const Term*> order;
  for (const auto& t : a.terms)
    if (t.coeff > 0 && order.empty()) order.push_back(&t);
  for (const auto& t : a.terms)
    if (t.coeff != 0 && (order.empty() || &t != order[0])) order.push_back(&t);
  auto scaled = [](const Term& t) {
    const std::int64_t c = t.coeff > 0 ? t.coeff : -t.coeff;
    return c == 1 ? t.atom : node(DType::Int, Binary{BinaryOp::Mul, t.atom, Expr(c)});
  };
  Expr out;
  for (const Term* t : order) {
    if (!out.defined())
      out = t->coeff > 0 ? scaled(*t) : node(DType::Int, Unary{UnaryOp::Neg, scaled(*t)});
    else
      out = node(DType::Int, Binary{t->coeff > 0 ? BinaryOp::Add : BinaryOp::Sub, out, scaled(*t)});
  }
  if (!out.defined()) return Expr(a.constant);
  if (a.constant > 0) return node(DType::Int, Binary{BinaryOp::Add, out, Expr(a.constant)});
  if (a.constant < 0) return node(DType::Int, Binary{BinaryOp::Sub, out, Expr(-a.constant)});
  return out;
}

// ---- simplification -----------------------------------------------------------------------

Expr simplify(const Expr& e) {
  if (!e.defined()) return e;
  Expr s = map_children(e, [](const Expr& c) { return simplify(c); });
  if (const auto* b = s.as<Binary>()) {
    const auto* ia = b->a.as<IntImm>();
    const auto* ib = b->b.as<IntImm>();
    if (s.dtype() == DType::Int) {
      if (ia && ib && !((b->op == BinaryOp::Div || b->op == BinaryOp::Mod) && ib->value == 0))
        return Expr(apply_int(b->op, ia->value, ib->value));
      if (ib && ib->value == 1 && b->op == BinaryOp::Div) return b->a;
      if (ib && ib->value == 1 && b->op == BinaryOp::Mod) return Expr(0);
      if (b->op == BinaryOp::Add || b->op == BinaryOp::Sub || b->op == BinaryOp::Mul)
        return from_affine(to_affine(s));
    } else if (s.dtype() == DType::Float && !is_comparison(b->op)) {
      const auto* fa = b->a.as<FloatImm>();
      const auto* fb = b->b.as<FloatImm>();
      if (fa && fb) return Expr(apply_float(b->op, fa->value, fb->value));
    }
  }
  if (const auto* u = s.as<Unary>(); u && u->op == UnaryOp::Neg && s.dtype() == DType::Int)
    return from_affine(to_affine(s));
  return s;
}

// ---- interval bounds ----------------------------------------------------------------------

std::optional<Interval> bound(const Expr& e, const Ranges& ranges) {
  if (!e.defined() || e.dtype() != DType::Int) return std::nullopt;
  if (const auto* i = e.as<IntImm>()) return Interval{i->value, i->value};
  if (const auto* v = e.as<VarRef>()) {
    auto it = ranges.find(v->var.get());
    if (it == ranges.end()) return std::nullopt;
    return it->second;
  }
  if (const auto* u = e.as<Unary>(); u && u->op == UnaryOp::Neg) {
    auto a = bound(u->a, ranges);
    if (!a) return std::nullopt;
    return Interval{-a->hi, -a->lo};
  }
  if (const auto* s = e.as<Select>()) {
    auto a = bound(s->then_value, ranges), b = bound(s->else_value, ranges);
    if (!a || !b) return std::nullopt;
    return Interval{std::min(a->lo, b->lo), std::max(a->hi, b->hi)};
  }
  const auto* b = e.as<Binary>();
  if (!b) return std::nullopt;
  const auto* cb = b->b.as<IntImm>();
  if (b->op == BinaryOp::Mod && cb && cb->value > 0) {
    const std::int64_t c = cb->value;
    auto a = bound(b->a, ranges);
    if (a && floordiv(a->lo, c) == floordiv(a->hi, c)) return Interval{floormod(a->lo, c), floormod(a->hi, c)};
    return Interval{0, c - 1};
  }
  auto a = bound(b->a, ranges);
  auto c = bound(b->b, ranges);
  if (!a || !c) return std::nullopt;
  switch (b->op) {
    case BinaryOp::Add: return Interval{a->lo + c->lo, a->hi + c->hi};
    case BinaryOp::Sub: return Interval{a->lo - c->hi, a->hi - c->lo};
    case BinaryOp::Mul: {
      const std::int64_t p[4] = {a->lo * c->lo, a->lo * c->hi, a->hi * c->lo, a->hi * c->hi};
      return Interval{*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
    }
    case BinaryOp::Div:
      if (c->lo == c->hi && c->lo != 0) {
        const std::int64_t x = floordiv(a->lo, c->lo), y = floordiv(a->hi, c->lo);
        return Interval{std::min(x, y), std::max(x, y)};
      }
      return std::nullopt;
    case BinaryOp::Min: return Interval{std::min(a->lo, c->lo), std::min(a->hi, c->hi)};
    case BinaryOp::Max: return Interval{std::max(a->lo, c->lo), std::max(a->hi, c->hi)};
    default: return std::nullopt;
  }
}

}  // namespace mls::kernels::te::detail
