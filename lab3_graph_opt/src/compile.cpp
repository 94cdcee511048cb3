// compile(fn): tracing an eager function into a lab 2 graph, the joint forward/backward graph,
// lab 3's passes, the split into a forward and a backward program, and the calls (compile.hpp).
#include "mls/graph_opt/compile.hpp"

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "mls/common/timer.hpp"

namespace mls::graph_opt {

namespace {

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

std::string describe(const Node& n) {
  std::ostringstream os;
  if (!n.name.empty()) os << "'" << n.name << "' (" << autodiff::op_name(n.op) << ", ";
  else os << autodiff::op_name(n.op) << " (";
  os << n.dtype << " " << shape_str(n.shape) << ")";
  return os.str();
}

/// One trace of fn: the program it built and what it captured.
struct Trace {
  Program prog;
  std::vector<Capture> captures;
  std::unordered_map<const Node*, Var> lifted;  // captured eager node -> its graph node
  std::size_t num_outputs = 0;
};

/// The graph node standing for the eager Var `v` (see compile.hpp: parameters become inputs,
/// anything else a frozen constant).
Var lift(Trace& t, const Var& v) {
  if (auto it = t.lifted.find(v.get()); it != t.lifted.end()) return it->second;
  const Node& n = *v.get();
  MLS_CHECK(n.graph == nullptr, "compile: fn used ", describe(n), ", a node of another graph; fn must be eager code");
  MLS_CHECK(n.value.defined(), "compile: fn captured ", describe(n), ", an eager tensor without a value (freed)");
  Capture c;
  c.node = v.node();
  c.as_input = n.requires_grad;
  c.shape = n.value.shape();
  c.dtype = n.value.dtype();
  c.name = "capture " + std::to_string(t.captures.size()) + (n.name.empty() ? "" : " '" + n.name + "'");
  Var g;
  if (c.as_input) {
    g = t.prog.input(n.name.empty() ? "capture" + std::to_string(t.captures.size()) : n.name, c.shape, c.dtype);
  } else {
    c.value = n.value;
    c.checksum = tensor_checksum(n.value);
    g = t.prog.constant(n.value, n.name);
  }
  t.captures.push_back(std::move(c));
  t.lifted.emplace(v.get(), g);
  return g;
}

/// Calls fn on placeholders shaped like `inputs` with the tracing hooks installed.
std::unique_ptr<Trace> trace(const CompiledFunction::Fn& fn, const std::vector<Var>& inputs, const std::string& name) {
  auto t = std::make_unique<Trace>();
  std::vector<Var> args;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string nm = inputs[i].name().empty() ? "input" + std::to_string(i) : inputs[i].name();
    args.push_back(t->prog.input(nm, inputs[i].shape(), inputs[i].dtype()));
  }
  autodiff::TraceHooks hooks;
  hooks.graph = t->prog.graph.get();
  hooks.lift = [&t](const Var& v) { return lift(*t, v); };
  hooks.host_read = [&name](const Node& n, const char* what) {
    fail("compile '", name, "': cannot trace data-dependent control flow: fn read the value of ", describe(n),
         " on the host (", what, ") while it was being traced, and a compiled function is one graph that cannot "
         "branch on a tensor's value; call the eager function for this code, or compute both branches and select "
         "with where(cond, a, b)");
  };
  std::vector<Var> outs;
  {
    autodiff::TraceScope scope(hooks);
    outs = fn(args);
  }
  MLS_CHECK(!outs.empty(), "compile '", name, "': fn returned no outputs (an empty list); return at least one Var");
  for (std::size_t k = 0; k < outs.size(); ++k) {
    MLS_CHECK(outs[k].defined(), "compile '", name, "': fn returned an undefined Var as output ", k);
    if (outs[k].get()->graph == nullptr) outs[k] = lift(*t, outs[k]);  // an eager value fn returned as is
    MLS_CHECK(outs[k].get()->graph == t->prog.graph.get(), "compile '", name, "': output ", k,
              " is a node of another graph (fn must compute its outputs from its inputs and captured tensors)");
    t->prog.output(outs[k]);
  }
  t->num_outputs = outs.size();
  return t;
}

/// One line per node of the traced program: op, inputs, attributes, type; constants by checksum.
std::vector<std::string> structure_of(const Program& p) {
  std::unordered_map<const Node*, std::size_t> idx;
  std::vector<std::string> lines;
  for (const NodePtr& n : p.graph->nodes()) {
    idx[n.get()] = idx.size();
    std::ostringstream os;
    os << autodiff::op_name(n->op) << "(";
    for (const NodePtr& in : n->inputs) os << " %" << (idx.count(in.get()) ? std::to_string(idx.at(in.get())) : "?");
    os << " ) {" << n->attrs.str() << "} " << n->dtype << " " << shape_str(n->shape);
    if (n->op == Op::Constant) os << " checksum " << tensor_checksum(n->value);
    lines.push_back(os.str());
  }
  std::ostringstream os;
  os << "outputs";
  for (const Var& o : p.outputs) os << " %" << idx.at(o.get());
  lines.push_back(os.str());
  return lines;
}

/// Clones the part of `p` that `outputs` need into a new program whose inputs are `boundary` (in
/// order, as placeholders: traversal stops there). Constants are copied (sharing their values).
Program extract(const Program& p, const std::vector<Node*>& outputs, const std::vector<Node*>& boundary) {
  Program q;
  std::unordered_map<const Node*, Var> map;
  for (Node* b : boundary)
    map.emplace(b, q.input(b->name.empty() ? std::string("saved_") + autodiff::op_name(b->op) : b->name, b->shape, b->dtype));
  std::vector<std::pair<Node*, std::size_t>> stack;
  for (Node* root : outputs) {
    if (map.count(root)) continue;
    stack.emplace_back(root, 0);
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      if (i < n->inputs.size()) {
        Node* in = n->inputs[i++].get();
        if (!map.count(in)) stack.emplace_back(in, 0);
        continue;
      }
      if (!map.count(n)) {
        MLS_CHECK(n->op != Op::Placeholder, "compile: internal error: placeholder '", n->name, "' reached while splitting");
        if (n->is_leaf()) {
          map.emplace(n, q.constant(n->value, n->name));
        } else {
          auto c = std::make_shared<Node>(*n);  // op, attrs, shape, dtype, name
          c->inputs.clear();
          for (const NodePtr& in : n->inputs) c->inputs.push_back(map.at(in.get()).node());
          c->graph = nullptr;
          q.graph->add(c);
          map.emplace(n, Var(c));
        }
      }
      stack.pop_back();
    }
  }
  for (Node* o : outputs) q.output(map.at(o));
  return q;
}

