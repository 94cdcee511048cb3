// Student file of lab 4: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 4 part 2. Schedules: stages and the schedule primitives, each checking its request. Yours:
// the loop transformations split, tile and reorder (what they do to the stage's leaf axes and its
// relations; te_lower.cpp turns the relations back into index expressions).
#include <algorithm>
#include <set>

#include "mls/common/error.hpp"
#include "mls/kernels/schedule.hpp"
#include "te_internal.hpp"
#include "te_schedule_impl.hpp"

namespace mls::kernels::te {

StageImpl* producer_of(const ScheduleImpl& sched, const StageImpl& s, const BufferNode* b) {
  auto it = s.redirect.find(b);
  if (it != s.redirect.end()) return it->second;
  for (const auto& st : sched.stages)
    if (st->buffer.get() == b) return st.get();
  return nullptr;
}

ThreadTag bound_tag(const StageImpl& st, const IterVar& axis) {
  auto k = st.kinds.find(axis.get());
  if (k == st.kinds.end() || k->second != ForKind::ThreadBinding) return ThreadTag::None;
  auto t = st.tags.find(axis.get());
  return t == st.tags.end() ? ThreadTag::None : t->second;
}

bool reads(const ScheduleImpl& sched, const StageImpl& s, const StageImpl& p) {
  bool found = false;
  for_each_expr(s.body, [&](const Expr& e) {
    if (const auto* l = e.as<Load>())
      found = found || producer_of(sched, s, l->buffer.get()) == &p;
  });
  return found;
}

namespace {
std::string names_of(const std::vector<IterVar>& axes) {
  std::string s;
  for (std::size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + axes[i].name();
  return s;
}

std::size_t index_of(const std::vector<IterVar>& v, const IterVar& a) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i].same_as(a)) return i;
  return v.size();
}

/// The position of `axis` among the leaves of `st`; mls::Error naming `primitive` otherwise.
std::size_t leaf_pos(const StageImpl& st, const char* primitive, const IterVar& axis) {
  MLS_CHECK(axis.defined(), primitive, ": the axis given for stage '", st.name, "' is undefined");
  MLS_CHECK(index_of(st.all, axis) < st.all.size(), primitive, ": axis '", axis.name(),
            "' does not belong to stage '", st.name, "' (its axes: ", names_of(st.leaves), ")");
  const std::size_t p = index_of(st.leaves, axis);
  MLS_CHECK(p < st.leaves.size(), primitive, ": axis '", axis.name(), "' of stage '", st.name,
            "' was already split or fused away (its axes now: ", names_of(st.leaves), ")");
  return p;
}

IterVar fresh(const std::string& name, std::int64_t extent, IterKind kind) {
  return IterVar(Var(name), extent, kind);
}

void insert_before(ScheduleImpl& s, const StageImpl* before, std::unique_ptr<StageImpl> st) {
  auto it = std::find_if(s.stages.begin(), s.stages.end(),
                         [&](const auto& x) { return x.get() == before; });
  s.stages.insert(it, std::move(st));
}

StageImpl& stage_of(const ScheduleImpl& s, const Tensor& t, const char* primitive) {
  MLS_CHECK(t.defined(), primitive, ": the tensor is undefined");
  for (const auto& st : s.stages)
    if (st->buffer == t.buffer()) return *st;
  MLS_CHECK(t.op() != nullptr, primitive, ": '", t.name(), "' is a placeholder: it has no stage");
  fail(primitive, ": '", t.name(), "' is not computed by this schedule");
}

/// Stages computed inside `st`.
std::vector<const StageImpl*> attached_to(const ScheduleImpl& s, const StageImpl& st) {
  std::vector<const StageImpl*> out;
  for (const auto& x : s.stages)
    if (x->attach == &st) out.push_back(x.get());
  return out;
}
}  // namespace

// ---- Stage --------------------------------------------------------------------------------

const std::string& Stage::name() const { return node_->name; }
std::vector<IterVar> Stage::leaf_axes() const { return node_->leaves; }
std::vector<IterVar> Stage::root_axes() const {
  std::vector<IterVar> v = node_->root;
  v.insert(v.end(), node_->reduce.begin(), node_->reduce.end());
  return v;
}

