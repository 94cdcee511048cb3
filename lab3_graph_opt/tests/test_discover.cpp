// TASO-style rule discovery: enumeration, fingerprints, verification, pruning, the rules as
// pattern-engine rules, the cost-guided search, and the hand-written rewrites it rediscovers.
#include <set>

#include "helpers.hpp"
#include "mls/graph_opt/discover.hpp"

using namespace graph_opt_test;

namespace {
/// One discovery run shared by the tests (a failed run is retried by the next test).
const Discovery& discovered() {
  static const Discovery d = discover_rules();
  return d;
}

/// x, y, z: n x n float64 inputs.
struct Xyz {
  Program p;
  Var x, y, z;
  explicit Xyz(std::int64_t n = 6) {
    x = p.input("x", {n, n}, DType::Float64);
    y = p.input("y", {n, n}, DType::Float64);
    z = p.input("z", {n, n}, DType::Float64);
  }
};

/// Records what a search found: its costs, whether it took any step and expanded any program (as
/// before: how many depends on the order the search breaks ties in), and the best program's
/// outputs on the inputs `equivalent(start, best)` draws (seeds 7 and 8) and on seed 5.
void observe_search(const SearchResult& s, const Program& start) {
  mls::testing::observe("cost before, after", std::vector<double>{s.cost_before, s.cost_after});
  mls::testing::observe("took a step, expanded a program", std::vector<int>{!s.steps.empty(), s.expanded > 0});
  for (std::uint64_t seed : {5u, 7u, 8u}) observe_outputs("best", run(s.best, random_feeds(start, seed)));
}

const DiscoveredRule* find_rule(const std::vector<DiscoveredRule>& rules, const std::string& text) {
  const std::string key = rule_key(parse_rule(text));
  for (const DiscoveredRule& r : rules)
    if (rule_key(r) == key) return &r;
  return nullptr;
}
}  // namespace

TEST_CASE("discovery enumerates, fingerprints, verifies and prunes to a set of distinct rules", "[lab3][discover]") {
  const Discovery& d = discovered();
  const DiscoveryStats& s = d.stats;
  INFO("enumerated " << s.enumerated << ", classes " << s.classes << ", candidates " << s.candidates << ", verified "
                     << s.verified << ", kept " << s.kept);
  mls::testing::observe("enumerated, classes, candidates, verified, kept, rules",
                        std::vector<std::size_t>{s.enumerated, s.classes, s.candidates, s.verified, s.kept, d.rules.size()});
  MLS_ORACLE_CHECK(CHECK(s.enumerated > 10000);  // 3 ops over A, B, C, 0, 1
                   CHECK(s.classes < s.enumerated);
                   CHECK(s.candidates > 0);
                   CHECK(s.verified <= s.candidates);
                   CHECK(s.kept == d.rules.size());
                   CHECK(s.kept < s.verified);
                   REQUIRE(s.kept >= 20));
  // Every kept rule as the search produced it, and what the test reads off it (the checks below
  // hold for the reference's rules, so the same values pass them).
  std::set<std::string> keys;
  for (const DiscoveredRule& r : d.rules) {
    INFO(r.str());
    const std::string text = r.str(), reparsed = parse_rule(text).str();
    mls::testing::observe("rule", text);
    mls::testing::observe("rule, printed again after parse_rule", reparsed);
    mls::testing::observe("rule sides' sizes", std::vector<int>{term_size(r.lhs), term_size(r.rhs)});
    mls::testing::observe("rule sides' variables", std::vector<unsigned>{term_vars(r.lhs), term_vars(r.rhs)});
    const bool new_key = keys.insert(rule_key(r)).second;
    MLS_ORACLE_CHECK(CHECK(to_string(r.lhs) != to_string(r.rhs));
                     CHECK((term_vars(r.rhs) & ~term_vars(r.lhs)) == 0u);  // rhs binds nothing new
                     CHECK(term_size(r.rhs) <= term_size(r.lhs));          // rhs is the normal form
                     CHECK(term_size(r.lhs) <= 3);
                     CHECK(new_key);  // no two equal up to renaming / operand order
                     CHECK(reparsed == text));
  }
  mls::testing::observe("distinct rule keys", keys.size());
  // A smaller option set gives fewer rules; no constants means no x*1.
  const Discovery small = discover_rules({.max_ops = 2, .num_vars = 2, .constants = false});
  mls::testing::observe("smaller search: enumerated, kept", std::vector<std::size_t>{small.stats.enumerated, small.stats.kept});
  MLS_ORACLE_CHECK(CHECK(small.stats.enumerated < s.enumerated); CHECK(small.stats.kept < s.kept));
  // Which of two rules the smaller search keeps: fixed by the options (no constants: no x*1).
  mls::testing::observe("small keeps tt, x*1", std::vector<int>{find_rule(small.rules, "transpose(transpose(A)) = A") != nullptr,
                                                                find_rule(small.rules, "mul(A, 1) = A") != nullptr});
  MLS_ORACLE_CHECK(CHECK(find_rule(small.rules, "transpose(transpose(A)) = A") != nullptr);
                   CHECK(find_rule(small.rules, "mul(A, 1) = A") == nullptr));
}