/// Adds the backward graph to the traced program: one adjoint input per floating output, the
/// gradients of sum_k sum(out_k * adjoint_k) w.r.t. `wrt` appended to the outputs.
void add_backward(Program& p, const std::vector<Var>& wrt) {
  const std::vector<Var> outs = p.outputs;
  Var total;
  for (std::size_t k = 0; k < outs.size(); ++k) {
    if (!is_floating(outs[k].dtype())) continue;
    const Var g = p.input("grad_out" + std::to_string(k), outs[k].shape(), outs[k].dtype());
    Var term = autodiff::sum(outs[k] * g);
    if (total.defined() && term.dtype() != total.dtype()) term = autodiff::cast(term, total.dtype());
    total = total.defined() ? total + term : term;
  }
  for (const Var& g : autodiff::gradients(total, wrt)) p.outputs.push_back(g);
}

/// Splits the optimised joint program `p` into v's forward and backward programs.
void split(const Program& p, std::size_t num_inputs, CompiledVersion& v) {
  std::vector<Node*> fwd_outs, grads;
  for (std::size_t k = 0; k < p.outputs.size(); ++k) (k < v.num_outputs ? fwd_outs : grads).push_back(p.outputs[k].get());
  std::vector<Node*> fwd_inputs;
  std::unordered_map<const Node*, std::size_t> input_index;
  for (std::size_t i = 0; i < p.inputs.size(); ++i) {
    input_index[p.inputs[i].get()] = i;
    if (i < num_inputs) fwd_inputs.push_back(p.inputs[i].get());
  }
  std::unordered_set<const Node*> forward_needed;
  for (Node* n : autodiff::topo_sort(std::vector<Var>(p.outputs.begin(), p.outputs.begin() + static_cast<std::ptrdiff_t>(v.num_outputs))))
    forward_needed.insert(n);
  // The backward's boundary: forward values it reads and inputs (call inputs, captures, adjoints).
  // A view (a reshape or slice the planners make no copy of: a layer's slice of a stacked
  // parameter, a weight's [B T, K] view of an activation) is not saved but made again in the
  // backward from what it views: saving it would hand the forward's caller a copy of it at every
  // call (an input's memory, or a buffer already handed out with another saved value).
  std::vector<Node*> boundary;
  std::unordered_set<const Node*> seen;
  std::vector<Node*> stack(grads.rbegin(), grads.rend());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    const bool view = is_view_op(n->op) && yields_view(*n);
    if (n->op == Op::Placeholder || (forward_needed.count(n) && !n->is_leaf() && !view)) {
      boundary.push_back(n);
      continue;
    }
    for (auto it = n->inputs.rbegin(); it != n->inputs.rend(); ++it) stack.push_back(it->get());
  }
  std::vector<Node*> forward_outputs = fwd_outs;
  for (Node* b : boundary) {
    if (b->op == Op::Placeholder) {
      const std::size_t i = input_index.at(b);
      if (i < num_inputs) v.backward_sources.emplace_back(0, i);
      else v.backward_sources.emplace_back(2, i - num_inputs);
    } else {
      v.backward_sources.emplace_back(1, forward_outputs.size() - v.num_outputs);
      forward_outputs.push_back(b);
    }
  }
  v.forward = extract(p, forward_outputs, fwd_inputs);
  v.backward = extract(p, grads, boundary);
}

}  // namespace