/// split: `axis` (a leaf at position p) becomes two leaves at p and p + 1, outer then inner:
/// inner of extent `factor` and outer of extent ceil(extent / factor), both of axis's kind, named
/// `outer_name`/`inner_name` or <axis>o/<axis>i. The stage records SplitRel{axis, outer, inner,
/// factor} in `relations` (lowering rebuilds axis = outer * factor + inner from it), adds both to
/// `all` (the axes it ever had) and forgets any loop kind given to `axis` (`kinds`).
/// Hint: fresh(name, extent, kind) makes an axis; st.leaves is a std::vector<IterVar>.
std::pair<IterVar, IterVar> Stage::split(const IterVar& axis, std::int64_t factor,
                                         std::string outer_name, std::string inner_name) {
  StageImpl& st = *node_;
  [[maybe_unused]] const std::size_t p = leaf_pos(st, "split", axis);
  MLS_CHECK(factor > 0, "split: factor ", factor, " for axis '", axis.name(), "' of stage '",
            st.name, "' must be > 0");
  // BEGIN SOLUTION
  IterVar outer = fresh(outer_name.empty() ? axis.name() + "o" : outer_name,
                        (axis.extent() + factor - 1) / factor, axis.kind());
  IterVar inner = fresh(inner_name.empty() ? axis.name() + "i" : inner_name, factor, axis.kind());
  st.relations.emplace_back(SplitRel{axis, outer, inner, factor});
  st.leaves[p] = outer;
  st.leaves.insert(st.leaves.begin() + static_cast<std::ptrdiff_t>(p) + 1, inner);
  st.all.push_back(outer);
  st.all.push_back(inner);
  st.kinds.erase(axis.get());
  return {outer, inner};
  // END SOLUTION
}

/// tile: split `a` by fa and `b` by fb, then order the four new leaves (ao, bo, ai, bi) in the
/// positions they occupy (the slide's yo, xo, yi, xi). Hint: split and reorder do all of it.
TileAxes Stage::tile(const IterVar& a, const IterVar& b, std::int64_t fa, std::int64_t fb) {
  leaf_pos(*node_, "tile", a);
  leaf_pos(*node_, "tile", b);
  MLS_CHECK(!a.same_as(b), "tile: axis '", a.name(), "' of stage '", node_->name, "' is given twice");
  MLS_CHECK(fa > 0 && fb > 0, "tile: factors ", fa, " and ", fb, " for axes '", a.name(), "' and '",
            b.name(), "' of stage '", node_->name, "' must be > 0");
  // BEGIN SOLUTION
  auto [ao, ai] = split(a, fa);
  auto [bo, bi] = split(b, fb);
  reorder({ao, bo, ai, bi});
  return {ao, bo, ai, bi};
  // END SOLUTION
}

/// reorder: the leaves `axes` (checked: leaves of this stage, each once) take the positions they
/// occupy now, sorted, in the order given; the other leaves keep their places. E.g. leaves
/// (yo, yi, xo, xi) and reorder({yo, xo, yi, xi}): positions {0, 1, 2, 3} get yo, xo, yi, xi.
/// Hint: `pos` holds each axis's position; sort it, then assign.
void Stage::reorder(const std::vector<IterVar>& axes) {
  StageImpl& st = *node_;
  std::vector<std::size_t> pos;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    pos.push_back(leaf_pos(st, "reorder", axes[i]));
    for (std::size_t j = 0; j < i; ++j)
      MLS_CHECK(!axes[i].same_as(axes[j]), "reorder: axis '", axes[i].name(), "' of stage '",
                st.name, "' is given twice");
  }
  // BEGIN SOLUTION
  std::sort(pos.begin(), pos.end());
  for (std::size_t i = 0; i < axes.size(); ++i) st.leaves[pos[i]] = axes[i];
  // END SOLUTION
}

