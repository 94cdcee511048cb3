// The interpreter of the loop-nest IR (compiled first to flat node arrays with variable slots
// and precomputed buffer strides), and the naive evaluator of tensor expressions.
#include <limits>
#include <set>
#include <unordered_map>

#include "mls/common/error.hpp"
#include "mls/kernels/loop_ir.hpp"
#include "te_internal.hpp"

namespace mls::kernels::te {

namespace {

std::string index_text(const std::vector<std::int64_t>& idx) {
  std::string s;
  for (auto i : idx) s += "[" + std::to_string(i) + "]";
  return s;
}

struct BufInfo {
  const BufferNode* node = nullptr;
  std::vector<std::int64_t> strides;
  std::int64_t size = 1;
  float* data = nullptr;
  std::vector<float> storage;
  bool allocated = false;  // made by an Allocate of the program
};

enum class EK : std::uint8_t { IConst, FConst, Var, BinI, BinF, CmpF, UnI, UnF, ToF, Sel, Load };
struct CExpr {
  EK k = EK::IConst;
  BinaryOp bop = BinaryOp::Add;
  UnaryOp uop = UnaryOp::Neg;
  int a = -1, b = -1, c = -1;
  std::int64_t i = 0;
  float f = 0;
  int slot = -1, buf = -1, idx0 = 0, nidx = 0;
};

enum class SK : std::uint8_t { For, Store, Alloc, Seq, If, Call };
struct CStmt {
  SK k = SK::Seq;
  int slot = -1, min = -1, extent = -1, body = -1;
  int buf = -1, idx0 = 0, nidx = 0, value = -1;
  int cond = -1, then_s = -1, else_s = -1;
  int call = -1;
  std::vector<int> kids;
};

struct CArg {
  int buf = -1;
  std::vector<int> base;                          // expression per dimension
  std::vector<std::vector<std::int64_t>> coeff;   // [dim][tile axis]
};
struct CCall {
  IntrinsicFn fn = nullptr;
  std::string name;
  std::vector<CArg> args;
  std::vector<std::int64_t> extents;
};

class Machine {
 public:
  explicit Machine(const Stmt& body) { root_ = stmt(body); }

  void bind(const Bindings& b) {
    for (auto& info : bufs_) {
      if (info.allocated) continue;
      const std::span<float>* s = b.find(info.node);
      MLS_CHECK(s, "interpret: buffer '", info.node->name, "' is not bound");
      MLS_CHECK(static_cast<std::int64_t>(s->size()) == info.size, "interpret: buffer '", info.node->name,
                "' is bound to ", s->size(), " floats, its shape ", detail::layout_text(*info.node),
                " needs ", info.size);
      info.data = s->data();
    }
  }
  void run() {
    env_.assign(static_cast<std::size_t>(nslots_), 0);
    exec(root_);
  }

 private:
  // ---- compilation ----
  int buffer(const Buffer& b) {
    auto it = buf_ids_.find(b.get());
    if (it != buf_ids_.end()) return it->second;
    BufInfo info;
    info.node = b.get();
    info.strides = buffer_strides(*b);
    info.size = buffer_span(*b);
    bufs_.push_back(std::move(info));
    return buf_ids_[b.get()] = static_cast<int>(bufs_.size()) - 1;
  }

