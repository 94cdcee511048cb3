// Control flow in graphs (control.hpp): cond and while_loop, eagerly (the host's control flow) and
// as graph nodes holding sub-graphs; their registry entries: forward (the sub-graphs run by lab 2's
// Executor), shape inference, gradient rules (cond over the branches' backward sub-graphs; the
// loop's reverse replay, `while_backward_replay` in control.cpp, a student task) and forward-mode
// rules (the tangents through the branch taken, or through the body once per iteration).
// Not a student file.
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>

#include "mls/autodiff/control.hpp"
#include "mls/autodiff/forward.hpp"
#include "ops_internal.hpp"

namespace mls::autodiff {

namespace {

using ops::Grads;
using ops::InNodes;
using ops::Ins;
using ops::Needs;

/// The backward sub-graph of one sub-graph, built into the same Graph by gradients(): one adjoint
/// placeholder per floating output, and d(sum_k <out_k, adj_k>)/d(input) per floating input.
struct Vjp {
  bool built = false;
  std::vector<Var> adjoints;  // per output (undefined: not floating)
  std::vector<Var> grads;     // per input of the sub-graph (undefined: no gradient)
};
/// The last run of a control node (key: its input values), shared by the nodes of its outputs,
/// so a loop with N state tensors runs once, not N times; the loop's saved states live here.
struct Memo {
  std::vector<Tensor> key;
  std::vector<Tensor> result;
  std::vector<std::vector<Tensor>> stack;  // while_loop with saves_states: the T + 1 states
  bool has_stack = false;
};
struct Entry {
  ControlFlow cf;
  std::recursive_mutex mu;
  std::vector<Vjp> vjp;  // one per sub-graph
  std::map<std::string, Memo> memos;
  std::int64_t trips = -1;
};

std::mutex g_table_mu;
std::unordered_map<std::int64_t, std::shared_ptr<Entry>> g_table;  // lives for the process
std::int64_t g_next_id = 1;

std::shared_ptr<Entry> find_entry(std::int64_t id) {
  std::lock_guard<std::mutex> lock(g_table_mu);
  auto it = g_table.find(id);
  return it == g_table.end() ? nullptr : it->second;
}
Entry& entry(const Attrs& a, const char* op) {
  const std::int64_t id = a.i("body");
  std::shared_ptr<Entry> e = find_entry(id);
  MLS_CHECK(e != nullptr, op, ": sub-graph ", id,
            " is not in this process (control nodes hold their sub-graphs in memory; they cannot be read from a file)");
  return *e;
}
std::size_t at(const Attrs& a, const char* key) { return static_cast<std::size_t>(a.i(key)); }

std::string describe(const Shape& s, DType d) {
  std::ostringstream os;
  os << shape_str(s) << ' ' << d;
  return os.str();
}
/// A predicate must be 0-d (bool or a number): checked on a shape.
void check_pred_shape(const char* op, const Shape& s, DType d) {
  MLS_CHECK(s.empty(), op, ": the predicate must be a 0-d scalar (bool or number), got ", describe(s, d));
}
bool truthy(const char* op, const Tensor& p) {
  check_pred_shape(op, p.shape(), p.dtype());
  return p.item() != 0.0;
}

bool same_values(const std::vector<Tensor>& key, Ins in) {
  if (key.size() != in.size()) return false;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (key[i].dtype() != in[i].dtype() || key[i].shape() != in[i].shape() || !mls::equal(key[i], in[i])) return false;
  return true;
}
/// The memo `kind` of `e` when its key equals `in`, else nullptr.
Memo* lookup(Entry& e, const std::string& kind, Ins in) {
  auto it = e.memos.find(kind);
  return it != e.memos.end() && same_values(it->second.key, in) ? &it->second : nullptr;
}
Memo& store(Entry& e, const std::string& kind, Ins in) {
  Memo& m = e.memos[kind];
  m = Memo{};
  for (const Tensor& t : in) m.key.push_back(t.clone());  // inputs may sit in buffers reused later
  return m;
}

/// Runs `fetches` of a sub-graph with its inputs fed from `in` (operands, then captures) plus `extra`.
std::vector<Tensor> run_sub(const SubGraph& sg, Ins in, const std::vector<Var>& fetches, Feeds extra = {}) {
  for (std::size_t i = 0; i < sg.inputs.size() && i < in.size(); ++i)
    if (sg.inputs[i].defined()) extra.emplace_back(sg.inputs[i], in[i]);
  return Executor(*sg.graph).run(fetches, extra);
}

/// Builds the backward sub-graph of sub-graph `s` of `e` (once; caller holds e.mu).
Vjp& vjp_of(Entry& e, std::size_t s) {
  Vjp& v = e.vjp.at(s);
  if (v.built) return v;
  SubGraph& sg = e.cf.subs.at(s);
  Graph& g = *sg.graph;
  Var loss;
  v.adjoints.assign(sg.outputs.size(), Var());
  for (std::size_t k = 0; k < sg.outputs.size(); ++k) {
    const Var& o = sg.outputs[k];
    if (!is_floating(o.dtype())) continue;
    v.adjoints[k] = g.placeholder("adjoint" + std::to_string(k), o.shape(), o.dtype());
    const Var term = sum(o * v.adjoints[k]);
    loss = loss.defined() ? loss + term : term;
  }
  std::vector<Var> wrt;
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < sg.inputs.size(); ++i)
    if (sg.inputs[i].defined() && is_floating(sg.inputs[i].dtype())) {
      wrt.push_back(sg.inputs[i]);
      where.push_back(i);
    }
  v.grads.assign(sg.inputs.size(), Var());
  if (loss.defined() && !wrt.empty()) {
    const std::vector<Var> gs = gradients(loss, wrt);
    for (std::size_t j = 0; j < gs.size(); ++j) v.grads[where[j]] = gs[j];
  }
  v.built = true;
  return v;
}

/// Runs sub-graph `s`'s VJP: adjoints of every input (zeros where none flows), given the input
/// values `in` and one adjoint per output.
std::vector<Tensor> run_vjp(Entry& e, std::size_t s, Ins in, const std::vector<Tensor>& adj) {
  Vjp& v = vjp_of(e, s);
  const SubGraph& sg = e.cf.subs[s];
  Feeds extra;
  for (std::size_t k = 0; k < v.adjoints.size(); ++k)
    if (v.adjoints[k].defined()) extra.emplace_back(v.adjoints[k], adj.at(k));
  std::vector<Var> fetch;
  for (const Var& g : v.grads)
    if (g.defined()) fetch.push_back(g);
  const std::vector<Tensor> vals = fetch.empty() ? std::vector<Tensor>{} : run_sub(sg, in, fetch, extra);
  std::vector<Tensor> out;
  std::size_t j = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (i < v.grads.size() && v.grads[i].defined()) out.push_back(vals[j++]);
    else out.push_back(Tensor::zeros(in[i].shape(), in[i].dtype()));
  }
  return out;
}

