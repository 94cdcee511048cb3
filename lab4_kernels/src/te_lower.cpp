// Student file of lab 4: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 4 part 2. Lowering: a schedule -> its loop nest (mls/kernels/loop_ir.hpp). Yours: what a
// split means in the loop nest (axis_values: the extents of its parts, the value of the axis it
// split; Lowerer::lower_stage: the guard of its tail). The rest is given.
//
// Each stage becomes a nest of its leaf loops. The value of each root axis is rebuilt from the
// leaves through the stage's relations (split: outer * factor + inner; fuse: fused // e, fused %
// e). A stage computed at a consumer's loop covers only the window (region) of its tensor that
// one iteration of that loop reads: region bounds come from the affine form of the consumer's
// load indices, the loops inside the attach point ranging over their extents. A root axis of
// such a stage is then region.min + (its value from the leaves); a Local stage stores into a
// tile of the region's shape at the relative index, and its consumer's loads subtract the
// region's min. A reduction's init runs over the data-parallel loops inside its first reduction
// loop, just before that loop. Tails are guards that interval bounds could not prove away. A loop
// of one iteration is left out (its variable is 0).
#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <set>

#include "mls/common/error.hpp"
#include "mls/kernels/schedule.hpp"
#include "te_internal.hpp"
#include "te_schedule_impl.hpp"

namespace mls::kernels::te {

namespace {
using detail::simplify;

/// The window of a stage's tensor that one iteration of its attach loop covers.
struct StageInfo {
  Buffer actual;                     // where the stage stores
  std::vector<Expr> min;             // per root (buffer) dimension
  std::vector<std::int64_t> extent;  // per root dimension
  bool relative = false;             // a Local tile of the window: indices minus `min`
};

/// A condition that must hold for the innermost statement to run, and the leaf position of the
/// innermost loop whose variable it reads (-1: none of the stage's own loops).
struct Guard {
  Expr cond;
  int level = -1;
  bool data = true;  // from a data-parallel axis (the init nest needs these only)
};

/// The dimension of the tensor a stage copies that the stage's dimension d holds (cache_read's
/// layout; d itself for every other stage).
std::size_t source_dim(const StageImpl& st, std::size_t d) {
  return st.layout.empty() ? d : static_cast<std::size_t>(st.layout[d]);
}

/// A copy's indices (relative to its window, in the copy's order) where a copy stored in panels
/// (cache_read's `panel`) keeps them: [i / panel][the others][i % panel] for its last index i. An
/// affine i = panel * hi + lo with lo's terms and constant provably in [0, panel) under `ranges`
/// gives hi and lo themselves (no division, so a tensorized tile reads affine indices); anything
/// else the floor division and modulo. Other stages: the indices as they are.
std::vector<Expr> panel_indices(const StageImpl& st, std::vector<Expr> idx, const detail::Ranges& ranges) {
  if (st.panel == 0 || idx.empty()) return idx;
  const std::int64_t p = st.panel;
  const Expr last = idx.back();
  const detail::Affine a = detail::to_affine(last);
  detail::Affine hi, lo;
  for (const auto& t : a.terms) {
    if (t.coeff % p == 0) {
      detail::Term q = t;
      q.coeff = t.coeff / p;
      hi.add(q, 1);
    } else {
      lo.add(t, 1);
    }
  }
  hi.constant = detail::floordiv(a.constant, p);
  lo.constant = a.constant - hi.constant * p;
  const Expr lo_e = simplify(detail::from_affine(lo));
  const auto b = detail::bound(lo_e, ranges);
  const bool exact = b && b->lo >= 0 && b->hi < p;
  std::vector<Expr> out;
  out.push_back(exact ? simplify(detail::from_affine(hi)) : simplify(last / Expr(p)));
  for (std::size_t d = 0; d + 1 < idx.size(); ++d) out.push_back(idx[d]);
  out.push_back(exact ? lo_e : simplify(last % Expr(p)));
  return out;
}

std::string names_of(const std::vector<IterVar>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i].name();
  return s;
}

/// The extent of every axis of `st` (forward through its relations, from the root extents of
/// `inf`) and the value of every axis in terms of the leaf variables (backward).
/// Yours, the two split branches. Forward: a split's parts get their extents from the parent's
/// (which may be a window's, not the axis's own: use ext, never IterVar::extent): inner `factor`,
/// outer ceil(parent / factor). Backward (relations newest first, so a part split again already
/// has its value): parent = simplify(outer * factor + inner), written in that order (the printed
/// nests read `yo*8 + yi`). Fuse, given, shows both directions.
void axis_values(const StageImpl& st, const StageInfo& inf, std::map<const IterVarNode*, std::int64_t>& ext,
                 std::map<const IterVarNode*, Expr>& val) {
  for (std::size_t i = 0; i < st.root.size(); ++i) ext[st.root[i].get()] = inf.extent[i];
  for (const auto& r : st.reduce) ext[r.get()] = r.extent();
  for (const auto& rel : st.relations) {
    if (const auto* f = std::get_if<FuseRel>(&rel)) {
      ext[f->fused.get()] = ext.at(f->outer.get()) * ext.at(f->inner.get());
      continue;
    }
    [[maybe_unused]] const SplitRel& s = std::get<SplitRel>(rel);
    // BEGIN SOLUTION
    ext[s.outer.get()] = (ext.at(s.parent.get()) + s.factor - 1) / s.factor;
    ext[s.inner.get()] = s.factor;
    // END SOLUTION
  }
  for (const auto& l : st.leaves)  // a loop of one iteration is elided: its variable is 0
    val[l.get()] = ext.at(l.get()) == 1 ? Expr(0) : Expr(l.var());
  for (auto it = st.relations.rbegin(); it != st.relations.rend(); ++it) {
    if (const auto* f = std::get_if<FuseRel>(&*it)) {
      const Expr e(ext.at(f->inner.get()));
      val[f->outer.get()] = simplify(val.at(f->fused.get()) / e);
      val[f->inner.get()] = simplify(val.at(f->fused.get()) % e);
      continue;
    }
    [[maybe_unused]] const SplitRel& s = std::get<SplitRel>(*it);
    // BEGIN SOLUTION
    val[s.parent.get()] = simplify(val.at(s.outer.get()) * Expr(s.factor) + val.at(s.inner.get()));
    // END SOLUTION
  }
}

/// The launch rule of bound loops (Stage::bind): a stage's bound loops are its outermost ones, and a
/// stage computed inside another binds none.
void check_launch_rule(const StageImpl& st, const std::vector<std::int64_t>& ext) {
  const IterVar* unbound = nullptr;  // the outermost unbound loop (of more than one iteration)
  for (std::size_t i = 0; i < st.leaves.size(); ++i) {
    const IterVar& l = st.leaves[i];
    const ThreadTag tag = bound_tag(st, l);
    if (tag == ThreadTag::None) {
      if (!unbound && ext[i] > 1) unbound = &l;
      continue;
    }
    MLS_CHECK(!st.attach, "bind: axis '", l.name(), "' of stage '", st.name, "' is bound to ", thread_tag_name(tag),
              ", but the stage is computed inside '", st.attach ? st.attach->name : "",
              "' (compute_at or cache_read), whose threads run it: bind the loops of '",
              st.attach ? st.attach->name : "", "' instead");
    MLS_CHECK(!unbound, "bind: axis '", l.name(), "' of stage '", st.name, "' is bound to ", thread_tag_name(tag),
              " but lies inside the unbound loop '", unbound ? unbound->name() : "", "' (its axes: ",
              names_of(st.leaves), "): a kernel launches its bound loops as the grid, so they must be the "
              "stage's outermost loops; reorder them outwards");
  }
}

class Lowerer {
 public:
  explicit Lowerer(const ScheduleImpl& s) : s_(s) {}
  Stmt run();