  int expr(const Expr& e) {
    CExpr c;
    const bool is_float = e.dtype() == DType::Float;
    if (const auto* x = e.as<IntImm>()) {
      c.k = EK::IConst;
      c.i = x->value;
    } else if (const auto* x = e.as<FloatImm>()) {
      c.k = EK::FConst;
      c.f = x->value;
    } else if (const auto* x = e.as<VarRef>()) {
      auto it = active_.find(x->var.get());
      MLS_CHECK(it != active_.end(), "interpret: variable '", x->var.name(), "' is not bound by any loop around it");
      c.k = EK::Var;
      c.slot = it->second;
    } else if (const auto* x = e.as<Binary>()) {
      c.bop = x->op;
      c.k = x->a.dtype() != DType::Float ? EK::BinI : detail::is_comparison(x->op) ? EK::CmpF : EK::BinF;
      c.a = expr(x->a);
      c.b = expr(x->b);
    } else if (const auto* x = e.as<Unary>()) {
      c.uop = x->op;
      c.k = x->op == UnaryOp::ToFloat ? EK::ToF : is_float ? EK::UnF : EK::UnI;
      c.a = expr(x->a);
    } else if (const auto* x = e.as<Select>()) {
      c.k = EK::Sel;
      c.a = expr(x->cond);
      c.b = expr(x->then_value);
      c.c = expr(x->else_value);
    } else if (const auto* x = e.as<Load>()) {
      c.k = EK::Load;
      c.buf = buffer(x->buffer);
      c.idx0 = index_list(x->indices);
      c.nidx = static_cast<int>(x->indices.size());
    } else {
      fail("interpret: a reduction (", to_string(e), ") cannot be interpreted; lower the schedule first");
    }
    exprs_.push_back(c);
    return static_cast<int>(exprs_.size()) - 1;
  }

  int index_list(const std::vector<Expr>& idx) {
    std::vector<int> ids;
    for (const auto& i : idx) ids.push_back(expr(i));
    const int first = static_cast<int>(index_pool_.size());
    index_pool_.insert(index_pool_.end(), ids.begin(), ids.end());
    return first;
  }

  int stmt(const Stmt& s) {
    CStmt c;
    if (const auto* x = s.as<For>()) {
      c.k = SK::For;
      MLS_CHECK(!active_.count(x->var.get()), "interpret: loop variable '", x->var.name(),
                "' is bound twice in nested loops");
      c.min = expr(x->min);
      c.extent = expr(x->extent);
      c.slot = nslots_++;
      active_[x->var.get()] = c.slot;
      c.body = stmt(x->body);
      active_.erase(x->var.get());
    } else if (const auto* x = s.as<Store>()) {
      c.k = SK::Store;
      c.buf = buffer(x->buffer);
      c.idx0 = index_list(x->indices);
      c.nidx = static_cast<int>(x->indices.size());
      c.value = expr(x->value);
    } else if (const auto* x = s.as<Allocate>()) {
      c.k = SK::Alloc;
      c.buf = buffer(x->buffer);
      bufs_[static_cast<std::size_t>(c.buf)].allocated = true;
      c.body = stmt(x->body);
    } else if (const auto* x = s.as<Seq>()) {
      c.k = SK::Seq;
      for (const auto& k : x->stmts) c.kids.push_back(stmt(k));
    } else if (const auto* x = s.as<IfThenElse>()) {
      c.k = SK::If;
      c.cond = expr(x->cond);
      c.then_s = stmt(x->then_case);
      c.else_s = x->else_case.defined() ? stmt(x->else_case) : -1;
    } else if (const auto* x = s.as<Call>()) {
      c.k = SK::Call;
      CCall cc;
      cc.fn = x->part == CallPart::Reset ? x->intrinsic->reset : x->intrinsic->update;
      cc.name = x->part == CallPart::Reset ? x->intrinsic->reset_name : x->intrinsic->name;
      MLS_CHECK(cc.fn, "interpret: intrinsic '", cc.name, "' has no implementation");
      cc.extents = x->extents;
      for (const auto& a : x->args) {
        CArg ca;
        ca.buf = buffer(a.buffer);
        for (const auto& b : a.base) ca.base.push_back(expr(b));
        ca.coeff = a.coeff;
        cc.args.push_back(std::move(ca));
      }
      calls_.push_back(std::move(cc));
      c.call = static_cast<int>(calls_.size()) - 1;
    }
    stmts_.push_back(std::move(c));
    return static_cast<int>(stmts_.size()) - 1;
  }