IterVar Stage::fuse(const IterVar& outer, const IterVar& inner, std::string name) {
  StageImpl& st = *node_;
  const std::size_t po = leaf_pos(st, "fuse", outer);
  const std::size_t pi = leaf_pos(st, "fuse", inner);
  MLS_CHECK(pi == po + 1, "fuse: axes '", outer.name(), "' and '", inner.name(), "' of stage '",
            st.name, "' are not adjacent, outer then inner (its axes: ", names_of(st.leaves),
            "); reorder them first");
  MLS_CHECK(outer.kind() == inner.kind(), "fuse: axis '", outer.name(), "' of stage '", st.name,
            "' is ", outer.kind() == IterKind::Reduce ? "a reduction" : "data-parallel", " and '",
            inner.name(), "' is not: only axes of one kind fuse");
  IterVar fused = fresh(name.empty() ? outer.name() + "_" + inner.name() : name,
                        outer.extent() * inner.extent(), outer.kind());
  st.relations.emplace_back(FuseRel{outer, inner, fused});
  st.leaves[po] = fused;
  st.leaves.erase(st.leaves.begin() + static_cast<std::ptrdiff_t>(pi));
  st.all.push_back(fused);
  st.kinds.erase(outer.get());
  st.kinds.erase(inner.get());
  return fused;
}

void Stage::unroll(const IterVar& axis) {
  leaf_pos(*node_, "unroll", axis);
  node_->kinds[axis.get()] = ForKind::Unrolled;
}

void Stage::vectorize(const IterVar& axis) {
  leaf_pos(*node_, "vectorize", axis);
  MLS_CHECK(axis.kind() == IterKind::DataPar, "vectorize: axis '", axis.name(), "' of stage '",
            node_->name, "' is a reduction axis: rfactor it first (Schedule::rfactor)");
  node_->kinds[axis.get()] = ForKind::Vectorized;
}

void Stage::parallel(const IterVar& axis) {
  leaf_pos(*node_, "parallel", axis);
  MLS_CHECK(axis.kind() == IterKind::DataPar, "parallel: axis '", axis.name(), "' of stage '",
            node_->name, "' is a reduction axis: rfactor it first (Schedule::rfactor)");
  node_->kinds[axis.get()] = ForKind::Parallel;
}

void Stage::bind(const IterVar& axis, ThreadTag tag) {
  StageImpl& st = *node_;
  leaf_pos(st, "bind", axis);
  MLS_CHECK(tag != ThreadTag::None, "bind: axis '", axis.name(), "' of stage '", st.name,
            "': ThreadTag::None is not a GPU index (blockIdx.x/y/z, threadIdx.x/y/z)");
  MLS_CHECK(axis.kind() == IterKind::DataPar, "bind: axis '", axis.name(), "' of stage '", st.name,
            "' is a reduction axis: its iterations add into one element, which threads cannot do "
            "side by side (rfactor it first, Schedule::rfactor)");
  MLS_CHECK(st.buffer->scope != Scope::Shared, "bind: stage '", st.name, "' is a shared-memory copy (cache_read "
            "with Scope::Shared): the code generator spreads its iterations over the block's threads; bind the "
            "loops of its consumer (axis '", axis.name(), "')");
  for (const auto& l : st.leaves)
    MLS_CHECK(l.same_as(axis) || bound_tag(st, l) != tag, "bind: axis '", axis.name(), "' of stage '", st.name,
              "' cannot be bound to ", thread_tag_name(tag), ": axis '", l.name(),
              "' of the same stage already is (one loop per GPU index in a kernel)");
  st.kinds[axis.get()] = ForKind::ThreadBinding;
  st.tags[axis.get()] = tag;
}

namespace {
/// Whether stage `r` is computed inside loop `pos` of `c` (attached to `c` at that loop or one
/// inside it, or to a stage that is, at any depth).
bool computed_inside(const StageImpl& r, const StageImpl& c, std::size_t pos) {
  for (const StageImpl* a = &r; a->attach; a = a->attach)
    if (a->attach == &c) return index_of(c.leaves, a->attach_axis) >= pos;
  return false;
}
}  // namespace