 private:
  struct Nest;  // the per-stage state of one lower_stage call
  Stmt lower_stage(const StageImpl& st);
  void prepare(const StageImpl& st, Nest& n, const Nest* host, std::size_t shared);
  void check_guest(const StageImpl& host, const Nest& hn, const Nest& gn) const;
  Stmt guest_part(Nest& g);
  void infer_region(const StageImpl& st, const Nest& n, const StageImpl& child, std::size_t pos);
  void check_reads(const StageImpl& st, const StageInfo& inf) const;
  void check_cover(const StageImpl& st, const Nest& n, const StageImpl& c, std::size_t pos) const;
  Stmt build(Nest& n, const std::vector<int>& positions, std::size_t k, bool init);
  Stmt innermost(const Nest& n, bool init) const;
  Stmt init_nest(Nest& n);
  void check_tensorize(Nest& n) const;
  Stmt tensorized(const Nest& n, CallPart part) const;

  const ScheduleImpl& s_;
  std::map<const StageImpl*, StageInfo> info_;
  detail::Ranges scope_;  // ranges of the loops around the stage being lowered
  detail::Ranges thread_scope_;  // those of them bound to threadIdx
};

struct Lowerer::Nest {
  const StageImpl* st = nullptr;
  std::vector<std::int64_t> ext;      // per leaf
  std::vector<Var> vars;              // per leaf
  std::vector<Guard> guards;
  std::vector<std::vector<const StageImpl*>> children;  // per leaf position
  std::vector<Expr> store_idx;
  Expr src;                           // the value (or the reduction's source), loads redirected
  Combiner combiner;
  bool is_reduce = false;
  bool has_init = false;              // a reduction that starts from its init (not sum_into's output)
  int first_reduce = 0;               // position of the first reduction leaf (n if none)
  int tensorize_pos = -1;
  std::size_t shared = 0;             // a guest (compute_with): its first `shared` leaves are its host's loops
  std::vector<std::shared_ptr<Nest>> guests;  // the stages computed with this one, in stage order
  bool reset_in_tile = false;         // ResetAt::Tile for a reduction whose first loop is outside the tile
};

Stmt Lowerer::run() {
  std::vector<Stmt> body;
  for (const auto& st : s_.stages)
    if (!st->attach && !st->with) body.push_back(lower_stage(*st));  // a guest is lowered inside its host
  Stmt s = make_seq(body);
  for (auto it = s_.stages.rbegin(); it != s_.stages.rend(); ++it) {
    const StageImpl& st = **it;
    MLS_CHECK(info_.count(&st), "lower: stage '", st.name, "' is computed at '", st.attach->name,
              "', which was not lowered");
    if (!st.is_output && !info_.at(&st).relative) s = make_allocate(info_.at(&st).actual, s);
  }
  return s;
}

/// The loop nest of one stage (and of the stages computed inside it): its leaves as loops, the
/// root axes' values from axis_values, the guards its tails need, its store. Yours, one line in
/// it: the guard of a split's tail (below, "Yours"); the rest is given.
Stmt Lowerer::lower_stage(const StageImpl& st) {
  Nest n;
  prepare(st, n, nullptr, 0);
  // The stages computed with this one (compute_with): their nests, the shared leaves this one's.
  for (const auto& g : s_.stages) {
    if (g->with != &st) continue;
    MLS_CHECK(g->attach == st.attach && (!g->attach || g->attach_axis.same_as(st.attach_axis)), "compute_with: stage '",
              g->name, "' and its host '", st.name, "' are computed at different places (compute_at moved one since)");
    std::size_t k = 0;
    while (k < st.leaves.size() && !st.leaves[k].same_as(g->with_axis)) ++k;
    MLS_CHECK(k < st.leaves.size(), "compute_with: stage '", g->name, "' shares the loops of '", st.name,
              "' down to axis '", g->with_axis.name(), "', which was split or fused away since (its axes: ",
              names_of(st.leaves), ")");
    auto gn = std::make_shared<Nest>();
    prepare(*g, *gn, &n, k + 1);
    check_guest(st, n, *gn);
    n.guests.push_back(gn);
  }
  const std::size_t nl = st.leaves.size();
  std::vector<int> all(nl);
  for (std::size_t i = 0; i < nl; ++i) all[i] = static_cast<int>(i);
  Stmt body = build(n, all, 0, false);
  std::vector<Stmt> pre;  // inits of reductions whose first loop is the outermost
  if (n.has_init && n.first_reduce == 0 && !n.reset_in_tile) pre.push_back(init_nest(n));
  for (const auto& g : n.guests)
    if (g->has_init && g->first_reduce == 0) pre.push_back(init_nest(*g));
  if (!pre.empty()) {
    pre.push_back(body);
    body = make_seq(pre);
  }
  std::vector<Expr> top;
  for (const auto& g : n.guards)
    if (g.level < 0) top.push_back(g.cond);
  for (std::size_t i = 0; i < top.size(); ++i) body = make_if(top[top.size() - 1 - i], body);
  return body;
}

/// A guest's nest (compute_with) fits its host's: the shared loops have the same extents (checked
/// in prepare), the same guards at those loops and around the nest, no stage computed at a shared
/// loop of the guest, and every stage it reads at the same place is lowered before the host.
void Lowerer::check_guest(const StageImpl& host, const Nest& hn, const Nest& gn) const {
  const StageImpl& g = *gn.st;
  auto guards_of = [&](const Nest& n) {
    std::set<std::string> out;
    for (const auto& x : n.guards)
      if (x.level < static_cast<int>(gn.shared))
        out.insert(std::to_string(x.level) + ": " + to_string(x.cond));
    return out;
  };
  const std::set<std::string> hg = guards_of(hn), gg = guards_of(gn);
  std::string diff;
  for (const auto& x : hg)
    if (!gg.count(x)) diff += " '" + host.name + "' has " + x.substr(x.find(": ") + 2) + ";";
  for (const auto& x : gg)
    if (!hg.count(x)) diff += " '" + g.name + "' has " + x.substr(x.find(": ") + 2) + ";";
  MLS_CHECK(diff.empty(), "compute_with: stage '", g.name, "' and its host '", host.name,
            "' have different tails on the loops they share (down to '", host.leaves[gn.shared - 1].name(), "'):", diff,
            " split both alike, or share fewer loops");
  // A guest reads its host only at the element the host has just stored, sharing all its loops.
  const Buffer& hb = info_.at(&host).actual;
  std::string hkey;
  for (const auto& i : hn.store_idx) hkey += detail::structural_key(i) + "|";
  for_each_expr(gn.src, [&](const Expr& e) {
    const auto* l = e.as<Load>();
    if (!l || l->buffer != hb) return;
    std::string key, text;
    for (const auto& i : l->indices) {
      key += detail::structural_key(i) + "|";
      text += "[" + to_string(i) + "]";
    }
    MLS_CHECK(!hn.is_reduce && gn.shared == host.leaves.size() && key == hkey, "compute_with: stage '", g.name,
              "' reads its host '", host.name, "' at ", hb->name, text, ", not an element the host has just computed "
              "(a guest may read its host only at the element the host stores, sharing all of its loops, and not a "
              "reduction's: its element is final only after its loops)");
  });
  for (std::size_t q = 0; q < gn.shared; ++q)
    MLS_CHECK(gn.children[q].empty(), "compute_with: stage '", gn.children[q].front()->name,
              "' is computed at loop '", g.leaves[q].name(), "' of '", g.name, "', a loop it shares with '", host.name,
              "': compute it at the host's loop, or at one of '", g.name, "' inside the shared ones");
  auto index = [&](const StageImpl* x) {
    std::size_t i = 0;
    while (i < s_.stages.size() && s_.stages[i].get() != x) ++i;
    return i;
  };
  for_each_expr(g.body, [&](const Expr& e) {
    const auto* l = e.as<Load>();
    const StageImpl* p = l ? producer_of(s_, g, l->buffer.get()) : nullptr;
    if (!p || p == &host || p->attach != g.attach || (p->attach && !p->attach_axis.same_as(g.attach_axis))) return;
    const StageImpl* at = p->with ? p->with : p;  // where p's statements are
    MLS_CHECK(index(at) < index(&host), "compute_with: stage '", g.name, "' reads '", p->name,
              "', which is computed after its host '", host.name, "': the host must come after every stage the "
              "guest reads at the same place");
  });
}

/// The guest's statements inside its host's loop at its last shared leaf: its init when its first
/// reduction loop is the first one it does not share, then its own loops.
Stmt Lowerer::guest_part(Nest& g) {
  std::vector<int> rest;
  for (std::size_t i = g.shared; i < g.st->leaves.size(); ++i) rest.push_back(static_cast<int>(i));
  std::vector<Stmt> body;
  if (g.has_init && g.first_reduce == static_cast<int>(g.shared)) body.push_back(init_nest(g));
  body.push_back(build(g, rest, 0, false));
  return make_seq(body);
}

/// A stage's nest state: windows, values of its root axes, guards, its children's windows, its
/// value with loads of local tiles redirected. A guest (host given) takes the host's variables for
/// its first `shared` leaves.
void Lowerer::prepare(const StageImpl& st, Nest& n, const Nest* host, std::size_t shared) {
  StageInfo& inf = info_[&st];
  if (!st.attach) {
    inf.actual = st.buffer;
    inf.extent.clear();
    for (const auto& r : st.root) inf.extent.push_back(r.extent());
    inf.min.assign(st.root.size(), Expr(0));
  }
  n.st = &st;
  n.shared = shared;
  const std::size_t nl = st.leaves.size();
  std::map<const IterVarNode*, std::int64_t> ext;
  std::map<const IterVarNode*, Expr> val;
  axis_values(st, inf, ext, val);
  if (host) {  // the shared leaves are the host's loops
    detail::VarMap to_host;
    for (std::size_t q = 0; q < shared; ++q) {
      MLS_CHECK(ext.at(st.leaves[q].get()) == host->ext[q], "compute_with: loop '", st.leaves[q].name(), "' of '",
                st.name, "' has ", ext.at(st.leaves[q].get()), " iterations, the loop '", host->st->leaves[q].name(),
                "' of '", host->st->name, "' it would share has ", host->ext[q]);
      to_host[st.leaves[q].var().get()] = host->ext[q] == 1 ? Expr(0) : Expr(host->vars[q]);
    }
    for (auto& [axis, v] : val) v = simplify(detail::substitute(v, to_host));
  }
  detail::Ranges ranges = scope_;
  for (std::size_t q = 0; q < nl; ++q) {
    n.ext.push_back(ext.at(st.leaves[q].get()));
    n.vars.push_back(q < shared ? host->vars[q] : st.leaves[q].var());
    ranges[n.vars.back().get()] = {0, n.ext.back() - 1};
  }
  check_launch_rule(st, n.ext);
  // Guards: a leaf value past its axis's extent (a tail), a window past the tensor.
  auto level_of = [&](const Expr& e) {
    int lv = -1;
    for (const auto* v : detail::vars_of(e))
      for (std::size_t i = 0; i < nl; ++i)
        if (n.vars[i].get() == v) lv = std::max(lv, static_cast<int>(i));
    return lv;
  };
  // The parent of an exact split (its factor divides its extent) needs no guard: the outer part
  // stays below its own extent (its loop's range, or the guard of its own split), so
  // outer * factor + inner stays below outer's extent * factor, the parent's. (Interval bounds
  // cannot see this once the outer part is split again: yp = yc * 4 + yr ranges past yp's extent.)
  // A condition that is also the guard of an inexact split (the same value and limit: an outer part
  // of one iteration folded away) stays.
  std::set<std::string> implied, kept;
  for (const auto& rel : st.relations)
    if (const auto* s = std::get_if<SplitRel>(&rel)) {
      const std::int64_t e = ext.at(s->parent.get());
      (e % s->factor == 0 ? implied : kept).insert(detail::structural_key(val.at(s->parent.get())) + " < " + std::to_string(e));
    }
  for (const auto& k : kept) implied.erase(k);
  // e < limit with e = q + r, q's coefficients and constant multiples of g, r in [0, g) and g dividing
  // limit: e < limit exactly when q < limit (q <= limit - g gives e < limit, q >= limit gives e >= limit).
  // The innermost loops' terms go into r while that holds, so the guard reads outer loops only: a copy
  // of whole panels is guarded panel by panel (xc*64 + bp*32 < 96), not lane by lane inside its vector
  // loop (xc*64 + bp*32 + bi < 96).
  auto coarse = [&](const Expr& e, std::int64_t limit) {
    detail::Affine q = detail::to_affine(e);
    std::int64_t rlo = 0, rhi = 0;  // r's range so far
    while (q.terms.size() > 1) {
      std::size_t inner = q.terms.size();
      int deepest = -1;
      for (std::size_t t = 0; t < q.terms.size(); ++t) {
        const int lv = q.terms[t].var ? level_of(Expr(q.terms[t].atom)) : -1;
        if (lv > deepest) deepest = lv, inner = t;
      }
      if (inner == q.terms.size()) break;  // no term of this stage's loops
      const detail::Term& t = q.terms[inner];
      const auto r = ranges.find(t.var);
      if (r == ranges.end() || t.coeff <= 0) break;
      std::int64_t g = std::abs(q.constant);
      for (std::size_t u = 0; u < q.terms.size(); ++u)
        if (u != inner) g = std::gcd(g, std::abs(q.terms[u].coeff));
      const std::int64_t lo = rlo + t.coeff * r->second.lo, hi = rhi + t.coeff * r->second.hi;
      if (g <= 1 || limit % g != 0 || lo < 0 || hi >= g) break;
      rlo = lo;
      rhi = hi;
      q.terms.erase(q.terms.begin() + static_cast<std::ptrdiff_t>(inner));
    }
    return simplify(detail::from_affine(q));
  };
  auto guard_lt = [&](const Expr& e, std::int64_t limit, bool data) {
    if (implied.count(detail::structural_key(e) + " < " + std::to_string(limit))) return;
    auto b = detail::bound(e, ranges);
    if (b && b->hi < limit) return;
    const Expr c = coarse(e, limit);
    n.guards.push_back({c < Expr(limit), level_of(c), data});
  };
  auto guard_ge0 = [&](const Expr& e) {
    auto b = detail::bound(e, ranges);
    if (!b || b->lo < 0) n.guards.push_back({e >= Expr(0), level_of(e), true});
  };
  detail::VarMap sub;
  for (std::size_t i = 0; i < st.root.size(); ++i) {
    const Expr rel = val.at(st.root[i].get());
    const Expr abs = simplify(inf.min[i] + rel);
    sub[st.root[i].var().get()] = abs;
    n.store_idx.push_back(inf.relative ? rel : abs);
    if (st.attach) {
      guard_ge0(abs);
      guard_lt(abs, st.root[i].extent(), true);
    }
  }
  if (inf.relative) n.store_idx = panel_indices(st, std::move(n.store_idx), ranges);
  for (const auto& r : st.reduce) sub[r.var().get()] = val.at(r.get());
  // Each split's parent (a root axis or an inner part split again) stays below its extent.
  for (const auto& rel : st.relations) {
    const auto* s = std::get_if<SplitRel>(&rel);
    if (!s) continue;
    // Yours: the tail of a split whose factor does not divide its parent's extent. Hint:
    // guard_lt(value, limit, data) adds the guard `value < limit` unless interval bounds prove it
    // (so an exact split gets none); `data`: the parent is data-parallel (a reduction's init nest
    // needs only those guards).
    // BEGIN SOLUTION
    guard_lt(val.at(s->parent.get()), ext.at(s->parent.get()), s->parent.kind() == IterKind::DataPar);
    // END SOLUTION
  }
  const auto* red = st.body.as<Reduce>();
  n.is_reduce = red != nullptr;
  if (red) n.combiner = red->combiner;
  n.has_init = red && !red->combiner.accumulate;
  MLS_CHECK(n.has_init || !red || st.is_output, "lower: stage '", st.name,
            "' accumulates into its own value (sum_into) but is not an output: only an output has a value before it");
  n.src = detail::substitute(red ? red->source : st.body, sub);
  n.first_reduce = static_cast<int>(nl);
  for (std::size_t i = 0; i < nl; ++i)
    if (st.leaves[i].kind() == IterKind::Reduce) {
      n.first_reduce = static_cast<int>(i);
      break;
    }
  // The stages computed inside this one: their windows, then this stage's loads of them.
  n.children.resize(nl);
  for (const auto& c : s_.stages) {
    if (c->attach != &st) continue;
    std::size_t pos = 0;
    while (pos < nl && !st.leaves[pos].same_as(c->attach_axis)) ++pos;
    MLS_CHECK(pos < nl, "compute_at: stage '", c->name, "' is computed at axis '",
              c->attach_axis.name(), "' of '", st.name, "', which was split or fused away since (its axes: ",
              names_of(st.leaves), ")");
    infer_region(st, n, *c, pos);
    n.children[pos].push_back(c.get());
  }
  check_reads(st, inf);
  n.src = detail::rewrite_loads(n.src, [&](const Load& l) -> Expr {
    const StageImpl* p = producer_of(s_, st, l.buffer.get());
    if (!p || !info_.count(p) || !info_.at(p).relative) return Expr();
    const StageInfo& pi = info_.at(p);
    std::vector<Expr> idx;  // the copy's dimension d reads the tensor's dimension p->layout[d]
    for (std::size_t d = 0; d < l.indices.size(); ++d)
      idx.push_back(simplify(l.indices[source_dim(*p, d)] - pi.min[d]));
    return Tensor(pi.actual).load(panel_indices(*p, std::move(idx), ranges));
  });
  if (st.intrinsic) check_tensorize(n);
}

void Lowerer::check_tensorize(Nest& n) const {
  const StageImpl& st = *n.st;
  const std::size_t nl = st.leaves.size();
  std::size_t t = 0;
  while (t < nl && !st.leaves[t].same_as(st.tensorize_axis)) ++t;
  MLS_CHECK(t < nl, "tensorize: axis '", st.tensorize_axis.name(), "' of stage '", st.name,
            "' was split or fused away since (its axes: ", names_of(st.leaves), ")");
  n.tensorize_pos = static_cast<int>(t);
  for (const auto& g : n.guards)
    MLS_CHECK(g.level < n.tensorize_pos, "tensorize: stage '", st.name, "' has a tail inside the tile from axis '",
              st.leaves[t].name(), "' (guard ", to_string(g.cond), "): the tile's extents must divide the axes");
  for (std::size_t q = t; q < nl; ++q)
    MLS_CHECK(n.children[q].empty(), "tensorize: stage '", n.children[q].front()->name,
              "' is computed inside the tile of '", st.name, "' (at axis '", st.leaves[q].name(), "')");
  tensorized(n, CallPart::Update);  // the pattern checks, before anything is emitted
  MLS_CHECK(!n.has_init || n.first_reduce <= n.tensorize_pos || st.intrinsic->reset,
            "tensorize: the tile of stage '", st.name, "' from axis '", st.leaves[t].name(),
            "' holds the start of its reduction, and intrinsic '", st.intrinsic->name, "' has no reset");
  if (st.reset_at == ResetAt::Tile && n.has_init) {  // sum_into: nothing to reset
    MLS_CHECK(st.intrinsic->reset, "tensorize: ResetAt::Tile on stage '", st.name, "', and intrinsic '",
              st.intrinsic->name, "' has no reset");
    n.reset_in_tile = n.first_reduce < n.tensorize_pos;  // else the tile holds the start: reset before each call
  }
}

void Lowerer::infer_region(const StageImpl& st, const Nest& n, const StageImpl& c, std::size_t pos) {
  detail::Ranges inner;
  std::vector<const VarNode*> inner_vars;
  for (std::size_t i = pos + 1; i < n.vars.size(); ++i) {
    inner[n.vars[i].get()] = {0, n.ext[i] - 1};
    inner_vars.push_back(n.vars[i].get());
  }
  // A shared tile serves every thread of the block: the loops bound to threadIdx around the attach
  // point vary over it too (this stage's, and those of the stages it is computed in).
  if (c.buffer->scope == Scope::Shared) {
    for (std::size_t i = 0; i <= pos && i < n.vars.size(); ++i)
      if (is_thread_index(bound_tag(st, st.leaves[i]))) {
        inner[n.vars[i].get()] = {0, n.ext[i] - 1};
        inner_vars.push_back(n.vars[i].get());
      }
    for (const auto& [v, r] : thread_scope_) {
      inner[v] = r;
      inner_vars.push_back(v);
    }
  }
  const std::size_t nd = c.root.size();
  struct Dim {
    detail::Affine outer;
    std::int64_t lo = 0, hi = 0;
    bool full = false;
  };
  std::vector<Dim> dims(nd);
  bool any = false;
  auto is_inner = [&](const VarNode* v) {
    return std::find(inner_vars.begin(), inner_vars.end(), v) != inner_vars.end();
  };
  for_each_expr(n.src, [&](const Expr& e) {
    const auto* l = e.as<Load>();
    if (!l || producer_of(s_, st, l->buffer.get()) != &c) return;
    for (std::size_t d = 0; d < nd; ++d) {
      Dim cur;
      const Expr& index = l->indices[source_dim(c, d)];
      for (const auto& t : detail::to_affine(index).terms) {
        if (t.var && is_inner(t.var)) {
          const std::int64_t span = t.coeff * inner.at(t.var).hi;
          cur.lo += std::min<std::int64_t>(0, span);
          cur.hi += std::max<std::int64_t>(0, span);
        } else if (!detail::uses_any(t.atom, inner_vars)) {
          cur.outer.add(t, 1);
        } else if (auto b = detail::bound(t.atom, inner); b && !detail::vars_of(t.atom).empty() &&
                   std::all_of(detail::vars_of(t.atom).begin(), detail::vars_of(t.atom).end(), is_inner)) {
          const std::int64_t x = t.coeff * b->lo, y = t.coeff * b->hi;
          cur.lo += std::min(x, y);
          cur.hi += std::max(x, y);
        } else {
          cur.full = true;
        }
      }
      cur.outer.constant = detail::to_affine(index).constant;
      if (!any) {
        dims[d] = cur;
        continue;
      }
      Dim& acc = dims[d];
      if (acc.full || cur.full) {
        acc.full = true;
        continue;
      }
      detail::Affine diff = cur.outer;
      for (const auto& t : acc.outer.terms) diff.add(t, -1);
      diff.constant -= acc.outer.constant;
      if (!diff.terms.empty()) {
        acc.full = true;
        continue;
      }
      acc.lo = std::min(acc.lo, cur.lo + diff.constant);
      acc.hi = std::max(acc.hi, cur.hi + diff.constant);
    }
    any = true;
  });
  StageInfo& ci = info_[&c];
  if (!any && c.with && info_.count(c.with)) {
    // A guest its consumer here does not read (compute_with moved it to its host's place): in each
    // dimension whose axis is a shared loop that is a root axis of the host, the host's window; the
    // whole extent in the others.
    const StageImpl& h = *c.with;
    std::size_t shared = 0;
    while (shared < h.leaves.size() && !h.leaves[shared].same_as(c.with_axis)) ++shared;
    ++shared;
    const StageInfo& hi = info_.at(&h);
    ci.min.clear();
    ci.extent.clear();
    for (std::size_t d = 0; d < c.root.size(); ++d) {
      std::size_t q = 0, dh = h.root.size();
      while (q < c.leaves.size() && !c.leaves[q].same_as(c.root[d])) ++q;
      if (q < shared && q < h.leaves.size())
        for (std::size_t e = 0; e < h.root.size(); ++e)
          if (h.root[e].same_as(h.leaves[q])) dh = e;
      ci.min.push_back(dh < h.root.size() ? hi.min[dh] : Expr(0));
      ci.extent.push_back(dh < h.root.size() ? hi.extent[dh] : c.root[d].extent());
    }
    ci.relative = stage_scope(c) != Scope::Global;
    ci.actual = ci.relative ? std::make_shared<const BufferNode>(BufferNode{c.name, ci.extent, stage_scope(c), nullptr})
                            : c.buffer;
    return;
  }
  MLS_CHECK(any, "compute_at: stage '", c.name, "' is computed at '", st.name, "', which does not read it");
  ci.min.clear();
  ci.extent.clear();
  for (std::size_t d = 0; d < nd; ++d) {
    if (dims[d].full) {
      ci.min.emplace_back(0);
      ci.extent.push_back(c.root[d].extent());
    } else {
      ci.min.push_back(simplify(detail::from_affine(dims[d].outer) + Expr(dims[d].lo)));
      ci.extent.push_back(dims[d].hi - dims[d].lo + 1);
    }
  }
  ci.relative = stage_scope(c) != Scope::Global;
  // A copy in panels (cache_read's `panel`): [ceil(last / panel)][the other extents][panel].
  std::vector<std::int64_t> shape = ci.extent;
  if (c.panel > 0 && !shape.empty()) {
    const std::int64_t last = shape.back();
    shape.back() = c.panel;
    shape.insert(shape.begin(), (last + c.panel - 1) / c.panel);
  }
  ci.actual = ci.relative ? std::make_shared<const BufferNode>(
                                BufferNode{c.name, shape, stage_scope(c), nullptr, {}, c.double_buffer})
                          : c.buffer;
  if (c.is_output) check_cover(st, n, c, pos);
}

/// A stage computed at a loop of one consumer may be read by other stages computed inside that
/// loop (Stage::compute_at): each of their loads must fall in the window one iteration computed.
/// Checked on the reader's root values (its region, reduction axes whole), which its guards keep
/// in range, so a tail of the reader does not count.
void Lowerer::check_reads(const StageImpl& st, const StageInfo& inf) const {
  detail::VarMap sub;
  detail::Ranges ranges = scope_;
  std::vector<Var> offsets;
  for (std::size_t i = 0; i < st.root.size(); ++i) {
    offsets.emplace_back(st.root[i].name());
    sub[st.root[i].var().get()] = simplify(inf.min[i] + Expr(offsets.back()));
    ranges[offsets.back().get()] = {0, inf.extent[i] - 1};
  }
  for (const auto& r : st.reduce) ranges[r.var().get()] = {0, r.extent() - 1};
  const auto* red = st.body.as<Reduce>();
  for_each_expr(red ? red->source : st.body, [&](const Expr& e) {
    const auto* l = e.as<Load>();
    const StageImpl* p = l ? producer_of(s_, st, l->buffer.get()) : nullptr;
    if (!p || !p->attach || p->attach == &st) return;
    MLS_CHECK(info_.count(p), "compute_at: stage '", st.name, "' reads '", p->name, "', computed at loop '",
              p->attach_axis.name(), "' of '", p->attach->name, "', which has not run before it");
    const StageInfo& pi = info_.at(p);
    for (std::size_t d = 0; d < l->indices.size(); ++d) {
      const Expr off = simplify(detail::substitute(l->indices[d], sub) - pi.min[d]);
      const auto b = detail::bound(off, ranges);
      MLS_CHECK(b && b->lo >= 0 && b->hi < pi.extent[d], "compute_at: stage '", st.name, "' reads '", p->name,
                "' at ", to_string(l->indices[d]), " (dimension ", d, "), outside the window computed at loop '",
                p->attach_axis.name(), "' of '", p->attach->name, "' (", to_string(pi.min[d]), " + [0, ",
                pi.extent[d], "))");
    }
  });
}

/// An output computed at a loop (Stage::compute_at) must be covered whole by the windows of that
/// loop's iterations: in each dimension the window is the whole extent, or its start is a sum of
/// loop variables (loops at or around the attach point, from 0) with coefficients that count them
/// in mixed radix, window by window: c1 = extent of the window, c(k+1) = ck * (iterations of k),
/// c(last) * (its iterations) >= the dimension.
void Lowerer::check_cover(const StageImpl& st, const Nest& n, const StageImpl& c, std::size_t pos) const {
  detail::Ranges ranges = scope_;
  for (std::size_t i = 0; i <= pos && i < n.vars.size(); ++i) ranges[n.vars[i].get()] = {0, n.ext[i] - 1};
  const StageInfo& ci = info_.at(&c);
  for (std::size_t d = 0; d < ci.min.size(); ++d) {
    const std::int64_t full = c.root[d].extent();
    const detail::Affine a = detail::to_affine(ci.min[d]);
    bool ok = a.terms.empty() && a.constant == 0 && ci.extent[d] >= full;
    if (!ok && a.constant == 0 && !a.terms.empty()) {
      std::vector<std::pair<std::int64_t, std::int64_t>> steps;  // (coefficient, iterations)
      ok = true;
      for (const auto& t : a.terms) {
        auto r = t.var ? ranges.find(t.var) : ranges.end();
        ok = ok && r != ranges.end() && r->second.lo == 0 && t.coeff > 0;
        if (ok) steps.emplace_back(t.coeff, r->second.hi + 1);
      }
      std::sort(steps.begin(), steps.end());
      std::int64_t next = ci.extent[d];
      for (const auto& [coeff, iters] : steps) {
        ok = ok && coeff == next;
        next = coeff * iters;
      }
      ok = ok && next >= full;
    }
    MLS_CHECK(ok, "compute_at: output '", c.name, "' is computed at loop '", c.attach_axis.name(), "' of '",
              st.name, "', whose windows (", to_string(ci.min[d]), " + [0, ", ci.extent[d], ") in dimension ", d,
              ") do not cover it: an output must be computed whole");
  }
}

/// The loops positions[k..] of a stage; the update nest (all leaves) or the init nest (the
/// data-parallel leaves inside the first reduction loop).
Stmt Lowerer::build(Nest& n, const std::vector<int>& positions, std::size_t k, bool init) {
  const StageImpl& st = *n.st;
  if (k < positions.size() && n.tensorize_pos >= 0 && positions[k] >= n.tensorize_pos) {
    if (!init) {
      // The reduction starts inside the tile: its init is the intrinsic's reset.
      if (n.has_init && n.first_reduce > n.tensorize_pos)
        return make_seq({tensorized(n, CallPart::Reset), tensorized(n, CallPart::Update)});
      if (n.reset_in_tile) {  // ResetAt::Tile: at the first iteration of the reduction loops outside the tile
        Expr first;
        for (int i = 0; i < n.tensorize_pos; ++i) {
          const auto u = static_cast<std::size_t>(i);
          if (st.leaves[u].kind() != IterKind::Reduce || n.ext[u] == 1) continue;  // a loop of one iteration is 0
          const Expr c = eq(Expr(n.vars[u]), Expr(0));
          first = first.defined() ? (first && c) : c;
        }
        const Stmt reset = tensorized(n, CallPart::Reset);
        return make_seq({first.defined() ? make_if(first, reset) : reset, tensorized(n, CallPart::Update)});
      }
      return tensorized(n, CallPart::Update);
    }
    if (st.intrinsic->reset) return tensorized(n, CallPart::Reset);
  }
  if (k == positions.size()) return innermost(n, init);
  const int q = positions[k];
  const IterVar& leaf = st.leaves[static_cast<std::size_t>(q)];
  const Var& var = n.vars[static_cast<std::size_t>(q)];  // the leaf's, or its host's (compute_with)
  scope_[var.get()] = {0, n.ext[static_cast<std::size_t>(q)] - 1};
  if (is_thread_index(bound_tag(st, leaf))) thread_scope_[var.get()] = scope_[var.get()];
  std::vector<Stmt> body;
  if (!init) {
    for (const StageImpl* c : n.children[static_cast<std::size_t>(q)])
      if (!c->with) body.push_back(lower_stage(*c));  // a guest is lowered inside its host
    if (n.has_init && q + 1 == n.first_reduce && !n.reset_in_tile) body.push_back(init_nest(n));
    for (const auto& g : n.guests)  // a guest's init before its first reduction loop, a shared one
      if (g->has_init && q + 1 == g->first_reduce && g->first_reduce < static_cast<int>(g->shared))
        body.push_back(init_nest(*g));
  }
  body.push_back(build(n, positions, k + 1, init));
  if (!init)
    for (const auto& g : n.guests)  // after the host's statements in each iteration of the last shared loop
      if (static_cast<int>(g->shared) == q + 1) body.push_back(guest_part(*g));
  Stmt s = make_seq(body);
  // Local tiles computed here live in this loop's body.
  if (!init)
    for (const StageImpl* c : n.children[static_cast<std::size_t>(q)])
      if (info_.at(c).relative) s = make_allocate(info_.at(c).actual, s);
  Expr cond;
  for (const auto& g : n.guards)
    if (g.level == q && (!init || g.data)) cond = cond.defined() ? (cond && g.cond) : g.cond;
  if (cond.defined()) s = make_if(cond, s);
  scope_.erase(var.get());
  thread_scope_.erase(var.get());
  if (n.ext[static_cast<std::size_t>(q)] == 1) return s;
  auto kind = st.kinds.find(leaf.get());
  const ThreadTag tag = bound_tag(st, leaf);
  return make_for(var, Expr(0), Expr(n.ext[static_cast<std::size_t>(q)]),
                  kind == st.kinds.end() ? ForKind::Serial : kind->second, s, tag);
}

Stmt Lowerer::innermost(const Nest& n, bool init) const {
  const Buffer& buf = info_.at(n.st).actual;
  if (init) return make_store(buf, n.store_idx, Expr(n.combiner.init));
  if (!n.is_reduce) return make_store(buf, n.store_idx, n.src);
  const Expr acc = Tensor(buf).load(n.store_idx);
  const Expr v = n.combiner.op == BinaryOp::Add   ? acc + n.src
                 : n.combiner.op == BinaryOp::Mul ? acc * n.src
                 : n.combiner.op == BinaryOp::Max ? max(acc, n.src)
                                                  : min(acc, n.src);
  return make_store(buf, n.store_idx, v);
}

Stmt Lowerer::init_nest(Nest& n) {
  std::vector<int> ip;
  for (std::size_t i = static_cast<std::size_t>(n.first_reduce) + 1; i < n.st->leaves.size(); ++i)
    if (n.st->leaves[i].kind() == IterKind::DataPar) ip.push_back(static_cast<int>(i));
  return build(n, ip, 0, true);
}

Stmt Lowerer::tensorized(const Nest& n, CallPart part) const {
  const StageImpl& st = *n.st;
  const Intrinsic& in = *st.intrinsic;
  const std::size_t t0 = static_cast<std::size_t>(n.tensorize_pos);
  const std::size_t nl = st.leaves.size();
  std::vector<std::size_t> data, red;
  std::vector<IterVar> tile_axes;
  for (std::size_t q = t0; q < nl; ++q) {
    (st.leaves[q].kind() == IterKind::Reduce ? red : data).push_back(q);
    tile_axes.push_back(st.leaves[q]);
  }
  const bool gemm = in.pattern == IntrinsicPattern::Gemm;
  const std::size_t want_data = gemm ? 2 : in.tile.size(), want_red = gemm ? 1 : 0;
  MLS_CHECK(data.size() == want_data && red.size() == want_red, "tensorize: the tile of stage '",
            st.name, "' from axis '", st.leaves[t0].name(), "' has axes (", names_of(tile_axes), "): ",
            data.size(), " data-parallel and ", red.size(), " reduction; intrinsic '", in.name, "' (",
            gemm ? "gemm" : "copy", ") needs ", want_data, " data-parallel and ", want_red, " reduction");
  std::vector<std::size_t> axis_leaf = data;  // intrinsic axis -> leaf position
  if (gemm) axis_leaf.push_back(red[0]);
  std::string have, want;
  for (std::size_t i = 0; i < axis_leaf.size(); ++i) {
    have += (i ? "x" : "") + std::to_string(n.ext[axis_leaf[i]]);
    want += (i ? "x" : "") + std::to_string(in.tile[i]);
  }
  MLS_CHECK(have == want, "tensorize: the tile of stage '", st.name, "' from axis '", st.leaves[t0].name(),
            "' is ", have, " (", names_of(tile_axes), "); intrinsic '", in.name, "' computes ", want);
  std::vector<Expr> operands;  // loads after the output
  const auto* mul = n.src.as<Binary>();
  if (gemm) {
    MLS_CHECK(n.is_reduce && n.combiner.op == BinaryOp::Add && mul && mul->op == BinaryOp::Mul &&
                  mul->a.as<Load>() && mul->b.as<Load>(),
              "tensorize: stage '", st.name, "' computes ", n.is_reduce ? "a reduction of " : "",
              to_string(n.src), ", not a sum of a product of two loads (intrinsic '", in.name, "' is a gemm)");
    operands = {mul->a, mul->b};
  } else {
    MLS_CHECK(!n.is_reduce && n.src.as<Load>(), "tensorize: stage '", st.name, "' computes ",
              to_string(n.src), ", not a copy of one load (intrinsic '", in.name, "' is a copy)");
    operands = {n.src};
  }
  detail::VarMap zero;
  std::map<const VarNode*, std::size_t> axis_of;
  std::vector<const VarNode*> tile_vars;
  for (std::size_t a = 0; a < axis_leaf.size(); ++a) {
    const VarNode* v = n.vars[axis_leaf[a]].get();
    axis_of[v] = a;
    tile_vars.push_back(v);
    zero[v] = Expr(0);
  }
  auto arg = [&](const Buffer& b, const std::vector<Expr>& idx) {
    TileArg ta{b, {}, {}};
    for (const auto& e : idx) {
      std::vector<std::int64_t> row(axis_leaf.size(), 0);
      for (const auto& t : detail::to_affine(e).terms) {
        if (t.var && axis_of.count(t.var)) {
          row[axis_of.at(t.var)] += t.coeff;
        } else {
          MLS_CHECK(!detail::uses_any(t.atom, tile_vars), "tensorize: index ", to_string(e), " of '", b->name,
                    "' in stage '", st.name, "' is not affine in the tile's axes (", names_of(tile_axes), ")");
        }
      }
      ta.base.push_back(simplify(detail::substitute(e, zero)));
      ta.coeff.push_back(std::move(row));
    }
    return ta;
  };
  Call c{st.intrinsic, part, {}, in.tile};
  c.args.push_back(arg(info_.at(&st).actual, n.store_idx));
  if (part == CallPart::Update)  // a reset writes its output only
    for (const auto& o : operands) c.args.push_back(arg(o.as<Load>()->buffer, o.as<Load>()->indices));
  return Stmt(std::make_shared<const StmtNode>(StmtNode{std::move(c)}));
}

}  // namespace

LoweredFunc lower(const Schedule& s, const std::string& name) {
  const ScheduleImpl& impl = *s.s_;
  Lowerer l(impl);
  LoweredFunc f;
  f.name = name;
  for (const Tensor& t : topo_order(impl.outputs))
    if (!t.op()) f.args.push_back(t.buffer());
  for (const Tensor& t : impl.outputs)
    if (std::find(f.args.begin(), f.args.end(), t.buffer()) == f.args.end()) f.args.push_back(t.buffer());
  f.body = l.run();
  return f;
}

}  // namespace mls::kernels::te
