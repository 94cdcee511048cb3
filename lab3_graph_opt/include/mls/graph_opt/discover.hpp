#pragma once
/// Automated discovery of graph rewrites, after TASO (Jia et al., SOSP 2019; slides 001,
/// "automated discovery of graph optimizations"):
///
///   1. enumerate every small expression (up to `max_ops` ops) over a handful of ops on square
///      matrix variables A, B, C and the scalars 0 and 1;
///   2. fingerprint each by evaluating it (float64) on random inputs and hashing the rounded
///      values; expressions with equal fingerprints are probably equal;
///   3. pair every member of a class with the class's normal form (fewest ops, then fewest
///      matmuls, then the shortest text) and verify the pair on more random inputs, including
///      another matrix size, with a tolerance from float64's epsilon;
///   4. prune: drop rules whose left side has a proper subexpression that is not itself in normal
///      form (a smaller rule already covers it), rules whose right side needs a variable the left
///      side does not bind, and rules equal up to renaming variables or swapping the operands of
///      add and mul.
/// Each kept rule becomes a lab 3 `Rule` (pattern + rewrite) with `to_rule`, and
/// `search_rewrites` applies them, in both directions, in a bounded best-first search for a
/// cheaper graph (it may pass through worse graphs on the way).
///
///   Discovery d = discover_rules();                 // d.stats: enumerated, classes, ...
///   for (const auto& k : rediscovered(d.rules)) ...  // which hand-written rewrites came back
///   SearchResult s = search_rewrites(prog, d.rules);  // s.best, s.cost_before, s.cost_after
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mls/graph_opt/pattern.hpp"