CompiledFunction::CompiledFunction(Fn fn, CompileOptions options) : fn_(std::move(fn)), options_(std::move(options)) {
  MLS_CHECK(static_cast<bool>(fn_), "compile: fn is empty");
  MLS_CHECK(options_.max_versions >= 1, "compile '", options_.name, "': max_versions must be >= 1, got ", options_.max_versions);
  PassManager().add_pipeline(options_.passes).add_pipeline(options_.pre_grad_passes);  // an unknown pass name fails here
  if (env_on("MLS_COMPILE_LOG")) options_.log = true;
  if (env_on("MLS_COMPILE_CHECK")) options_.retrace_checks = -1;
}

const CompiledVersion& CompiledFunction::version(std::size_t i) const {
  MLS_CHECK(i < versions_.size(), "compile '", options_.name, "': version ", i, " does not exist (", versions_.size(),
            " compiled)");
  return *versions_[i];
}

std::string CompiledFunction::guards(std::size_t i) const {
  const CompiledVersion& v = version(i);
  std::ostringstream os;
  os << "grad_mode == " << v.signature.grad_mode << "\n";
  for (std::size_t k = 0; k < v.signature.inputs.size(); ++k) {
    const InputSpec& s = v.signature.inputs[k];
    os << "input " << k << ": " << s.dtype << " " << shape_str(s.shape) << " requires_grad=" << s.requires_grad << "\n";
  }
  for (const Capture& c : v.captures)
    os << c.name << ": " << c.dtype << " " << shape_str(c.shape)
       << (c.as_input ? " requires_grad (fed at each call)" : " constant, same tensor, checksum " + std::to_string(c.checksum))
       << "\n";
  return os.str();
}

void CompiledFunction::reset() {
  versions_.clear();
  stats_ = {};
  warned_ = false;
}