void Stage::compute_at(const Stage& consumer, const IterVar& axis) {
  StageImpl& st = *node_;
  MLS_CHECK(consumer.s_ == s_, "compute_at: stage '", consumer.name(), "' belongs to another schedule");
  MLS_CHECK(consumer.node_ != node_, "compute_at: stage '", st.name, "' cannot be computed inside itself");
  const std::size_t pos = leaf_pos(*consumer.node_, "compute_at", axis);
  const bool read = reads(*s_, *consumer.node_, st);
  MLS_CHECK(!st.is_output || read, "compute_at: '", st.name,
            "' is an output of the schedule: it must be computed whole, not only where '",
            consumer.name(), "' reads it");
  MLS_CHECK(read, "compute_at: stage '", consumer.name(), "' does not read '", st.name, "'");
  // Its guests at the root (compute_with) go with it: they are not other readers.
  auto moving = [&](const StageImpl& x) { return x.with == &st && !x.attach && !x.is_output; };
  for (const auto& other : s_->stages)
    MLS_CHECK(other.get() == consumer.node_ || other.get() == node_ || moving(*other) || !reads(*s_, *other, st) ||
                  computed_inside(*other, *consumer.node_, pos),
              "compute_at: '", st.name, "' is also read by stage '", other->name,
              "'; compute_at needs a single consumer (or the other readers computed inside loop '",
              axis.name(), "' of '", consumer.name(), "' first)");
  for (const auto& g : s_->stages) {
    if (!moving(*g)) continue;
    for (const auto& other : s_->stages)
      MLS_CHECK(other.get() == g.get() || other.get() == node_ || !reads(*s_, *other, *g) ||
                    computed_inside(*other, *consumer.node_, pos),
                "compute_at: '", g->name, "', computed with '", st.name, "', would go to loop '", axis.name(), "' of '",
                consumer.name(), "' with it, but stage '", other->name, "' reads it outside that loop");
    g->attach = consumer.node_;
    g->attach_axis = axis;
  }
  st.attach = consumer.node_;
  st.attach_axis = axis;
}

void Stage::compute_with(const Stage& host, const IterVar& axis) {
  StageImpl& st = *node_;
  const StageImpl& h = *host.node_;
  MLS_CHECK(host.s_ == s_, "compute_with: stage '", host.name(), "' belongs to another schedule");
  MLS_CHECK(host.node_ != node_, "compute_with: stage '", st.name, "' cannot share loops with itself");
  const std::size_t pos = leaf_pos(h, "compute_with", axis);
  MLS_CHECK(!h.with, "compute_with: host '", h.name, "' is itself computed with '", h.with ? h.with->name : "",
            "': fuse '", st.name, "' with '", h.with ? h.with->name : "", "' instead");
  for (const auto& x : s_->stages)
    MLS_CHECK(x->with != &st, "compute_with: stage '", st.name, "' is the host of '", x->name,
              "': a host cannot be fused into another stage");
  MLS_CHECK(st.leaves.size() > pos, "compute_with: stage '", st.name, "' has ", st.leaves.size(),
            " loops (", names_of(st.leaves), "), fewer than the ", pos + 1, " it would share with '", h.name,
            "' down to axis '", axis.name(), "'");
  const bool moves = !st.attach && h.attach && !st.is_output;  // a root guest goes to its host's place
  MLS_CHECK(moves || (st.attach == h.attach && (!st.attach || st.attach_axis.same_as(h.attach_axis))),
            "compute_with: stage '", st.name, "' is computed ",
            st.attach ? "at loop '" + st.attach_axis.name() + "' of '" + st.attach->name + "'" : std::string("at the root"),
            " and '", h.name, "' ",
            h.attach ? "at loop '" + h.attach_axis.name() + "' of '" + h.attach->name + "'" : std::string("at the root"),
            ": both must be computed at the same place (compute_at first; a guest at the root that is not an output "
            "goes to its host's place)");
  MLS_CHECK(!reads(*s_, h, st), "compute_with: stage '", h.name, "' reads '", st.name,
            "': each shared iteration runs the host's statements, then the guest's, so the host cannot need the "
            "guest's values");
  if (moves) {  // every other reader must run inside the loop the guest goes to, as compute_at asks
    const std::size_t at = index_of(h.attach->leaves, h.attach_axis);
    for (const auto& other : s_->stages)
      MLS_CHECK(other.get() == node_ || !reads(*s_, *other, st) || computed_inside(*other, *h.attach, at),
                "compute_with: '", st.name, "' would be computed at loop '", h.attach_axis.name(), "' of '",
                h.attach->name, "' with '", h.name, "', but stage '", other->name,
                "' reads it outside that loop (compute_at it there first)");
    st.attach = h.attach;
    st.attach_axis = h.attach_axis;
  }
  MLS_CHECK(!st.intrinsic && !h.intrinsic, "compute_with: stage '", st.intrinsic ? st.name : h.name,
            "' is tensorized: an intrinsic's tile cannot share its loops");
  st.with = host.node_;
  st.with_axis = axis;
}