// ---- while_loop ---------------------------------------------------------------------------------
constexpr std::size_t kCond = 0, kBody = 1;

void check_step(std::size_t k, const Tensor& before, const Tensor& after, std::int64_t it) {
  MLS_CHECK(before.shape() == after.shape() && before.dtype() == after.dtype(), "while_loop: the body changes state ",
            k, " from ", describe(before.shape(), before.dtype()), " to ", describe(after.shape(), after.dtype()),
            " (iteration ", it, ")");
}

/// Runs the loop on `in` (state, then captures) once per distinct input; with `need_stack` the
/// memo also holds the T + 1 states. Caller holds e.mu.
Memo& run_while(Entry& e, Ins in, bool need_stack) {
  if (Memo* m = lookup(e, "fwd", in); m && (m->has_stack || !need_stack)) return *m;
  const bool save = need_stack || e.cf.saves_states;
  const std::size_t n = e.cf.num_operands;
  std::vector<Tensor> x(in.begin(), in.end());
  Memo& m = store(e, "fwd", in);
  for (std::size_t k = 0; k < n; ++k) x[k] = m.key[k];
  if (save) m.stack.emplace_back(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
  const SubGraph& cg = e.cf.subs[kCond];
  const SubGraph& bg = e.cf.subs[kBody];
  std::int64_t it = 0;
  for (;; ++it) {
    if (!truthy("while_loop", run_sub(cg, x, cg.outputs).at(0))) break;
    MLS_CHECK(it < e.cf.max_iterations, "while_loop: more than max_iterations = ", e.cf.max_iterations,
              " iterations (the condition is still true); raise the bound or fix the condition");
    const std::vector<Tensor> next = run_sub(bg, x, bg.outputs);
    for (std::size_t k = 0; k < n; ++k) {
      check_step(k, x[k], next[k], it);
      x[k] = next[k];
    }
    if (save) m.stack.emplace_back(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
  }
  e.trips = it;
  m.result.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
  m.has_stack = save;
  return m;
}

Tensor while_fwd(Ins in, const Attrs& a) {
  Entry& e = entry(a, "while_loop");
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  return run_while(e, in, false).result.at(at(a, "output"));
}
void while_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const Entry& e = entry(a, "while_loop");
  MLS_CHECK(in.size() == e.cf.num_operands + e.cf.num_captures, "while_loop: expected ",
            e.cf.num_operands + e.cf.num_captures, " inputs (state and captures), got ", in.size());
  const std::size_t k = at(a, "output");
  MLS_CHECK(k < e.cf.num_operands, "while_loop: output ", k, " of a loop with ", e.cf.num_operands, " state tensors");
  s = in[k]->shape;
  d = in[k]->dtype;
}
Grads while_bwd(const Var& out, const Var& g, const Needs& needs) {
  const Node& n = *out.get();
  Entry& e = entry(n.attrs, "while_loop");
  {
    std::lock_guard<std::recursive_mutex> lock(e.mu);
    e.cf.saves_states = true;  // from now on the forward keeps its states for the replay
    vjp_of(e, kBody);
  }
  Grads r(needs.size());
  if (!is_floating(n.dtype)) return r;
  std::vector<Var> ins;
  for (const NodePtr& x : n.inputs) ins.emplace_back(x);
  ins.push_back(g);
  for (std::size_t j = 0; j < needs.size(); ++j)
    if (needs[j] && is_floating(n.inputs[j]->dtype))
      r[j] = apply(Op::WhileGrad, ins,
                   Attrs().set("body", n.attrs.i("body")).set("wrt", n.attrs.i("output")).set("output", std::int64_t(j)));
  return r;
}
Tensor while_grad_fwd(Ins in, const Attrs& a) {
  Entry& e = entry(a, "while_grad");
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  const std::size_t n = e.cf.num_operands, c = e.cf.num_captures, wrt = at(a, "wrt");
  const std::string kind = "grad" + std::to_string(wrt);
  if (Memo* m = lookup(e, kind, in)) return m->result.at(at(a, "output"));
  const Ins fwd_in = in.first(n + c);
  const std::vector<std::vector<Tensor>> stack = run_while(e, fwd_in, true).stack;
  const std::vector<Tensor> caps(fwd_in.begin() + static_cast<std::ptrdiff_t>(n), fwd_in.end());
  std::vector<Tensor> adjoint, d_caps;
  for (std::size_t k = 0; k < n; ++k)
    adjoint.push_back(k == wrt ? in[n + c] : Tensor::zeros(stack.back()[k].shape(), stack.back()[k].dtype()));
  for (const Tensor& t : caps) d_caps.push_back(Tensor::zeros(t.shape(), t.dtype()));
  const BodyVjpFn vjp = [&](const std::vector<Tensor>& state, const std::vector<Tensor>& adj) {
    std::vector<Tensor> x = state;
    x.insert(x.end(), caps.begin(), caps.end());
    std::vector<Tensor> gs = run_vjp(e, kBody, x, adj);
    BodyVjp r;
    r.d_state.assign(gs.begin(), gs.begin() + static_cast<std::ptrdiff_t>(n));
    r.d_captures.assign(gs.begin() + static_cast<std::ptrdiff_t>(n), gs.end());
    return r;
  };
  const WhileGrads grads = while_backward_replay(stack, adjoint, d_caps, vjp);
  Memo& m = store(e, kind, in);
  m.result = grads.d_init;
  m.result.insert(m.result.end(), grads.d_captures.begin(), grads.d_captures.end());
  return m.result.at(at(a, "output"));
}
/// cond_grad and while_grad: output j has the shape of input j (pred first for cond_grad).
template <std::size_t Skip>
void grad_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const std::size_t j = at(a, "output") + Skip;
  MLS_CHECK(j + 1 < in.size(), "control gradient: output ", j, " of a node with ", in.size(), " inputs");
  s = in[j]->shape;
  d = in[j]->dtype;
}
Tensor while_jvp(const Node& node, const std::vector<Tensor>& x, const std::vector<Tensor>& t, const Tensor&) {
  Entry& e = entry(node.attrs, "while_loop");
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  const std::size_t n = e.cf.num_operands;
  const SubGraph& cg = e.cf.subs[kCond];
  const SubGraph& bg = e.cf.subs[kBody];
  std::vector<Tensor> s = x, ts(n);
  for (std::size_t k = 0; k < n; ++k) ts[k] = t[k].defined() ? t[k] : Tensor::zeros(x[k].shape(), x[k].dtype());
  for (std::int64_t it = 0;; ++it) {
    if (!truthy("while_loop", run_sub(cg, s, cg.outputs).at(0))) break;
    MLS_CHECK(it < e.cf.max_iterations, "while_loop: more than max_iterations = ", e.cf.max_iterations, " iterations");
    Feeds feeds, tans;
    for (std::size_t i = 0; i < bg.inputs.size(); ++i) {
      if (!bg.inputs[i].defined()) continue;
      feeds.emplace_back(bg.inputs[i], s[i]);
      const Tensor& ti = i < n ? ts[i] : t[i];
      if (is_floating(s[i].dtype()) && ti.defined()) tans.emplace_back(bg.inputs[i], ti);
    }
    const JvpResult r = jvp(bg.outputs, feeds, tans);
    for (std::size_t k = 0; k < n; ++k) {
      s[k] = r.values[k];
      ts[k] = r.tangents[k];
    }
  }
  return ts.at(at(node.attrs, "output"));
}

