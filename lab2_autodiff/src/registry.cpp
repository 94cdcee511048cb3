// The op registry: one entry per op (forward, shape inference, gradient rule, JVP rule, doc,
// flags), keyed by a stable name and identified by an `Op` value. Lab 2's built-in ops are
// entered from the ops_*.cpp files when the registry is first used; later labs add theirs with
// `register_op` (see handouts/lab2/README.md, "Adding an op").
#include <array>
#include <atomic>
#include <mutex>

#include "ops_internal.hpp"

namespace mls::autodiff {

namespace {

using ops::Grads;
using ops::InNodes;
using ops::Ins;
using ops::Needs;

// ---- leaves, assign, custom ---------------------------------------------------------------------
Tensor leaf_forward(Ins, const Attrs&) { fail("forward: leaves (placeholder, variable, constant) have no forward"); }
void leaf_infer(InNodes, const Attrs&, Shape&, DType&) { fail("infer: leaves are created by the Graph"); }
Grads no_grad_rule(const Var&, const Var&, const Needs& needs) { return Grads(needs.size()); }
Grads missing_rule(const Var& out, const Var&, const Needs&) {
  fail("backward: op ", op_name(out.get()->op), " has no gradient rule");
}

Tensor assign_fwd(Ins in, const Attrs&) { return in[1]; }
void assign_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  MLS_CHECK(in[0]->op == Op::Variable, "assign: the target must be a variable, got ", op_name(in[0]->op));
  MLS_CHECK(in[1]->shape == in[0]->shape && in[1]->dtype == in[0]->dtype, "assign: value ", shape_str(in[1]->shape),
            " ", in[1]->dtype, " does not match variable ", shape_str(in[0]->shape), " ", in[0]->dtype);
  s = in[0]->shape;
  d = in[0]->dtype;
}

// Custom ops (eager only; see mls::autodiff::custom): the node carries its own backward callback.
Tensor custom_fwd(Ins, const Attrs&) { fail("custom: the forward of a custom op runs only through mls::autodiff::custom"); }
void custom_infer(InNodes, const Attrs&, Shape&, DType&) {
  fail("custom: custom ops are eager only, they cannot be added to a graph");
}
Grads custom_bwd(const Var& out, const Var& g, const Needs& needs) {
  const Node& n = *out.get();
  MLS_CHECK(n.custom && n.custom->backward, "custom: node ", n.id, " has no backward callback");
  Grads gs = n.custom->backward(g, needs);
  MLS_CHECK(gs.size() == needs.size(), "custom: the backward of '", n.custom->name, "' returned ", gs.size(),
            " gradients for ", needs.size(), " inputs");
  return gs;
}

void register_graph_ops(ops::OpTable& t) {
  auto leaf = [&](Op op, const char* name, bool diff, const char* doc) {
    t.add(op, {.name = name, .arity = 0, .differentiable = diff, .forward = leaf_forward, .infer = leaf_infer,
               .backward = no_grad_rule, .doc = doc});
  };
  leaf(Op::Placeholder, "placeholder", true, "graph input, fed at run time");
  leaf(Op::Variable, "variable", true, "trainable state");
  leaf(Op::Constant, "constant", false, "a fixed tensor");
  t.add(Op::Assign, {.name = "assign", .arity = 2, .differentiable = false, .forward = assign_fwd,
                     .infer = assign_infer, .backward = no_grad_rule,
                     .doc = "writes input 1 into variable input 0 when run"});
  t.add(Op::Custom, {.name = "custom", .arity = -1, .forward = custom_fwd, .infer = custom_infer,
                     .backward = custom_bwd, .doc = "eager op with a caller-given value and backward callback"});
}

// ---- the registry -------------------------------------------------------------------------------
constexpr std::size_t kMaxOps = 1024;

/// Slots indexed by Op value. Reads are lock-free (an entry never changes once published);
/// registration takes the mutex.
struct Registry {
  std::array<std::atomic<const OpDef*>, kMaxOps> slots{};
  std::vector<std::unique_ptr<const OpDef>> owned;
  std::size_t next = static_cast<std::size_t>(Op::Count_);
  std::mutex mu;

