// The loop-nest IR: node builders, walkers, the printer and the reference intrinsics.
#include <set>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/kernels/loop_ir.hpp"
#include "te_internal.hpp"

namespace mls::kernels::te {

namespace {
Stmt snode(decltype(StmtNode::v) v) { return Stmt(std::make_shared<const StmtNode>(StmtNode{std::move(v)})); }

// ---- reference intrinsics -----------------------------------------------------------------
void gemm_update(float* const* p, const std::int64_t* s, const std::int64_t* e) {
  for (std::int64_t i = 0; i < e[0]; ++i)
    for (std::int64_t j = 0; j < e[1]; ++j) {
      float& out = p[0][i * s[0] + j * s[1]];
      float acc = out;
      for (std::int64_t k = 0; k < e[2]; ++k)
        acc += p[1][i * s[3] + j * s[4] + k * s[5]] * p[2][i * s[6] + j * s[7] + k * s[8]];
      out = acc;
    }
}

void gemm_reset(float* const* p, const std::int64_t* s, const std::int64_t* e) {
  for (std::int64_t i = 0; i < e[0]; ++i)
    for (std::int64_t j = 0; j < e[1]; ++j) p[0][i * s[0] + j * s[1]] = 0.0f;
}

/// dst = src over a tile of rank 1 to 4 (missing axes of extent 1).
template <int R>
void copy_update(float* const* p, const std::int64_t* s, const std::int64_t* e) {
  std::int64_t ext[4] = {1, 1, 1, 1}, sd[4] = {0, 0, 0, 0}, ss[4] = {0, 0, 0, 0};
  for (int t = 0; t < R; ++t) {
    ext[t] = e[t];
    sd[t] = s[t];
    ss[t] = s[R + t];
  }
  for (std::int64_t a = 0; a < ext[0]; ++a)
    for (std::int64_t b = 0; b < ext[1]; ++b)
      for (std::int64_t c = 0; c < ext[2]; ++c)
        for (std::int64_t d = 0; d < ext[3]; ++d)
          p[0][a * sd[0] + b * sd[1] + c * sd[2] + d * sd[3]] =
              p[1][a * ss[0] + b * ss[1] + c * ss[2] + d * ss[3]];
}

std::string dims_text(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + std::to_string(v[i]);
  return s;
}
}  // namespace

Intrinsic gemm_intrinsic(std::int64_t m, std::int64_t n, std::int64_t k, std::string name) {
  MLS_CHECK(m >= 1 && n >= 1 && k >= 1, "gemm_intrinsic: tile ", m, "x", n, "x", k,
            " must have extents >= 1");
  Intrinsic in;
  in.name = name.empty() ? "gemm" + dims_text({m, n, k}) + "_add" : std::move(name);
  in.pattern = IntrinsicPattern::Gemm;
  in.tile = {m, n, k};
  in.update = gemm_update;
  in.reset_name = "fill_zero" + dims_text({m, n});
  in.reset = gemm_reset;
  return in;
}

Intrinsic copy_intrinsic(std::vector<std::int64_t> extents, std::string name) {
  MLS_CHECK(!extents.empty() && extents.size() <= 4, "copy_intrinsic: ", extents.size(),
            " tile axes, expected 1 to 4");
  for (auto e : extents)
    MLS_CHECK(e >= 1, "copy_intrinsic: tile ", dims_text(extents), " must have extents >= 1");
  Intrinsic in;
  in.name = name.empty() ? "copy" + dims_text(extents) : std::move(name);
  in.pattern = IntrinsicPattern::Copy;
  static constexpr IntrinsicFn kCopy[] = {copy_update<1>, copy_update<2>, copy_update<3>, copy_update<4>};
  in.update = kCopy[extents.size() - 1];
  in.tile = std::move(extents);
  return in;
}

// ---- builders and walkers -----------------------------------------------------------------

const char* thread_tag_name(ThreadTag tag) {
  switch (tag) {
    case ThreadTag::BlockX: return "blockIdx.x";
    case ThreadTag::BlockY: return "blockIdx.y";
    case ThreadTag::BlockZ: return "blockIdx.z";
    case ThreadTag::ThreadX: return "threadIdx.x";
    case ThreadTag::ThreadY: return "threadIdx.y";
    case ThreadTag::ThreadZ: return "threadIdx.z";
    case ThreadTag::None: break;
  }
  return "none";
}

Stmt make_for(Var var, Expr min, Expr extent, ForKind kind, Stmt body, ThreadTag thread) {
  MLS_CHECK(var.defined() && min.defined() && extent.defined() && body.defined(),
            "make_for: an operand is undefined");
  MLS_CHECK((kind == ForKind::ThreadBinding) == (thread != ThreadTag::None), "make_for: loop '", var.name(),
            "' has thread tag ", thread_tag_name(thread), ": a ThreadBinding loop needs a tag, any other none");
  return snode(For{std::move(var), std::move(min), std::move(extent), kind, std::move(body), thread});
}
Stmt make_store(Buffer buffer, std::vector<Expr> indices, Expr value) {
  MLS_CHECK(buffer && value.defined(), "make_store: an operand is undefined");
  MLS_CHECK(indices.size() == buffer->shape.size(), "make_store: ", indices.size(),
            " indices for buffer '", buffer->name, "' of shape ", detail::shape_text(buffer->shape));
  return snode(Store{std::move(buffer), std::move(indices), std::move(value)});
}
Stmt make_allocate(Buffer buffer, Stmt body) {
  MLS_CHECK(buffer && body.defined(), "make_allocate: an operand is undefined");
  return snode(Allocate{std::move(buffer), std::move(body)});
}
Stmt make_seq(std::vector<Stmt> stmts) {
  std::vector<Stmt> flat;
  for (auto& s : stmts) {
    if (!s.defined()) continue;
    if (const auto* q = s.as<Seq>())
      flat.insert(flat.end(), q->stmts.begin(), q->stmts.end());
    else
      flat.push_back(std::move(s));
  }
  if (flat.size() == 1) return flat[0];
  return snode(Seq{std::move(flat)});
}
Stmt make_if(Expr cond, Stmt then_case, Stmt else_case) {
  MLS_CHECK(cond.defined() && then_case.defined(), "make_if: an operand is undefined");
  MLS_CHECK(cond.dtype() == DType::Bool, "make_if: the condition must be bool");
  return snode(IfThenElse{std::move(cond), std::move(then_case), std::move(else_case)});
}

void for_each_expr(const Expr& e, const std::function<void(const Expr&)>& f) {
  if (!e.defined()) return;
  f(e);
  std::visit(
      [&](const auto& n) {
        using T = std::decay_t<decltype(n)>;
        if constexpr (std::is_same_v<T, Binary>) {
          for_each_expr(n.a, f);
          for_each_expr(n.b, f);
        } else if constexpr (std::is_same_v<T, Unary>) {
          for_each_expr(n.a, f);
        } else if constexpr (std::is_same_v<T, Select>) {
          for_each_expr(n.cond, f);
          for_each_expr(n.then_value, f);
          for_each_expr(n.else_value, f);
        } else if constexpr (std::is_same_v<T, Load>) {
          for (const auto& i : n.indices) for_each_expr(i, f);
        } else if constexpr (std::is_same_v<T, Reduce>) {
          for_each_expr(n.source, f);
        }
      },
      e->v);
}

void for_each_stmt(const Stmt& s, const std::function<void(const Stmt&)>& f) {
  if (!s.defined()) return;
  f(s);
  if (const auto* x = s.as<For>()) for_each_stmt(x->body, f);
  if (const auto* x = s.as<Allocate>()) for_each_stmt(x->body, f);
  if (const auto* x = s.as<Seq>())
    for (const auto& c : x->stmts) for_each_stmt(c, f);
  if (const auto* x = s.as<IfThenElse>()) {
    for_each_stmt(x->then_case, f);
    for_each_stmt(x->else_case, f);
  }
}

void for_each_expr(const Stmt& s, const std::function<void(const Expr&)>& f) {
  for_each_stmt(s, [&](const Stmt& st) {
    if (const auto* x = st.as<For>()) {
      for_each_expr(x->min, f);
      for_each_expr(x->extent, f);
    } else if (const auto* x = st.as<Store>()) {
      for (const auto& i : x->indices) for_each_expr(i, f);
      for_each_expr(x->value, f);
    } else if (const auto* x = st.as<IfThenElse>()) {
      for_each_expr(x->cond, f);
    } else if (const auto* x = st.as<Call>()) {
      for (const auto& a : x->args)
        for (const auto& b : a.base) for_each_expr(b, f);
    }
  });
}

// ---- printer ------------------------------------------------------------------------------

namespace {
/// Gives each loop variable a printed name, unique among the loops around it: name, name_1, ...
class Names {
 public:
  std::string operator()(const VarNode* v) const {
    auto it = names_.find(v);
    return it == names_.end() ? v->name : it->second;
  }
  /// A loop binds `v` while its body prints.
  void enter(const VarNode* v) {
    std::string n = v->name;
    for (int i = 1; active_.count(n); ++i) n = v->name + "_" + std::to_string(i);
    active_.insert(n);
    names_[v] = n;
  }
  void leave(const VarNode* v) { active_.erase(names_.at(v)); }

