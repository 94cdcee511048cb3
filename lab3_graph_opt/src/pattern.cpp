// Student file of lab 3: write the bodies between the SOLUTION markers (mls-grader grades this file).
// The pattern-rewrite engine: declarative op-tree patterns, the matcher and the fixpoint driver.
#include "mls/graph_opt/pattern.hpp"

#include <unordered_set>

namespace mls::graph_opt {

Pattern Pattern::any(std::string name) {
  Pattern p;
  p.bind = std::move(name);
  return p;
}
Pattern Pattern::of(Op op, std::vector<Pattern> ins, std::string name) {
  Pattern p;
  p.any_op = false;
  p.op = op;
  p.inputs = std::move(ins);
  p.bind = std::move(name);
  return p;
}
Pattern& Pattern::constant() {
  is_constant = true;
  return *this;
}
Pattern& Pattern::one_use() {
  single_use = true;
  return *this;
}
Pattern& Pattern::commutative() {
  commute = true;
  return *this;
}
Pattern& Pattern::with_rank(int r) {
  rank = r;
  return *this;
}
Pattern& Pattern::where(std::function<bool(const Node&)> p) {
  pred = std::move(p);
  return *this;
}

Var Match::operator[](const std::string& name) const {
  auto it = nodes.find(name);
  MLS_CHECK(it != nodes.end(), "match: nothing is bound to '", name, "'");
  return Var(it->second);
}

int RewriteStats::total() const {
  int t = 0;
  for (const auto& [k, v] : applied) t += v;
  return t;
}

namespace {
/// Recursive core of `match`: checks `pat` at `n`, recording bindings in `m`.
[[maybe_unused]] bool match_at(const Pattern& pat, const NodePtr& n, const std::unordered_map<const Node*, int>& uses,
                               Match& m) {
  // BEGIN SOLUTION
  if (!n) return false;
  if (pat.is_constant && n->op != Op::Constant) return false;
  if (pat.single_use) {
    auto it = uses.find(n.get());
    if (it == uses.end() || it->second != 1) return false;
  }
  if (pat.rank >= 0 && static_cast<int>(n->shape.size()) != pat.rank) return false;
  if (pat.pred && !pat.pred(*n)) return false;
  if (!pat.any_op) {
    if (n->op != pat.op || n->inputs.size() != pat.inputs.size()) return false;
    const Match saved = m;
    bool ok = true;
    for (std::size_t i = 0; ok && i < pat.inputs.size(); ++i) ok = match_at(pat.inputs[i], n->inputs[i], uses, m);
    if (!ok && pat.commute && pat.inputs.size() == 2) {
      m = saved;
      ok = match_at(pat.inputs[0], n->inputs[1], uses, m) && match_at(pat.inputs[1], n->inputs[0], uses, m);
    }
    if (!ok) {
      m = saved;
      return false;
    }
  }
  if (!pat.bind.empty()) {
    auto [it, fresh] = m.nodes.emplace(pat.bind, n);
    if (!fresh && it->second != n) return false;
  }
  return true;
  // END SOLUTION
}
}  // namespace

std::optional<Match> match(const Pattern& pat, const NodePtr& n, const std::unordered_map<const Node*, int>& uses) {
  // BEGIN SOLUTION
  Match m;
  if (!match_at(pat, n, uses, m)) return std::nullopt;
  m.root = n;
  return m;
  // END SOLUTION
}

RewriteStats rewrite_fixpoint(Program& p, const std::vector<Rule>& rules, int max_iterations) {
  RewriteStats stats;
  for (const Rule& r : rules) stats.applied[r.name] = 0;
  // BEGIN SOLUTION
  bool changed = true;
  while (changed && stats.iterations < max_iterations) {
    changed = false;
    ++stats.iterations;
    const auto uses = use_counts(p);
    std::unordered_map<const Node*, NodePtr> owner;  // the schedule holds raw pointers
    for (const NodePtr& c : p.graph->nodes()) owner[c.get()] = c;
    for (Node* raw : p.schedule()) {
      const NodePtr n = owner[raw];
      if (!n) continue;
      for (const Rule& r : rules) {
        std::optional<Match> m = match(r.pattern, n, uses);
        if (!m) continue;
        const Var out = r.rewrite(p, *m);
        if (!out.defined() || out.get() == n.get()) continue;
        MLS_CHECK(out.shape() == n->shape && out.dtype() == n->dtype, "rewrite: rule '", r.name, "' replaced a ",
                  n->dtype, " ", shape_str(n->shape), " value by a ", out.dtype(), " ", shape_str(out.shape()), " one");
        p.replace(Var(n), out);
        ++stats.applied[r.name];
        changed = true;
        break;
      }
      if (changed) break;  // uses and schedule are stale: start a new sweep
    }
  }
  prune(p);
  // END SOLUTION
  return stats;
}

}  // namespace mls::graph_opt