TEST_CASE("every discovered rule holds on lab 3's executor at another size", "[lab3][discover]") {
  const Discovery& d = discovered();
  MLS_OBSERVE(d.rules.size());
  REQUIRE(!d.rules.empty());
  std::int64_t broken = 0;
  for (const DiscoveredRule& r : d.rules) {
    std::string why;  // verify_rule's message where the rule does not hold
    try {
      verify_rule(r, 5, 2);
    } catch (const mls::Error& e) {
      ++broken;
      why = e.what();
    }
    MLS_ORACLE_CHECK(INFO(r.str()); INFO(why); CHECK(why.empty()));
  }
  mls::testing::observe("discovered rules that do not hold at size 5", broken);
}

TEST_CASE("discovery rediscovers the hand-written rewrites", "[lab3][discover]") {
  const Discovery& d = discovered();
  const auto known = rediscovered(d.rules);
  std::vector<int> found;
  for (const KnownRewrite& k : known) found.push_back(k.found);
  MLS_OBSERVE(found);
  MLS_ORACLE_CHECK(REQUIRE(known.size() >= 8); for (const KnownRewrite& k : known) {
    INFO(k.pass << ": " << k.rule);
    CHECK(k.found);
  });
  // The check is up to renaming, operand order and direction, and says no to a wrong rule.
  std::vector<int> found_tt, found_wrong;
  for (const KnownRewrite& k : rediscovered({parse_rule("B = transpose(transpose(B))")})) found_tt.push_back(k.found);
  for (const KnownRewrite& k : rediscovered({parse_rule("mul(A, 0) = A")})) found_wrong.push_back(k.found);
  MLS_OBSERVE(found_tt);
  MLS_OBSERVE(found_wrong);
  MLS_ORACLE_CHECK(REQUIRE(found_tt.size() > 3); CHECK(found_tt[3]); REQUIRE(!found_wrong.empty()); CHECK_FALSE(found_wrong[0]));
}

TEST_CASE("a discovered rule rewrites a program through the pattern engine", "[lab3][discover]") {
  const Discovery& d = discovered();
  const DiscoveredRule* dist = find_rule(d.rules, "add(mul(A, B), mul(A, C)) = mul(A, add(B, C))");
  const DiscoveredRule* tt = find_rule(d.rules, "transpose(transpose(A)) = A");
  const DiscoveredRule* mt = find_rule(d.rules, "transpose(matmul(A, B)) = matmul(transpose(B), transpose(A))");
  mls::testing::observe("found distributivity, double transpose, (AB)^T", std::vector<int>{dist != nullptr, tt != nullptr, mt != nullptr});
  MLS_ORACLE_CHECK(REQUIRE(dist); REQUIRE(tt); REQUIRE(mt));
  if (!dist || !tt || !mt) FAIL("a rule the test uses was not discovered");  // (the grading build goes no further)
  // x*y + z*x (operands swapped: the pattern commutes) -> x*(y+z): one mul fewer.
  Xyz a;
  a.p.output(a.x * a.y + a.z * a.x);
  Program q = clone(a.p);
  const RewriteStats s = rewrite_fixpoint(q, {to_rule(*dist)});
  verify(q);
  MLS_OBSERVE(s.total());
  MLS_OBSERVE(count_op(q, Op::Mul));
  const std::vector<Tensor> got_a = run(q, random_feeds(q, 3));
  observe_outputs("x*(y+z)", got_a);
  MLS_ORACLE_CHECK(CHECK(s.total() == 1); CHECK(count_op(q, Op::Mul) == 1);
                   CHECK(error_against(got_a, a.p, random_feeds(a.p, 3)) <= 1.0));
  // Reversed, (A B)^T -> B^T A^T; then double transposes vanish.
  Xyz b;
  b.p.output(autodiff::permute(autodiff::matmul(autodiff::permute(b.x, {1, 0}), b.y), {1, 0}));
  Program r = clone(b.p);
  (void)rewrite_fixpoint(r, {to_rule(*mt, /*reverse=*/to_string(mt->lhs).rfind("matmul", 0) == 0)});
  (void)rewrite_fixpoint(r, {to_rule(*tt)});
  verify(r);
  MLS_OBSERVE(count_op(r, Op::Permute));
  const std::vector<Tensor> got_b = run(r, random_feeds(r, 4));
  observe_outputs("y^T x", got_b);
  MLS_ORACLE_CHECK(CHECK(count_op(r, Op::Permute) == 1);  // y^T @ x
                   CHECK(error_against(got_b, b.p, random_feeds(b.p, 4)) <= 1.0));
  // The rules were verified on square matrices: they decline on other shapes.
  Program c;
  const Var u = c.input("u", {2, 3}, DType::Float64), v = c.input("v", {2, 3}, DType::Float64);
  const Var w = c.input("w", {1, 3}, DType::Float64);
  c.output(u * v + w * u);  // w broadcasts: not a bound variable of the root's shape
  MLS_CHECK_EQ(rewrite_fixpoint(c, {to_rule(*dist)}).total(), 0);
  // A side that is a bare variable cannot be a pattern.
  require_error([&] { (void)to_rule(*tt, true); }, "matches every node");
}