std::vector<Var> CompiledFunction::operator()(const std::vector<Var>& inputs) {
  bool traced_inline = false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    MLS_CHECK(inputs[i].defined(), "compile '", options_.name, "': input ", i, " is an undefined Var");
    traced_inline = traced_inline || inputs[i].get()->graph != nullptr;
  }
  if (traced_inline || autodiff::trace_hooks()) return fn_(inputs);  // inside another trace: inline
  const Signature sig = signature_of(inputs, autodiff::grad_enabled());
  std::string last_failure;
  for (std::size_t k = versions_.size(); k-- > 0;) {
    const std::shared_ptr<CompiledVersion>& v = versions_[k];
    const std::string why = check_guards(v->signature, v->captures, sig);
    if (why.empty()) {
      ++stats_.cache_hits;
      if (options_.retrace_checks < 0 || v->retraces_done < options_.retrace_checks) {
        ++v->retraces_done;
        ++stats_.retraces;
        const std::vector<std::string> again = structure_of(trace(fn_, inputs, options_.name)->prog);
        for (std::size_t l = 0; l < std::max(again.size(), v->structure.size()); ++l) {
          const std::string a = l < v->structure.size() ? v->structure[l] : "(nothing)";
          const std::string b = l < again.size() ? again[l] : "(nothing)";
          MLS_CHECK(a == b, "compile '", options_.name, "': fn traced to a different graph under the same signature ",
                    sig.str(), " (node ", l, ": '", a, "' compiled, '", b,
                    "' now); the graph depends on something the guards do not see (a global, a counter, host "
                    "randomness): pass it as an input, or do not compile fn");
        }
      }
      return run_version(v, inputs);
    }
    ++stats_.guard_failures;
    if (options_.log)
      std::cerr << "compile '" << options_.name << "': guard failed for version " << k << ": " << why << "\n";
    last_failure = why;
  }
  if (static_cast<int>(versions_.size()) >= options_.max_versions) {
    ++stats_.fallbacks;
    if (!warned_) {
      warned_ = true;
      std::cerr << "compile '" << options_.name << "': warning: hit the limit of " << options_.max_versions
                << " compiled versions (CompileOptions::max_versions); running fn eagerly for new signatures (last "
                   "guard failure: "
                << last_failure << ")\n";
    }
    return fn_(inputs);
  }
  // A new version: trace, add the backward, optimise, split, plan.
  Timer timer;
  auto v = std::make_shared<CompiledVersion>();
  std::unique_ptr<Trace> t = trace(fn_, inputs, options_.name);
  v->signature = sig;
  v->captures = std::move(t->captures);
  v->structure = structure_of(t->prog);
  v->num_outputs = t->num_outputs;
  Program& p = t->prog;
  const std::size_t num_inputs = p.inputs.size();  // call inputs, then input captures
  std::vector<Var> wrt;
  for (std::size_t i = 0; i < num_inputs; ++i) {
    const bool grad = i < inputs.size() ? sig.inputs[i].requires_grad : true;
    if (grad && is_floating(p.inputs[i].dtype())) {
      v->grad_inputs.push_back(i);
      wrt.push_back(p.inputs[i]);
    }
  }
  bool any_float_output = false;
  for (const Var& o : p.outputs) any_float_output = any_float_output || is_floating(o.dtype());
  v->has_backward = sig.grad_mode && !wrt.empty() && any_float_output;
  // The traced graph (with lab 2's gradients) as eager would run it; then the pre-gradient passes
  // on the forward, the backward built from what they made, and the pipeline on the joint graph.
  auto with_backward = [&](Program& q) {
    if (!v->has_backward) return;
    std::vector<Var> xs;
    for (std::size_t i : v->grad_inputs) xs.push_back(q.inputs[i]);
    add_backward(q, xs);
  };
  v->traced = clone(p);
  with_backward(v->traced);
  PassReport pre;
  if (!options_.pre_grad_passes.empty()) pre = PassManager().add_pipeline(options_.pre_grad_passes).run(p);
  with_backward(p);
  PassManager pm;
  pm.add_pipeline(options_.passes);
  v->report = pm.run(p);
  v->report.stats.insert(v->report.stats.begin(), pre.stats.begin(), pre.stats.end());
  v->optimised_nodes = p.size();
  if (v->has_backward) {
    split(p, num_inputs, *v);
  } else {
    std::vector<Node*> outs, ins;
    for (const Var& o : p.outputs) outs.push_back(o.get());
    for (const Var& i : p.inputs) ins.push_back(i.get());
    v->forward = extract(p, outs, ins);
  }
  v->forward_exec = std::make_unique<PlannedExecutor>(v->forward, plan_memory(v->forward));
  if (v->has_backward) v->backward_exec = std::make_unique<PlannedExecutor>(v->backward, plan_memory(v->backward));
  ++stats_.compiles;
  stats_.compile_ms += timer.millis();
  versions_.push_back(v);
  return run_version(v, inputs);
}