  // ---- execution ----
  std::int64_t ev_i(int n) {
    const CExpr& c = exprs_[static_cast<std::size_t>(n)];
    switch (c.k) {
      case EK::IConst: return c.i;
      case EK::Var: return env_[static_cast<std::size_t>(c.slot)];
      case EK::BinI: {
        const std::int64_t a = ev_i(c.a);
        if (c.bop == BinaryOp::And && !a) return 0;
        if (c.bop == BinaryOp::Or && a) return 1;
        return detail::apply_int(c.bop, a, ev_i(c.b));
      }
      case EK::CmpF: return detail::compare_float(c.bop, ev_f(c.a), ev_f(c.b));
      case EK::UnI: {
        const std::int64_t a = ev_i(c.a);
        return c.uop == UnaryOp::Neg ? -a : c.uop == UnaryOp::Not ? !a : (a < 0 ? -a : a);
      }
      case EK::Sel: return ev_i(c.a) ? ev_i(c.b) : ev_i(c.c);
      default: return 0;
    }
  }

  float ev_f(int n) {
    const CExpr& c = exprs_[static_cast<std::size_t>(n)];
    switch (c.k) {
      case EK::FConst: return c.f;
      case EK::BinF: return detail::apply_float(c.bop, ev_f(c.a), ev_f(c.b));
      case EK::UnF: return detail::apply_unary_float(c.uop, ev_f(c.a));
      case EK::ToF: return static_cast<float>(ev_i(c.a));
      case EK::Sel: return ev_i(c.a) ? ev_f(c.b) : ev_f(c.c);
      case EK::Load: return bufs_[static_cast<std::size_t>(c.buf)].data[offset(c.buf, c.idx0, c.nidx, "load")];
      default: return 0;
    }
  }

  std::int64_t offset(int buf, int idx0, int nidx, const char* what) {
    BufInfo& b = bufs_[static_cast<std::size_t>(buf)];
    std::int64_t off = 0;
    for (int d = 0; d < nidx; ++d) {
      const std::int64_t i = ev_i(index_pool_[static_cast<std::size_t>(idx0 + d)]);
      if (i < 0 || i >= b.node->shape[static_cast<std::size_t>(d)]) [[unlikely]] {
        std::vector<std::int64_t> all;
        for (int e = 0; e < nidx; ++e) all.push_back(ev_i(index_pool_[static_cast<std::size_t>(idx0 + e)]));
        fail("interpret: ", what, " ", b.node->name, index_text(all), " is out of bounds of shape ",
             detail::shape_text(b.node->shape));
      }
      off += i * b.strides[static_cast<std::size_t>(d)];
    }
    MLS_CHECK(b.data, "interpret: buffer '", b.node->name, "' is used outside its Allocate");
    return off;
  }

  void call(const CCall& cc) {
    const std::size_t rank = cc.extents.size();
    std::vector<float*> ptrs;
    std::vector<std::int64_t> strides;
    for (const auto& a : cc.args) {
      BufInfo& b = bufs_[static_cast<std::size_t>(a.buf)];
      MLS_CHECK(b.data, "interpret: buffer '", b.node->name, "' is used outside its Allocate");
      std::int64_t off = 0;
      std::vector<std::int64_t> st(rank, 0);
      for (std::size_t d = 0; d < a.base.size(); ++d) {
        const std::int64_t base = ev_i(a.base[d]);
        std::int64_t lo = base, hi = base;
        for (std::size_t t = 0; t < rank; ++t) {
          const std::int64_t span = a.coeff[d][t] * (cc.extents[t] - 1);
          (span < 0 ? lo : hi) += span;
          st[t] += a.coeff[d][t] * b.strides[d];
        }
        MLS_CHECK(lo >= 0 && hi < b.node->shape[d], "interpret: ", cc.name, ": the window of '", b.node->name,
                  "' spans [", lo, ", ", hi, "] in dimension ", d, ", out of bounds of shape ",
                  detail::shape_text(b.node->shape));
        off += base * b.strides[d];
      }
      ptrs.push_back(b.data + off);
      strides.insert(strides.end(), st.begin(), st.end());
    }
    cc.fn(ptrs.data(), strides.data(), cc.extents.data());
  }