// ---- cond ---------------------------------------------------------------------------------------
/// The branch outputs for `in` (pred, operands, captures), once per distinct input. Caller holds e.mu.
Memo& run_cond(Entry& e, Ins in) {
  if (Memo* m = lookup(e, "fwd", in)) return *m;
  const SubGraph& sg = e.cf.subs[truthy("cond", in[0]) ? 0 : 1];
  std::vector<Tensor> result = run_sub(sg, in.subspan(1), sg.outputs);
  for (std::size_t k = 0; k < result.size(); ++k)
    MLS_CHECK(result[k].shape() == e.cf.subs[0].outputs[k].shape() || !ops::known(e.cf.subs[0].outputs[k].shape()),
              "cond: output ", k, " has shape ", shape_str(result[k].shape()), ", expected ",
              shape_str(e.cf.subs[0].outputs[k].shape()));
  Memo& m = store(e, "fwd", in);
  m.result = std::move(result);
  return m;
}
Tensor cond_fwd(Ins in, const Attrs& a) {
  Entry& e = entry(a, "cond");
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  return run_cond(e, in).result.at(at(a, "output"));
}
void cond_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const Entry& e = entry(a, "cond");
  MLS_CHECK(in.size() == 1 + e.cf.num_operands + e.cf.num_captures, "cond: expected ",
            1 + e.cf.num_operands + e.cf.num_captures, " inputs (predicate, operands, captures), got ", in.size());
  check_pred_shape("cond", in[0]->shape, in[0]->dtype);
  const Var& o = e.cf.subs[0].outputs.at(at(a, "output"));
  s = o.shape();
  d = o.dtype();
}
Grads cond_bwd(const Var& out, const Var& g, const Needs& needs) {
  const Node& n = *out.get();
  Entry& e = entry(n.attrs, "cond");
  {
    std::lock_guard<std::recursive_mutex> lock(e.mu);
    vjp_of(e, 0);
    vjp_of(e, 1);
  }
  Grads r(needs.size());
  if (!is_floating(n.dtype)) return r;
  std::vector<Var> ins;
  for (const NodePtr& x : n.inputs) ins.emplace_back(x);
  ins.push_back(g);
  for (std::size_t j = 1; j < needs.size(); ++j)  // input 0, the predicate, gets no gradient
    if (needs[j] && is_floating(n.inputs[j]->dtype))
      r[j] = apply(Op::CondGrad, ins,
                   Attrs().set("body", n.attrs.i("body")).set("wrt", n.attrs.i("output")).set("output", std::int64_t(j - 1)));
  return r;
}
Tensor cond_grad_fwd(Ins in, const Attrs& a) {
  Entry& e = entry(a, "cond_grad");
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  const std::size_t wrt = at(a, "wrt");
  const std::string kind = "grad" + std::to_string(wrt);
  if (Memo* m = lookup(e, kind, in)) return m->result.at(at(a, "output"));
  const Ins fwd_in = in.first(in.size() - 1);
  const std::vector<Tensor> outs = run_cond(e, fwd_in).result;
  std::vector<Tensor> adj;
  for (std::size_t k = 0; k < outs.size(); ++k)
    adj.push_back(k == wrt ? in.back() : Tensor::zeros(outs[k].shape(), outs[k].dtype()));
  std::vector<Tensor> grads = run_vjp(e, truthy("cond", in[0]) ? 0 : 1, fwd_in.subspan(1), adj);
  Memo& m = store(e, kind, in);
  m.result = std::move(grads);
  return m.result.at(at(a, "output"));
}
Tensor cond_jvp(const Node& node, const std::vector<Tensor>& x, const std::vector<Tensor>& t, const Tensor&) {
  Entry& e = entry(node.attrs, "cond");
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  const SubGraph& sg = e.cf.subs[truthy("cond", x[0]) ? 0 : 1];
  Feeds feeds, tans;
  for (std::size_t i = 0; i < sg.inputs.size(); ++i) {
    if (!sg.inputs[i].defined()) continue;
    feeds.emplace_back(sg.inputs[i], x[i + 1]);
    if (is_floating(x[i + 1].dtype()) && t[i + 1].defined()) tans.emplace_back(sg.inputs[i], t[i + 1]);
  }
  return jvp(sg.outputs, feeds, tans).tangents.at(at(node.attrs, "output"));
}