TEST_CASE("the search applies discovered rules to find a cheaper equivalent graph", "[lab3][discover]") {
  const Discovery& d = discovered();
  REQUIRE(!d.rules.empty());
  {  // transpose(transpose(x) @ transpose(y)) -> y @ x
    Xyz a(8);
    a.p.output(autodiff::permute(autodiff::matmul(autodiff::permute(a.x, {1, 0}), autodiff::permute(a.y, {1, 0})), {1, 0}));
    const SearchResult s = search_rewrites(a.p, d.rules);
    INFO(print(s.best));
    observe_search(s, a.p);
    MLS_OBSERVE(count_op(s.best, Op::Permute));
    MLS_OBSERVE(count_op(s.best, Op::Matmul));
    MLS_ORACLE_CHECK(CHECK(s.cost_after < s.cost_before); CHECK(count_op(s.best, Op::Permute) == 0);
                     CHECK(count_op(s.best, Op::Matmul) == 1); CHECK(!s.steps.empty()); CHECK(s.expanded >= 1);
                     CHECK(equivalent(a.p, s.best)));
  }
  {  // x*y + x*z -> x*(y+z)
    Xyz a(8);
    a.p.output(a.x * a.y + a.x * a.z);
    const SearchResult s = search_rewrites(a.p, d.rules);
    INFO(print(s.best));
    observe_search(s, a.p);
    MLS_OBSERVE(count_op(s.best, Op::Mul));
    MLS_OBSERVE(count_op(s.best, Op::Add));
    MLS_ORACLE_CHECK(CHECK(s.cost_after < s.cost_before); CHECK(count_op(s.best, Op::Mul) == 1);
                     CHECK(count_op(s.best, Op::Add) == 1); CHECK(equivalent(a.p, s.best)));
  }
}

TEST_CASE("a rule whose two sides disagree is rejected with a clear error", "[lab3][discover]") {
  require_error([] { verify_rule(parse_rule("matmul(A, B) = matmul(B, A)")); },
                "rule 'matmul(A, B) = matmul(B, A)' does not hold");
  require_error([] { verify_rule(parse_rule("transpose(matmul(A, B)) = matmul(transpose(A), transpose(B))")); },
                "does not hold");
  std::string why;  // verify_rule's message if it refuses this (true) rule
  try {
    verify_rule(parse_rule("transpose(matmul(A, B)) = matmul(transpose(B), transpose(A))"));
  } catch (const mls::Error& e) {
    why = e.what();
  }
  mls::testing::observe("verify_rule's message on (AB)^T = B^T A^T", why);
  MLS_ORACLE_CHECK(INFO(why); CHECK(why.empty()));
  // Malformed rule text.
  require_error([] { (void)parse_rule("foo(A) = A"); }, "unknown op or variable 'foo'");
  require_error([] { (void)parse_rule("add(A) = A"); }, "expected ','");
  require_error([] { (void)parse_rule("neg(A) A"); }, "exactly one '='");
  require_error([] { (void)parse_term("neg(A) B"); }, "trailing text");
  // A rule that builds a variable its pattern does not bind.
  require_error([] { (void)to_rule(parse_rule("mul(A, 0) = mul(B, 0)")); }, "does not bind");
}