  void exec(int n) {
    const CStmt& c = stmts_[static_cast<std::size_t>(n)];
    switch (c.k) {
      case SK::For: {
        const std::int64_t lo = ev_i(c.min), hi = lo + ev_i(c.extent);
        std::int64_t& v = env_[static_cast<std::size_t>(c.slot)];
        for (std::int64_t i = lo; i < hi; ++i) {
          v = i;
          exec(c.body);
        }
        break;
      }
      case SK::Store: {
        const float value = ev_f(c.value);
        const std::int64_t off = offset(c.buf, c.idx0, c.nidx, "store");
        bufs_[static_cast<std::size_t>(c.buf)].data[off] = value;
        break;
      }
      case SK::Alloc: {
        BufInfo& b = bufs_[static_cast<std::size_t>(c.buf)];
        b.storage.assign(static_cast<std::size_t>(b.size), std::numeric_limits<float>::quiet_NaN());
        b.data = b.storage.data();
        exec(c.body);
        bufs_[static_cast<std::size_t>(c.buf)].data = nullptr;
        break;
      }
      case SK::Seq:
        for (int k : c.kids) exec(k);
        break;
      case SK::If:
        if (ev_i(c.cond))
          exec(c.then_s);
        else if (c.else_s >= 0)
          exec(c.else_s);
        break;
      case SK::Call: call(calls_[static_cast<std::size_t>(c.call)]); break;
    }
  }

  std::vector<CExpr> exprs_;
  std::vector<int> index_pool_;
  std::vector<CStmt> stmts_;
  std::vector<CCall> calls_;
  std::vector<BufInfo> bufs_;
  std::map<const BufferNode*, int> buf_ids_;
  std::map<const VarNode*, int> active_;
  std::vector<std::int64_t> env_;
  int nslots_ = 0;
  int root_ = -1;
};

}  // namespace

void interpret(const Stmt& body, const Bindings& buffers) {
  MLS_CHECK(body.defined(), "interpret: the statement is undefined");
  Machine m(body);
  m.bind(buffers);
  m.run();
}

void interpret(const LoweredFunc& f, const Bindings& buffers) {
  for (const auto& a : f.args)
    MLS_CHECK(buffers.find(a.get()), "interpret: argument '", a->name, "' of '", f.name, "' is not bound");
  interpret(f.body, buffers);
}

// ---- naive evaluation of the definitions ---------------------------------------------------

namespace {
class Naive {
 public:
  std::unordered_map<const BufferNode*, float*> data;
  std::unordered_map<const VarNode*, std::int64_t> env;
  float prior = 0;  // the output element's value before its compute (an accumulating reduction starts there)

  std::int64_t ev_i(const Expr& e) {
    if (const auto* x = e.as<IntImm>()) return x->value;
    if (const auto* x = e.as<VarRef>()) return env.at(x->var.get());
    if (const auto* x = e.as<Binary>()) {
      if (x->a.dtype() == DType::Float) return detail::compare_float(x->op, ev_f(x->a), ev_f(x->b));
      const std::int64_t a = ev_i(x->a);
      if (x->op == BinaryOp::And && !a) return 0;
      if (x->op == BinaryOp::Or && a) return 1;
      return detail::apply_int(x->op, a, ev_i(x->b));
    }
    if (const auto* x = e.as<Unary>()) {
      const std::int64_t a = ev_i(x->a);
      return x->op == UnaryOp::Neg ? -a : x->op == UnaryOp::Not ? !a : (a < 0 ? -a : a);
    }
    if (const auto* x = e.as<Select>()) return ev_i(x->cond) ? ev_i(x->then_value) : ev_i(x->else_value);
    fail("evaluate_naive: cannot evaluate ", to_string(e), " as an integer");
  }