// ---- building the sub-graphs --------------------------------------------------------------------
/// Builds the sub-graphs of one control op, collecting what they capture from enclosing graphs.
struct Builder {
  std::vector<Var> captures;
  std::unordered_map<const Node*, std::size_t> index;

  SubGraph build(const char* prefix, const std::vector<Var>& operands, const BranchFn& fn) {
    SubGraph sg;
    sg.graph = std::make_shared<Graph>();
    Graph& g = *sg.graph;
    for (std::size_t i = 0; i < operands.size(); ++i)
      sg.inputs.push_back(g.placeholder(prefix + std::to_string(i), operands[i].shape(), operands[i].dtype()));
    TraceHooks hooks;
    hooks.graph = &g;
    hooks.lift = [&](const Var& v) -> Var {
      if (v.get()->graph == nullptr) return g.constant(v.value(), v.name());  // an eager tensor: a constant
      auto [it, fresh] = index.emplace(v.get(), captures.size());
      if (fresh) captures.push_back(v);
      const std::size_t slot = operands.size() + it->second;
      if (sg.inputs.size() <= slot) sg.inputs.resize(slot + 1);
      if (!sg.inputs[slot].defined())
        sg.inputs[slot] = g.placeholder("capture" + std::to_string(it->second), v.shape(), v.dtype());
      return sg.inputs[slot];
    };
    const std::vector<Var> phs(sg.inputs.begin(), sg.inputs.end());
    {
      TraceScope scope(hooks);
      sg.outputs = fn(phs);
      for (Var& o : sg.outputs) {
        MLS_CHECK(o.defined(), prefix, ": the function returned an undefined Var");
        if (o.get()->graph != &g) o = hooks.lift(o);  // returned as is from outside
      }
    }
    return sg;
  }
};