namespace mls::graph_opt {

/// The ops of discovery's expression language. Var is a matrix variable, Zero and One are scalar
/// constants (they broadcast), Transpose is lab 2's permute(x, {1, 0}).
enum class TermOp : std::uint8_t { Var, Zero, One, Neg, Transpose, Relu, Add, Sub, Mul, Matmul };

struct Term;
using TermPtr = std::shared_ptr<const Term>;

/// An expression tree. `var` is the variable's index (0 = A, 1 = B, 2 = C) for TermOp::Var.
struct Term {
  TermOp op = TermOp::Var;
  int var = -1;
  TermPtr a, b;  // operands (b only for binary ops)
};

/// Constructors: `term_var(0)` is A; `term_op(TermOp::Add, a, b)`.
TermPtr term_var(int index);
TermPtr term_op(TermOp op, TermPtr a = nullptr, TermPtr b = nullptr);
/// Parses the text form written by `to_string`: "add(mul(A, B), transpose(C))", "0", "1".
/// Throws `mls::Error` starting "parse_term: " for an unknown op, a wrong number of operands, a
/// variable other than A..C or trailing text.
TermPtr parse_term(std::string_view text);
/// The text form: op names neg, transpose, relu, add, sub, mul, matmul; variables A, B, C.
std::string to_string(const TermPtr& t);
/// Number of ops (non-leaf nodes) of the tree.
int term_size(const TermPtr& t);
/// Bit i set when variable i occurs.
unsigned term_vars(const TermPtr& t);

/// Evaluates `t` in float64 on n x n matrices `vars` (row-major, n*n values each). Scalars
/// broadcast; the result is always n x n. A naive reference, independent of lab 1's kernels.
std::vector<double> eval_term(const TermPtr& t, const std::vector<std::vector<double>>& vars, int n);
/// Builds `t` into the graph of `vars` with lab 2's ops (constants as 0-d tensors of the
/// variables' dtype) and returns its value.
Var build_term(const TermPtr& t, const std::vector<Var>& vars);
/// A program with inputs A, B, C (n x n, `dtype`) and the one output `t`.
Program term_program(const TermPtr& t, std::int64_t n, DType dtype = DType::Float64);

/// A discovered equality lhs = rhs, used left to right (rhs is the normal form).
struct DiscoveredRule {
  TermPtr lhs, rhs;
  /// "lhs = rhs" in text form.
  std::string str() const;
};
/// Parses "lhs = rhs" (see `parse_term`); throws `mls::Error` when there is no single '='.
DiscoveredRule parse_rule(std::string_view text);
/// A key equal for two rules that differ only by renaming variables, swapping the operands of
/// add or mul, or swapping the two sides.
std::string rule_key(const DiscoveredRule& r);

/// What to enumerate and how hard to verify.
struct DiscoveryOptions {
  int max_ops = 3;         // expressions with up to this many ops
  int num_vars = 3;        // A, B (, C)
  bool constants = true;   // include the scalars 0 and 1 as leaves
  int n = 3;               // matrix size for fingerprints
  int verify_trials = 3;   // more random inputs per candidate (the last one at size n + 1)
  std::uint64_t seed = 1;
};
/// The counts of one discovery run.
struct DiscoveryStats {
  std::size_t enumerated = 0;  // expressions enumerated (leaves included)
  std::size_t classes = 0;     // fingerprint classes of matrix-valued expressions
  std::size_t candidates = 0;  // (member, normal form) pairs
  std::size_t verified = 0;    // pairs that held on every further input
  std::size_t kept = 0;        // rules after pruning
};
struct Discovery {
  std::vector<DiscoveredRule> rules;  // the kept rules
  DiscoveryStats stats;
};

/// Runs the four steps above (enumerate, fingerprint, verify, prune) and returns the kept rules.
/// Hints: enumerate by size, each expression as (op, operand ids) so a value is computed once
/// from its operands' values; emit add/mul only with operand ids in order (commutativity is the
/// pattern engine's job); skip expressions without any variable; fingerprint = hash of
/// llround(value * 2^20) over the n*n outputs; verify with |x - y| <= 1024 eps (1 + max|y|).
Discovery discover_rules(const DiscoveryOptions& options = {});

/// Checks `r` on lab 3's executor: both sides as float64 programs (`term_program`) of size n,
/// on `trials` random feeds. Throws `mls::Error` "discover: rule '<r>' does not hold: ..." with
/// the error and the seed when the sides disagree beyond 1024 float64 ulp.
void verify_rule(const DiscoveredRule& r, std::int64_t n = 4, int trials = 3);

/// The rule as a lab 3 `Rule` (lhs -> rhs, or rhs -> lhs when `reverse`): the pattern is the
/// side's op tree (add and mul commutative; a variable matches any node, a repeated variable the
/// same node; 0 and 1 match constants whose every element is that value); the rewrite builds the
/// other side from the bound nodes, and declines unless every bound variable is a rank-2 value of
/// the root's shape and dtype (the rules were verified on square matrices only) and each matched
/// constant is 0-d or of the root's shape. Throws `mls::Error` when the side to match is a bare
/// variable or constant, or the side to build needs a variable the pattern does not bind.
Rule to_rule(const DiscoveredRule& r, bool reverse = false);

/// The search's cost of a program: FLOPs + bytes moved (lab 3's `program_cost`) + 64 per node
/// (a fixed dispatch cost, so that views such as transposes are not free).
double search_cost(const Program& p);

struct SearchOptions {
  int max_states = 400;     // programs expanded at most
  int max_extra_nodes = 3;  // a candidate may grow to (start nodes + this): temporarily worse
};
struct SearchResult {
  Program best;                    // the cheapest program found (equal to the input on random feeds)
  double cost_before = 0, cost_after = 0;
  int expanded = 0;                // programs expanded
  std::vector<std::string> steps;  // the rules applied on the way to `best` ("r" or "r (reversed)")
};
/// Best-first search: from `p`, repeatedly expands the cheapest unexpanded program by applying
/// each rule (both directions; a reversed rule only when its right side is an op and both sides
/// bind the same variables) at each place it matches, one rewrite at a time; programs are
/// deduplicated by their printed expression. Returns the cheapest one seen, after checking that it
/// computes the same outputs as `p` (otherwise `mls::Error`).
SearchResult search_rewrites(const Program& p, const std::vector<DiscoveredRule>& rules,
                             const SearchOptions& options = {});

/// A rewrite of the hand-written passes and whether discovery found it (up to renaming, operand
/// order of add/mul and direction).
struct KnownRewrite {
  std::string pass;  // the pass that does it by hand
  std::string rule;  // the equality, in text form
  bool found = false;
};
/// Checks the rules for: x*1, x+0, x-0 (simplify), double transpose (simplify), neg(neg(x)),
/// (AB)^T = B^T A^T (fold-transpose), A*B + A*C = A*(B+C) and A@B + A@C = A@(B+C) (the
/// distributivity behind merge-convs / merge-matmuls).
std::vector<KnownRewrite> rediscovered(const std::vector<DiscoveredRule>& rules);

}  // namespace mls::graph_opt