void Stage::set_scope(Scope scope) {
  StageImpl& st = *node_;
  MLS_CHECK(scope != Scope::Shared, "set_scope: shared scope for stage '", st.name,
            "': a shared tile is made by cache_read(..., Scope::Shared)");
  MLS_CHECK(scope == Scope::Global || !st.is_output, "set_scope: '", st.name,
            "' is an output of the schedule: it lives in main memory (global)");
  MLS_CHECK(st.buffer->scope != Scope::Shared, "set_scope: stage '", st.name, "' is a shared-memory copy");
  st.scope = scope;
}

void Stage::double_buffer() {
  StageImpl& st = *node_;
  MLS_CHECK(st.buffer->scope == Scope::Shared, "double_buffer: stage '", st.name,
            "' is not a shared-memory copy; only a cache_read(..., Scope::Shared) tile has two copies");
  st.double_buffer = true;
}

void Stage::tensorize(const IterVar& axis, const Intrinsic& intrinsic) {
  leaf_pos(*node_, "tensorize", axis);
  MLS_CHECK(intrinsic.update != nullptr, "tensorize: intrinsic '", intrinsic.name,
            "' has no implementation (update)");
  node_->tensorize_axis = axis;
  node_->intrinsic = std::make_shared<const Intrinsic>(intrinsic);
  node_->reset_at = ResetAt::Nest;
}

void Stage::tensorize(const IterVar& axis, const Intrinsic& intrinsic, ResetAt reset) {
  tensorize(axis, intrinsic);
  node_->reset_at = reset;
}

// ---- Schedule -----------------------------------------------------------------------------

Schedule::Schedule(const std::vector<Tensor>& outputs) : s_(std::make_shared<ScheduleImpl>()) {
  MLS_CHECK(!outputs.empty(), "schedule: no output tensors given");
  s_->outputs = outputs;
  std::set<const BufferNode*> outs;
  for (const auto& t : outputs) {
    MLS_CHECK(t.defined(), "schedule: an output tensor is undefined");
    MLS_CHECK(t.op() != nullptr, "schedule: output '", t.name(), "' is a placeholder, not a compute");
    outs.insert(t.buffer().get());
  }
  for (const Tensor& t : topo_order(outputs)) {
    if (!t.op()) continue;
    auto st = std::make_unique<StageImpl>();
    st->name = t.name();
    st->buffer = t.buffer();
    st->root = t.op()->axes;
    if (const auto* r = t.op()->body.as<Reduce>()) st->reduce = r->axes;
    st->body = t.op()->body;
    st->leaves = st->root;
    st->leaves.insert(st->leaves.end(), st->reduce.begin(), st->reduce.end());
    st->all = st->leaves;
    st->is_output = outs.count(t.buffer().get()) > 0;
    s_->stages.push_back(std::move(st));
  }
}

Stage Schedule::operator[](const Tensor& t) const { return Stage(s_, &stage_of(*s_, t, "schedule[]")); }

const std::vector<Tensor>& Schedule::outputs() const { return s_->outputs; }

Tensor Schedule::cache_read(const Tensor& t, const Stage& consumer, const IterVar& axis, std::string name) {
  return cache_read(t, consumer, axis, Scope::Local, std::move(name));
}

Tensor Schedule::cache_read(const Tensor& t, const Stage& consumer, const IterVar& axis, Scope scope,
                            std::string name) {
  return cache_read(t, consumer, axis, scope, {}, std::move(name));
}

Tensor Schedule::cache_read(const Tensor& t, const Stage& consumer, const IterVar& axis, Scope scope,
                            std::vector<int> layout, std::string name) {
  return cache_read(t, consumer, axis, scope, std::move(layout), 0, std::move(name));
}