/// Publishes `cf` (with its sub-graphs sized to every capture) and returns its id.
std::int64_t publish(ControlFlow cf) {
  auto e = std::make_shared<Entry>();
  for (SubGraph& sg : cf.subs) sg.inputs.resize(cf.num_operands + cf.num_captures);
  e->vjp.resize(cf.subs.size());
  std::lock_guard<std::mutex> lock(g_table_mu);
  cf.id = g_next_id++;
  e->cf = std::move(cf);
  g_table.emplace(e->cf.id, e);
  return e->cf.id;
}

/// The graph of `vs` (nullptr: all eager); a mix is an error naming `op`.
Graph* world_of(const char* op, const std::vector<Var>& vs) {
  Graph* g = nullptr;
  bool eager = false;
  for (const Var& v : vs) {
    MLS_CHECK(v.defined(), op, ": an operand is undefined");
    if (v.get()->graph) g = v.get()->graph;
    else eager = true;
  }
  MLS_CHECK(!(g && eager), op, ": operands mix eager tensors and graph nodes; wrap the tensors with Graph::constant");
  return g;
}

}  // namespace

namespace ops {
void register_control_ops(OpTable& t) {
  t.add(Op::Cond, {.name = "cond", .arity = -1, .forward = cond_fwd, .infer = cond_infer, .backward = cond_bwd,
                   .jvp = cond_jvp, .doc = "then or else sub-graph on the operands, chosen by a 0-d predicate"});
  t.add(Op::WhileLoop, {.name = "while_loop", .arity = -1, .forward = while_fwd, .infer = while_infer,
                        .backward = while_bwd, .jvp = while_jvp,
                        .doc = "state = body(state) while condition(state); output k is state k"});
  // Their adjoints: differentiable ops without a rule (a second derivative is a named error).
  t.add(Op::CondGrad, {.name = "cond_grad", .arity = -1, .forward = cond_grad_fwd, .infer = grad_infer<1>,
                       .doc = "the branch taken's backward sub-graph: adjoint of operand/capture j"});
  t.add(Op::WhileGrad, {.name = "while_grad", .arity = -1, .forward = while_grad_fwd, .infer = grad_infer<0>,
                        .doc = "reverse replay of a loop's saved states: adjoint of state/capture j"});
}
}  // namespace ops