 private:
  std::map<const VarNode*, std::string> names_;
  std::set<std::string> active_;
};

class Printer {
 public:
  std::string text() const { return os_.str(); }
  std::string expr(const Expr& e) {
    return detail::expr_text(e, [this](const VarNode* v) { return names_(v); });
  }

  void stmt(const Stmt& s, int depth) {
    const std::string pad(4 * depth, ' ');
    if (const auto* f = s.as<For>()) {
      const char* kind = f->kind == ForKind::Parallel        ? "parallel"
                         : f->kind == ForKind::Vectorized    ? "vectorized"
                         : f->kind == ForKind::Unrolled      ? "unrolled"
                         : f->kind == ForKind::ThreadBinding ? "thread_binding"
                                                             : "range";
      const auto* m = f->min.as<IntImm>();
      std::string range = m && m->value == 0 ? expr(f->extent)
                                             : expr(f->min) + ", " + expr(detail::simplify(f->min + f->extent));
      if (f->kind == ForKind::ThreadBinding) range += std::string(", \"") + thread_tag_name(f->thread) + "\"";
      names_.enter(f->var.get());
      os_ << pad << "for " << names_(f->var.get()) << " in " << kind << "(" << range << "):\n";
      stmt(f->body, depth + 1);
      names_.leave(f->var.get());
    } else if (const auto* st = s.as<Store>()) {
      std::string lhs = st->buffer->name;
      for (const auto& i : st->indices) lhs += "[" + expr(i) + "]";
      os_ << pad << lhs << store_rhs(*st, lhs) << "\n";
    } else if (const auto* a = s.as<Allocate>()) {
      std::string shape;
      for (std::size_t d = 0; d < a->buffer->shape.size(); ++d)
        shape += (d ? ", " : "") + std::to_string(a->buffer->shape[d]);
      if (a->buffer->shape.size() == 1) shape += ",";
      os_ << pad << a->buffer->name << " = allocate((" << shape << "), "
          << (a->buffer->scope == Scope::Local    ? "local"
              : a->buffer->scope == Scope::Shared ? "shared"
                                                  : "global")
          << (a->buffer->double_buffer ? ", double_buffer" : "") << ")\n";
      stmt(a->body, depth);
    } else if (const auto* q = s.as<Seq>()) {
      for (const auto& c : q->stmts) stmt(c, depth);
    } else if (const auto* i = s.as<IfThenElse>()) {
      os_ << pad << "if " << expr(i->cond) << ":\n";
      stmt(i->then_case, depth + 1);
      if (i->else_case.defined()) {
        os_ << pad << "else:\n";
        stmt(i->else_case, depth + 1);
      }
    } else if (const auto* c = s.as<Call>()) {
      call(*c, pad);
    }
  }