Tensor Schedule::cache_read(const Tensor& t, const Stage& consumer, const IterVar& axis, Scope scope,
                            std::vector<int> layout, std::int64_t panel, std::string name) {
  MLS_CHECK(t.defined(), "cache_read: the tensor is undefined");
  MLS_CHECK(panel >= 0, "cache_read: panel width ", panel, " for '", t.name(),
            "' must be >= 0 (0: no panels; w: the copy's last dimension in panels of w)");
  MLS_CHECK(panel == 0 || scope != Scope::Shared, "cache_read: panel width ", panel, " for '", t.name(),
            "' with Scope::Shared: a shared tile is stored as its window (panels are for Scope::Local copies)");
  if (layout.empty())
    for (std::size_t d = 0; d < t.ndim(); ++d) layout.push_back(static_cast<int>(d));
  std::vector<int> sorted = layout;
  std::sort(sorted.begin(), sorted.end());
  bool permutation = sorted.size() == t.ndim();
  for (std::size_t d = 0; permutation && d < sorted.size(); ++d) permutation = sorted[d] == static_cast<int>(d);
  std::string layout_text;
  for (std::size_t d = 0; d < layout.size(); ++d) layout_text += (d ? ", " : "") + std::to_string(layout[d]);
  MLS_CHECK(permutation, "cache_read: layout [", layout_text, "] for '", t.name(), "' is not a permutation of its ",
            t.ndim(), " dimensions");
  MLS_CHECK(scope != Scope::Global, "cache_read: scope global for '", t.name(),
            "' is not a cache (main memory is where it is already): use Scope::Local or Scope::Shared");
  MLS_CHECK(consumer.s_ == s_, "cache_read: stage '", consumer.name(), "' belongs to another schedule");
  StageImpl& c = *consumer.node_;
  leaf_pos(c, "cache_read", axis);
  auto it = c.redirect.find(t.buffer().get());
  MLS_CHECK(it == c.redirect.end(), "cache_read: stage '", c.name, "' already reads '", t.name(),
            "' through '", it == c.redirect.end() ? "" : it->second->name, "'");
  bool direct = false;
  for_each_expr(c.body, [&](const Expr& e) {
    if (const auto* l = e.as<Load>()) direct = direct || l->buffer == t.buffer();
  });
  MLS_CHECK(direct, "cache_read: stage '", c.name, "' does not read '", t.name(), "'");
  auto st = std::make_unique<StageImpl>();
  st->name = !name.empty() ? std::move(name) : t.name() + (scope == Scope::Shared ? "_shared" : "L");
  // The copy's dimension d is t's dimension layout[d]: its root axis d walks that dimension.
  std::vector<std::int64_t> shape;
  for (int d : layout) shape.push_back(t.shape()[static_cast<std::size_t>(d)]);
  st->buffer = std::make_shared<const BufferNode>(BufferNode{st->name, shape, scope, nullptr});
  std::vector<Expr> idx(t.ndim());
  for (std::size_t d = 0; d < t.ndim(); ++d) {
    st->root.push_back(fresh("ax" + std::to_string(d), shape[d], IterKind::DataPar));
    idx[static_cast<std::size_t>(layout[d])] = Expr(st->root.back());
  }
  st->body = t.load(idx);
  st->layout = layout;
  st->panel = panel;
  st->leaves = st->all = st->root;
  st->cache_of = t.buffer().get();
  st->attach = &c;
  st->attach_axis = axis;
  Tensor out(st->buffer);
  c.redirect[t.buffer().get()] = st.get();
  insert_before(*s_, &c, std::move(st));
  return out;
}