  Registry() {
    ops::OpTable t;
    register_graph_ops(t);
    ops::register_elementwise_ops(t);
    ops::register_reduce_ops(t);
    ops::register_shape_ops(t);
    ops::register_nn_ops(t);
    ops::register_loss_ops(t);
    ops::register_pool_ops(t);
    ops::register_sparse_ops(t);
    ops::register_control_ops(t);
    for (auto& [op, def] : t.defs) put(static_cast<std::size_t>(op), std::move(def));
    for (std::size_t i = 0; i < next; ++i)
      MLS_CHECK(slots[i].load() != nullptr, "op registry: built-in op ", i, " has no entry");
  }
  /// Checks and publishes `def` at slot `i` (caller holds the mutex, or is the constructor).
  void put(std::size_t i, OpDef def) {
    MLS_CHECK(!def.name.empty(), "register_op: the op needs a name");
    MLS_CHECK(def.forward && def.infer, "register_op: op '", def.name, "' needs a forward and an infer function");
    MLS_CHECK(!def.elementwise || (def.unary.has_value() != def.binary.has_value()), "register_op: elementwise op '",
              def.name, "' must name exactly one lab 1 scalar function (unary or binary)");
    MLS_CHECK(!def.commutative || def.arity == 2, "register_op: op '", def.name, "' is commutative but has arity ",
              def.arity, ", expected 2");
    for (std::size_t k = 0; k < kMaxOps; ++k) {
      const OpDef* d = slots[k].load(std::memory_order_relaxed);
      MLS_CHECK(!d || d->name != def.name, "register_op: an op named '", def.name, "' is already registered");
    }
    MLS_CHECK(slots[i].load() == nullptr, "register_op: op ", i, " is already registered");
    if (!def.backward) def.backward = def.differentiable ? missing_rule : no_grad_rule;
    owned.push_back(std::make_unique<const OpDef>(std::move(def)));
    slots[i].store(owned.back().get(), std::memory_order_release);
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

Op register_op(OpDef def) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  MLS_CHECK(r.next < kMaxOps, "register_op: the registry is full (", kMaxOps, " ops); cannot add '", def.name, "'");
  const std::size_t i = r.next;
  r.put(i, std::move(def));
  ++r.next;
  return static_cast<Op>(i);
}

bool is_registered(Op op) {
  const auto i = static_cast<std::size_t>(op);
  return i < kMaxOps && registry().slots[i].load(std::memory_order_acquire) != nullptr;
}

const OpDef& op_def(Op op) {
  const auto i = static_cast<std::size_t>(op);
  const OpDef* d = i < kMaxOps ? registry().slots[i].load(std::memory_order_acquire) : nullptr;
  MLS_CHECK(d != nullptr, "op_def: unknown op ", i, " (not registered)");
  return *d;
}
const char* op_name(Op op) { return op_def(op).name.c_str(); }
Op op_from_name(std::string_view name) {
  Registry& r = registry();
  for (std::size_t i = 0; i < kMaxOps; ++i) {
    const OpDef* d = r.slots[i].load(std::memory_order_acquire);
    if (d && d->name == name) return static_cast<Op>(i);
  }
  fail("op_from_name: unknown op '", name, "'");
}
std::vector<Op> registered_ops() {
  std::vector<Op> ops;
  Registry& r = registry();
  for (std::size_t i = 0; i < kMaxOps; ++i)
    if (r.slots[i].load(std::memory_order_acquire)) ops.push_back(static_cast<Op>(i));
  return ops;
}

Tensor eval_node(const Node& node, std::span<const Tensor> inputs) { return op_def(node.op).forward(inputs, node.attrs); }
void infer_node(const Node& node, Shape& shape, DType& dtype) {
  std::vector<const Node*> ins(node.inputs.size());
  for (std::size_t i = 0; i < ins.size(); ++i) ins[i] = node.inputs[i].get();
  op_def(node.op).infer(ins, node.attrs, shape, dtype);
}

double shape_numel(const Shape& s) {
  double n = 1;
  for (std::int64_t d : s) n *= static_cast<double>(std::max<std::int64_t>(d, 1));
  return n;
}

bool shape_matches(const Shape& pattern, const Shape& actual) {
  if (pattern.size() != actual.size()) return false;
  for (std::size_t i = 0; i < pattern.size(); ++i)
    if (pattern[i] != -1 && pattern[i] != actual[i]) return false;
  return true;
}

Shape broadcast_inferred(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x == y) r[i] = x;
    else if (x == 1) r[i] = y;
    else if (y == 1) r[i] = x;
    else if (x < 0) r[i] = y;
    else if (y < 0) r[i] = x;
    else fail(op, ": cannot broadcast shapes ", shape_str(a), " and ", shape_str(b));
  }
  return r;
}

}  // namespace mls::autodiff