  float ev_f(const Expr& e) {
    if (const auto* x = e.as<FloatImm>()) return x->value;
    if (const auto* x = e.as<Binary>()) return detail::apply_float(x->op, ev_f(x->a), ev_f(x->b));
    if (const auto* x = e.as<Unary>())
      return x->op == UnaryOp::ToFloat ? static_cast<float>(ev_i(x->a)) : detail::apply_unary_float(x->op, ev_f(x->a));
    if (const auto* x = e.as<Select>()) return ev_i(x->cond) ? ev_f(x->then_value) : ev_f(x->else_value);
    if (const auto* x = e.as<Load>()) {
      const auto& shape = x->buffer->shape;
      const std::vector<std::int64_t> strides = buffer_strides(*x->buffer);
      std::int64_t off = 0;
      std::vector<std::int64_t> idx;
      for (const auto& i : x->indices) idx.push_back(ev_i(i));
      for (std::size_t d = 0; d < shape.size(); ++d) {
        MLS_CHECK(idx[d] >= 0 && idx[d] < shape[d], "evaluate_naive: load ", x->buffer->name, index_text(idx),
                  " is out of bounds of shape ", detail::shape_text(shape));
        off += idx[d] * strides[d];
      }
      return data.at(x->buffer.get())[off];
    }
    if (const auto* x = e.as<Reduce>()) {
      float acc = x->combiner.accumulate ? prior : x->combiner.init;
      std::vector<std::int64_t> pt(x->axes.size(), 0);
      for (const auto& a : x->axes) env[a.var().get()] = 0;
      while (true) {
        const float v = ev_f(x->source);
        acc = x->combiner.op == BinaryOp::Mul ? acc * v : detail::apply_float(x->combiner.op, acc, v);
        std::size_t d = pt.size();
        while (d-- > 0) {
          if (++pt[d] < x->axes[d].extent()) break;
          pt[d] = 0;
        }
        for (std::size_t i = 0; i < pt.size(); ++i) env[x->axes[i].var().get()] = pt[i];
        if (d == static_cast<std::size_t>(-1)) return acc;
      }
    }
    fail("evaluate_naive: cannot evaluate ", to_string(e), " as a float");
  }
};
}  // namespace

void evaluate_naive(const std::vector<Tensor>& outputs, const Bindings& buffers) {
  Naive nv;
  std::vector<std::vector<float>> temps;
  for (const auto& t : outputs)
    MLS_CHECK(t.defined() && buffers.find(t.buffer().get()), "evaluate_naive: output '",
              t.defined() ? t.name() : "?", "' is not bound");
  const std::vector<Tensor> order = topo_order(outputs);
  for (const Tensor& t : order) {
    const std::int64_t size = buffer_span(*t.buffer());
    const std::span<float>* s = buffers.find(t.buffer().get());
    MLS_CHECK(s || t.op(), "evaluate_naive: placeholder '", t.name(), "' is not bound");
    const auto* red = t.op() ? t.op()->body.as<Reduce>() : nullptr;
    MLS_CHECK(s || !red || !red->combiner.accumulate, "evaluate_naive: '", t.name(),
              "' accumulates into its own value (sum_into) but is not bound: only an output can");
    if (s) {
      MLS_CHECK(static_cast<std::int64_t>(s->size()) == size, "evaluate_naive: buffer '", t.name(),
                "' is bound to ", s->size(), " floats, its shape ", detail::layout_text(*t.buffer()), " needs ", size);
      nv.data[t.buffer().get()] = s->data();
    } else {
      temps.emplace_back(static_cast<std::size_t>(size));
      nv.data[t.buffer().get()] = temps.back().data();
    }
  }
  for (const Tensor& t : order) {
    if (!t.op()) continue;
    const auto& axes = t.op()->axes;
    float* out = nv.data.at(t.buffer().get());
    const std::vector<std::int64_t> strides = buffer_strides(*t.buffer());
    std::vector<std::int64_t> pt(axes.size(), 0);
    for (;;) {
      std::int64_t off = 0;
      for (std::size_t d = 0; d < axes.size(); ++d) {
        nv.env[axes[d].var().get()] = pt[d];
        off += pt[d] * strides[d];
      }
      nv.prior = out[off];
      out[off] = nv.ev_f(t.op()->body);
      std::size_t d = pt.size();
      while (d-- > 0) {
        if (++pt[d] < axes[d].extent()) break;
        pt[d] = 0;
      }
      if (d == static_cast<std::size_t>(-1)) break;
    }
  }
}

}  // namespace mls::kernels::te