Tensor Schedule::cache_write(const Tensor& t, std::string name) {
  StageImpl& c = stage_of(*s_, t, "cache_write");
  for (const auto& r : c.reduce)
    MLS_CHECK(index_of(c.leaves, r) < c.leaves.size() && !c.kinds.count(r.get()), "cache_write: reduction axis '",
              r.name(), "' of stage '", c.name, "' is already scheduled; call cache_write first");
  MLS_CHECK(attached_to(*s_, c).empty(), "cache_write: stage '", c.name,
            "' already has stages computed inside it; call cache_write first");
  MLS_CHECK(!c.intrinsic, "cache_write: stage '", c.name, "' is tensorized; call cache_write first");
  const auto* acc = c.body.as<Reduce>();
  MLS_CHECK(!acc || !acc->combiner.accumulate, "cache_write: stage '", c.name,
            "' accumulates into its output (sum_into): a local copy would start from nothing");
  auto st = std::make_unique<StageImpl>();
  st->name = name.empty() ? c.name + "L" : std::move(name);
  st->buffer = std::make_shared<const BufferNode>(BufferNode{st->name, t.shape(), Scope::Local, nullptr});
  detail::VarMap sub;
  std::vector<Expr> idx;
  for (const auto& r : c.root) {
    st->root.push_back(fresh(r.name(), r.extent(), IterKind::DataPar));
    sub[r.var().get()] = Expr(st->root.back());
    idx.emplace_back(r);
  }
  st->reduce = c.reduce;
  st->body = detail::substitute(c.body, sub);
  st->leaves = st->root;
  st->leaves.insert(st->leaves.end(), c.reduce.begin(), c.reduce.end());
  st->all = st->leaves;
  st->redirect = std::move(c.redirect);
  c.redirect.clear();
  for (const auto& r : c.reduce) {
    c.leaves.erase(c.leaves.begin() + static_cast<std::ptrdiff_t>(index_of(c.leaves, r)));
    c.all.erase(c.all.begin() + static_cast<std::ptrdiff_t>(index_of(c.all, r)));
  }
  c.reduce.clear();
  c.body = Tensor(st->buffer).load(idx);
  Tensor out(st->buffer);
  insert_before(*s_, &c, std::move(st));
  return out;
}

namespace {
/// The root axes `a` derives from, and whether a fuse lies on the way.
void roots_of(const StageImpl& st, const IterVar& a, std::vector<IterVar>& roots, bool& fused) {
  for (const auto& rel : st.relations) {
    if (const auto* s = std::get_if<SplitRel>(&rel); s && (s->outer.same_as(a) || s->inner.same_as(a))) {
      roots_of(st, s->parent, roots, fused);
      return;
    }
    if (const auto* f = std::get_if<FuseRel>(&rel); f && f->fused.same_as(a)) {
      fused = true;
      roots_of(st, f->outer, roots, fused);
      roots_of(st, f->inner, roots, fused);
      return;
    }
  }
  if (index_of(roots, a) == roots.size()) roots.push_back(a);
}
}  // namespace