const ControlFlow* control_flow(const Node& node) {
  if (node.op != Op::Cond && node.op != Op::WhileLoop && node.op != Op::CondGrad && node.op != Op::WhileGrad)
    return nullptr;
  if (!node.attrs.has("body")) return nullptr;
  const std::shared_ptr<Entry> e = find_entry(node.attrs.i("body"));
  return e ? &e->cf : nullptr;
}

std::int64_t publish_control_flow(ControlFlow cf) {
  cf.saves_states = false;
  return publish(std::move(cf));
}

std::int64_t last_trip_count(const Node& while_node) {
  MLS_CHECK(while_node.op == Op::WhileLoop, "last_trip_count: node is ", op_name(while_node.op), ", not while_loop");
  Entry& e = entry(while_node.attrs, "while_loop");
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  return e.trips;
}

std::vector<Var> cond(const Var& pred, const BranchFn& then_fn, const BranchFn& else_fn,
                      const std::vector<Var>& operands) {
  MLS_CHECK(pred.defined(), "cond: the predicate is undefined");
  MLS_CHECK(then_fn && else_fn, "cond: a branch function is empty");
  std::vector<Var> all{pred};
  all.insert(all.end(), operands.begin(), operands.end());
  check_pred_shape("cond", pred.shape(), pred.dtype());
  if (world_of("cond", all) == nullptr) return truthy("cond", pred.value()) ? then_fn(operands) : else_fn(operands);
  Builder b;
  ControlFlow cf;
  cf.op = Op::Cond;
  cf.num_operands = operands.size();
  cf.subs.push_back(b.build("then", operands, then_fn));
  cf.subs.push_back(b.build("else", operands, else_fn));
  cf.num_captures = b.captures.size();
  const auto& to = cf.subs[0].outputs;
  const auto& eo = cf.subs[1].outputs;
  MLS_CHECK(to.size() == eo.size(), "cond: the then branch gives ", to.size(), " outputs, the else branch ", eo.size());
  for (std::size_t k = 0; k < to.size(); ++k)
    MLS_CHECK(to[k].shape() == eo[k].shape() && to[k].dtype() == eo[k].dtype(), "cond: output ", k,
              " differs between the branches: then gives ", describe(to[k].shape(), to[k].dtype()), ", else gives ",
              describe(eo[k].shape(), eo[k].dtype()));
  const std::size_t outs = to.size();
  std::vector<Var> ins = all;
  ins.insert(ins.end(), b.captures.begin(), b.captures.end());
  const std::int64_t id = publish(std::move(cf));
  std::vector<Var> r;
  for (std::size_t k = 0; k < outs; ++k)
    r.push_back(apply(Op::Cond, ins, Attrs().set("body", id).set("output", static_cast<std::int64_t>(k))));
  return r;
}