std::vector<Var> CompiledFunction::run_version(const std::shared_ptr<CompiledVersion>& v, const std::vector<Var>& inputs) {
  // Feeds: the call's inputs, then the current values of the captured parameters.
  auto feeds = std::make_shared<std::vector<Tensor>>();
  std::vector<Var> tape_inputs = inputs;  // the custom ops' inputs: what gradients flow into
  feeds->reserve(inputs.size() + v->captures.size());
  for (const Var& x : inputs) feeds->push_back(x.value());
  for (const Capture& c : v->captures)
    if (c.as_input) {
      feeds->push_back(c.node->value);
      tape_inputs.emplace_back(c.node);
    }
  auto results = std::make_shared<std::vector<Tensor>>(options_.planned ? v->forward_exec->run(*feeds) : run(v->forward, *feeds));
  std::vector<Var> outs;
  outs.reserve(v->num_outputs);
  if (!v->has_backward) {
    for (std::size_t k = 0; k < v->num_outputs; ++k) outs.emplace_back((*results)[k]);
    return outs;
  }
  const std::string name = "compiled '" + options_.name + "'";
  for (std::size_t k = 0; k < v->num_outputs; ++k) {
    const Tensor& y = (*results)[k];
    if (!is_floating(y.dtype())) {
      outs.emplace_back(y);
      continue;
    }
    // Output k's backward: the backward program with adjoint g for output k and zeros for the others.
    auto backward = [v, feeds, results, k, planned = options_.planned, name](const Var& g, const std::vector<bool>& needs) {
      // backward(create_graph=true) records the gradient computation (grad mode on): a compiled
      // backward is one program, not differentiable ops, so it cannot give gradients of gradients.
      MLS_CHECK(!autodiff::grad_enabled(), name, ": backward(create_graph=true) through a compiled function is not "
                "supported (its backward is a compiled program, not differentiable ops); call the eager function "
                "for gradients of gradients");
      std::vector<Tensor> bfeeds;
      bfeeds.reserve(v->backward_sources.size());
      for (const auto& [kind, i] : v->backward_sources) {
        if (kind == 0) bfeeds.push_back((*feeds)[i]);
        else if (kind == 1) bfeeds.push_back((*results)[v->num_outputs + i]);
        else if (i == k) bfeeds.push_back(g.value());
        else bfeeds.push_back(Tensor::zeros((*results)[i].shape(), (*results)[i].dtype()));
      }
      const std::vector<Tensor> grads = planned ? v->backward_exec->run(bfeeds) : run(v->backward, bfeeds);
      std::vector<Var> out(needs.size());
      for (std::size_t j = 0; j < v->grad_inputs.size(); ++j) {
        const std::size_t i = v->grad_inputs[j];
        if (i < needs.size() && needs[i]) out[i] = Var(grads[j]);
      }
      return out;
    };
    outs.push_back(autodiff::custom(name, tape_inputs, y, backward));
  }
  return outs;
}

}  // namespace mls::graph_opt