Tensor Schedule::rfactor(const Tensor& t, const IterVar& axis) {
  StageImpl& c = stage_of(*s_, t, "rfactor");
  leaf_pos(c, "rfactor", axis);
  MLS_CHECK(axis.kind() == IterKind::Reduce, "rfactor: axis '", axis.name(), "' of stage '", c.name,
            "' is not a reduction axis");
  MLS_CHECK(attached_to(*s_, c).empty(), "rfactor: stage '", c.name,
            "' already has stages computed inside it; call rfactor first");
  MLS_CHECK(!c.intrinsic, "rfactor: stage '", c.name, "' is tensorized; call rfactor first");
  const auto* acc = c.body.as<Reduce>();
  MLS_CHECK(!acc || !acc->combiner.accumulate, "rfactor: stage '", c.name,
            "' accumulates into its output (sum_into): its partial sums would each start from it");
  std::vector<IterVar> roots;
  bool fused = false;
  roots_of(c, axis, roots, fused);
  MLS_CHECK(!fused && roots.size() == 1, "rfactor: axis '", axis.name(), "' of stage '", c.name,
            "' comes from a fuse; rfactor needs a reduction axis or a split part of one");
  const IterVar r = roots[0];
  const auto* red = c.body.as<Reduce>();
  // The leaves under r (no fuse among them), each with a fresh variable in the new stage.
  IterVar a1 = fresh(axis.name(), axis.extent(), IterKind::DataPar);
  std::vector<IterVar> new_reduce;
  std::map<const IterVarNode*, Expr> val;
  detail::Ranges ranges;
  for (const auto& leaf : c.leaves) {
    if (leaf.kind() != IterKind::Reduce) continue;
    std::vector<IterVar> lr;
    bool lf = false;
    roots_of(c, leaf, lr, lf);
    if (index_of(lr, r) == lr.size()) continue;
    MLS_CHECK(!lf, "rfactor: reduction axis '", r.name(), "' of stage '", c.name,
              "' was fused (axis '", leaf.name(), "'); rfactor needs splits only");
    IterVar nv = leaf.same_as(axis) ? a1 : fresh(leaf.name(), leaf.extent(), IterKind::Reduce);
    if (!leaf.same_as(axis)) new_reduce.push_back(nv);
    val[leaf.get()] = Expr(nv);
    ranges[nv.var().get()] = {0, nv.extent() - 1};
  }
  // r's value from its parts; a part past its extent (a split's tail) must not count.
  Expr in_range;
  for (auto it = c.relations.rbegin(); it != c.relations.rend(); ++it)
    if (const auto* s = std::get_if<SplitRel>(&*it); s && val.count(s->outer.get()) && val.count(s->inner.get())) {
      const Expr v = detail::simplify(val[s->outer.get()] * Expr(s->factor) + val[s->inner.get()]);
      val[s->parent.get()] = v;
      const auto b = detail::bound(v, ranges);
      if (!b || b->hi >= s->parent.extent()) {
        const Expr cond = v < Expr(s->parent.extent());
        in_range = in_range.defined() ? (in_range && cond) : cond;
      }
    }
  detail::VarMap sub;
  sub[r.var().get()] = val.at(r.get());
  for (const auto& o : red->axes) {
    if (o.same_as(r)) continue;
    new_reduce.push_back(fresh(o.name(), o.extent(), IterKind::Reduce));
    sub[o.var().get()] = Expr(new_reduce.back());
  }
  auto st = std::make_unique<StageImpl>();
  st->name = c.name + "_rf";
  std::vector<std::int64_t> shape{axis.extent()};
  st->root.push_back(a1);
  std::vector<Expr> rf_idx{Expr()};
  for (const auto& d : c.root) {
    st->root.push_back(fresh(d.name(), d.extent(), IterKind::DataPar));
    sub[d.var().get()] = Expr(st->root.back());
    shape.push_back(d.extent());
    rf_idx.emplace_back(d);
  }
  Expr src = detail::substitute(red->source, sub);
  if (in_range.defined()) src = select(in_range, src, Expr(red->combiner.init));
  st->body = new_reduce.empty() ? src : reduce(red->combiner, src, new_reduce);
  st->reduce = new_reduce;
  st->buffer = std::make_shared<const BufferNode>(BufferNode{st->name, shape, Scope::Global, nullptr});
  st->leaves = st->root;
  st->leaves.insert(st->leaves.end(), new_reduce.begin(), new_reduce.end());
  st->all = st->leaves;
  st->redirect = std::move(c.redirect);
  // The original stage now reduces the partial results over the new axis.
  IterVar a2 = fresh(axis.name(), axis.extent(), IterKind::Reduce);
  rf_idx[0] = Expr(a2);
  c.redirect.clear();
  c.body = reduce(red->combiner, Tensor(st->buffer).load(rf_idx), {a2});
  c.reduce = {a2};
  std::erase_if(c.leaves, [](const IterVar& x) { return x.kind() == IterKind::Reduce; });
  std::erase_if(c.all, [](const IterVar& x) { return x.kind() == IterKind::Reduce; });
  std::erase_if(c.relations, [](const Relation& rel) {
    const auto* s = std::get_if<SplitRel>(&rel);
    const auto* f = std::get_if<FuseRel>(&rel);
    return (s ? s->parent : f->outer).kind() == IterKind::Reduce;
  });
  for (auto it = c.kinds.begin(); it != c.kinds.end();)
    it = it->first->kind == IterKind::Reduce ? c.kinds.erase(it) : std::next(it);
  c.leaves.push_back(a2);
  c.all.push_back(a2);
  Tensor out(st->buffer);
  insert_before(*s_, &c, std::move(st));
  return out;
}

}  // namespace mls::kernels::te