 private:
  /// " += v" for buf[i] = buf[i] + v (likewise *=), else " = value".
  std::string store_rhs(const Store& st, const std::string& lhs) {
    if (const auto* b = st.value.as<Binary>(); b && (b->op == BinaryOp::Add || b->op == BinaryOp::Mul)) {
      if (const auto* l = b->a.as<Load>(); l && l->buffer == st.buffer) {
        std::string self = l->buffer->name;
        for (const auto& i : l->indices) self += "[" + expr(i) + "]";
        if (self == lhs) return std::string(" ") + (b->op == BinaryOp::Add ? "+" : "*") + "= " + expr(b->b);
      }
    }
    return " = " + expr(st.value);
  }

  void call(const Call& c, const std::string& pad) {
    os_ << pad << (c.part == CallPart::Reset ? c.intrinsic->reset_name : c.intrinsic->name) << "(";
    for (std::size_t a = 0; a < c.args.size(); ++a) {
      if (c.part == CallPart::Reset && a > 0) break;
      const TileArg& arg = c.args[a];
      os_ << (a ? ", " : "") << arg.buffer->name;
      for (std::size_t d = 0; d < arg.base.size(); ++d) {
        std::int64_t span = 1;
        for (std::size_t t = 0; t < c.extents.size(); ++t) {
          const std::int64_t k = arg.coeff[d][t];
          span += (k < 0 ? -k : k) * (c.extents[t] - 1);
        }
        os_ << "[" << expr(arg.base[d]) << ":" << expr(detail::simplify(arg.base[d] + Expr(span))) << "]";
      }
    }
    os_ << ")\n";
  }

  Names names_;
  std::ostringstream os_;
};
}  // namespace

std::string to_string(const Stmt& s) {
  Printer p;
  p.stmt(s, 0);
  return p.text();
}

std::string to_string(const LoweredFunc& f) {
  Printer p;
  std::string head = "def " + f.name + "(";
  for (std::size_t i = 0; i < f.args.size(); ++i)
    head += (i ? ", " : "") + f.args[i]->name + ": float32" + detail::shape_text(f.args[i]->shape) +
            (f.args[i]->strides.empty() ? "" : " strides " + detail::shape_text(f.args[i]->strides));
  head += "):\n";
  p.stmt(f.body, 1);
  return head + p.text();
}

}  // namespace mls::kernels::te