std::vector<Var> while_loop(const LoopCondFn& cond_fn, const BranchFn& body_fn, const std::vector<Var>& state,
                            std::int64_t max_iterations) {
  MLS_CHECK(!state.empty(), "while_loop: the state is empty (give at least one loop-carried Var)");
  MLS_CHECK(cond_fn && body_fn, "while_loop: the condition or the body function is empty");
  MLS_CHECK(max_iterations >= 0, "while_loop: max_iterations must be >= 0, got ", max_iterations);
  auto check_body = [&](const std::vector<Var>& before, const std::vector<Var>& after) {
    MLS_CHECK(after.size() == before.size(), "while_loop: the body returns ", after.size(), " Vars for a state of ",
              before.size());
    for (std::size_t k = 0; k < before.size(); ++k)
      MLS_CHECK(after[k].defined() && after[k].shape() == before[k].shape() && after[k].dtype() == before[k].dtype(),
                "while_loop: the body changes state ", k, " from ", describe(before[k].shape(), before[k].dtype()),
                " to ", after[k].defined() ? describe(after[k].shape(), after[k].dtype()) : std::string("undefined"));
  };
  if (world_of("while_loop", state) == nullptr) {  // eager: the host's loop; the tape records each iteration
    std::vector<Var> s = state;
    for (std::int64_t it = 0;; ++it) {
      const Var p = cond_fn(s);
      MLS_CHECK(p.defined(), "while_loop: the condition returned an undefined Var");
      if (!truthy("while_loop", p.value())) return s;
      MLS_CHECK(it < max_iterations, "while_loop: more than max_iterations = ", max_iterations,
                " iterations (the condition is still true); raise the bound or fix the condition");
      std::vector<Var> next = body_fn(s);
      check_body(s, next);
      s = std::move(next);
    }
  }
  Builder b;
  ControlFlow cf;
  cf.op = Op::WhileLoop;
  cf.num_operands = state.size();
  cf.max_iterations = max_iterations;
  cf.subs.push_back(b.build("state", state, [&](const std::vector<Var>& s) { return std::vector<Var>{cond_fn(s)}; }));
  cf.subs.push_back(b.build("state", state, body_fn));
  cf.num_captures = b.captures.size();
  check_pred_shape("while_loop", cf.subs[kCond].outputs[0].shape(), cf.subs[kCond].outputs[0].dtype());
  const std::vector<Var>& body_in = cf.subs[kBody].inputs;
  check_body(std::vector<Var>(body_in.begin(), body_in.begin() + static_cast<std::ptrdiff_t>(state.size())),
             cf.subs[kBody].outputs);
  std::vector<Var> ins = state;
  ins.insert(ins.end(), b.captures.begin(), b.captures.end());
  const std::int64_t id = publish(std::move(cf));
  std::vector<Var> r;
  for (std::size_t k = 0; k < state.size(); ++k)
    r.push_back(apply(Op::WhileLoop, ins, Attrs().set("body", id).set("output", static_cast<std::int64_t>(k))));
  return r;
}

}  // namespace mls::autodiff
