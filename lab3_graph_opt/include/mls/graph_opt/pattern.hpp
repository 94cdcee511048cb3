#pragma once
/// A declarative pattern-rewrite engine over lab 2 graphs.
///
/// A pattern is an op tree whose leaves match anything; each position may bind a name and carry
/// constraints (constant-ness, single use, rank, a predicate). A rule pairs a pattern with a
/// rewrite callback that builds the replacement from the bound nodes (or declines by returning
/// an undefined Var). `rewrite_fixpoint` applies a rule set until nothing matches.
///
///   // x * 1 -> x
///   Rule r{"mul-one", P::op(Op::Mul, {P::any("x"), P::any("one").constant().where(is_one)}).commutative(),
///          [](Program& p, const Match& m) { return m["x"]; }};
///   RewriteStats s = rewrite_fixpoint(prog, {r});
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mls/graph_opt/ir.hpp"

namespace mls::graph_opt {

/// One position of a pattern tree.
struct Pattern {
  bool any_op = true;                   // matches any node (a leaf of the pattern)
  Op op = Op::Constant;                 // else: the node's op must be this
  std::vector<Pattern> inputs;          // and its inputs must match these (same count)
  std::string bind;                     // name under which the matched node is recorded
  bool is_constant = false;             // the node must be an autodiff::Op::Constant
  bool single_use = false;              // the node must have exactly one use
  bool commute = false;                 // two inputs: also try them swapped
  int rank = -1;                        // the node's rank must be this (-1: any)
  std::function<bool(const Node&)> pred;  // extra condition on the node

  /// Matches any node and binds it to `name`.
  static Pattern any(std::string name);
  /// Matches a node of `op` whose inputs match `ins`; binds it to `name` if given.
  static Pattern of(Op op, std::vector<Pattern> ins, std::string name = "");
  /// Constraint builders (return *this so they chain).
  Pattern& constant();
  Pattern& one_use();
  Pattern& commutative();
  Pattern& with_rank(int r);
  Pattern& where(std::function<bool(const Node&)> p);
};

/// Nodes bound by a successful match, by name; `root` is the node the pattern's root matched.
struct Match {
  std::map<std::string, NodePtr> nodes;
  NodePtr root;
  /// The node bound to `name` as a Var; throws `mls::Error` when nothing is bound to it.
  Var operator[](const std::string& name) const;
};

/// Tries to match `pat` at node `n` (a NodePtr of the program's graph). `uses` are the program's
/// use counts (for `single_use`). A name bound twice must bind the same node. Returns the match
/// or nothing.
std::optional<Match> match(const Pattern& pat, const NodePtr& n, const std::unordered_map<const Node*, int>& uses);

/// A rewrite rule: when `pattern` matches, `rewrite` returns the value that replaces the root
/// (an undefined Var declines). The replacement must have the root's shape and dtype.
struct Rule {
  std::string name;
  Pattern pattern;
  std::function<Var(Program&, const Match&)> rewrite;
};

/// Counts of one run of the driver.
struct RewriteStats {
  std::map<std::string, int> applied;  // per rule name
  int iterations = 0;
  int total() const;
};

/// The fixpoint driver: walks the scheduled nodes in order, tries each rule at each node, and
/// replaces the root's uses by the rule's result; repeats until a sweep changes nothing (or
/// `max_iterations` sweeps), then drops dead nodes. Throws `mls::Error` naming the rule when a
/// replacement's shape or dtype differs from the root's.
RewriteStats rewrite_fixpoint(Program& p, const std::vector<Rule>& rules, int max_iterations = 100);

}  // namespace mls::graph_opt
