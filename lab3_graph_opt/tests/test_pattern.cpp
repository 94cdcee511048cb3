// The pattern matcher and the fixpoint driver.
#include "helpers.hpp"

using namespace graph_opt_test;
using P = Pattern;

TEST_CASE("a pattern matches an op tree and binds its nodes", "[lab3][pattern]") {
  Program p;
  const Var a = p.input("a", {3}), b = p.input("b", {3});
  const Var s = a + b;
  const Var y = autodiff::relu(s * 2.0);
  p.output(y);
  const auto uses = use_counts(p);
  const P pat = P::of(Op::Relu, {P::of(Op::Mul, {P::of(Op::Add, {P::any("x"), P::any("y")}, "sum"), P::any("k").constant()})});
  auto m = match(pat, y.node(), uses);
  REQUIRE(m.has_value());
  MLS_OBSERVE(node_index(p, m->root.get()));
  MLS_OBSERVE(node_index(p, (*m)["x"].get()));
  MLS_OBSERVE(node_index(p, (*m)["y"].get()));
  MLS_OBSERVE(node_index(p, (*m)["sum"].get()));
  MLS_ORACLE_CHECK(CHECK(m->root == y.node()); CHECK((*m)["x"].get() == a.get()); CHECK((*m)["y"].get() == b.get());
                   CHECK((*m)["sum"].get() == s.get()));
  require_error([&] { (void)(*m)["nope"]; }, "nothing is bound to 'nope'");
  // Wrong op at the root, wrong op inside, a placeholder where a constant is required.
  mls::testing::observe("matches", std::vector<int>{
      match(P::of(Op::Gelu, {P::any("x")}), y.node(), uses).has_value(),
      match(P::of(Op::Relu, {P::of(Op::Add, {P::any("x"), P::any("y")})}), y.node(), uses).has_value(),
      match(P::of(Op::Add, {P::any("x"), P::any("y").constant()}), s.node(), uses).has_value(),
      match(pat, y.node(), uses).has_value()});
  MLS_ORACLE_CHECK(CHECK_FALSE(match(P::of(Op::Gelu, {P::any("x")}), y.node(), uses));
                   CHECK_FALSE(match(P::of(Op::Relu, {P::of(Op::Add, {P::any("x"), P::any("y")})}), y.node(), uses));
                   CHECK_FALSE(match(P::of(Op::Add, {P::any("x"), P::any("y").constant()}), s.node(), uses)));
}

TEST_CASE("pattern constraints: commutative, single use, rank, predicate, repeated names", "[lab3][pattern]") {
  Program p;
  const Var a = p.input("a", {2, 3});
  const Var c = p.constant(Tensor::ones({}), "one");
  const Var m1 = c * a;            // constant on the left
  const Var e = autodiff::exp(a);        // used twice below
  const Var t = e + e;             // the same node on both sides
  p.output(m1);
  p.output(t);
  p.output(e);
  const auto uses = use_counts(p);
  const P xc = P::of(Op::Mul, {P::any("x"), P::any("c").constant()});
  MLS_ORACLE_CHECK(CHECK_FALSE(match(xc, m1.node(), uses)));  // observed below, with the others
  P xcc = xc;
  xcc.commutative();
  auto m = match(xcc, m1.node(), uses);
  REQUIRE(m);
  MLS_OBSERVE(node_index(p, (*m)["x"].get()));
  MLS_OBSERVE(node_index(p, (*m)["c"].get()));
  MLS_ORACLE_CHECK(CHECK((*m)["x"].get() == a.get()); CHECK((*m)["c"].get() == c.get()));
  // x + x binds x once: both inputs must be the same node.
  mls::testing::observe("matches", std::vector<int>{
      match(xc, m1.node(), uses).has_value(),
      match(P::of(Op::Add, {P::any("x"), P::any("x")}), t.node(), uses).has_value(),
      match(P::of(Op::Mul, {P::any("x"), P::any("x")}).commutative(), m1.node(), uses).has_value(),
      match(P::of(Op::Add, {P::of(Op::Exp, {P::any("x")}).one_use(), P::any("y")}), t.node(), uses).has_value(),
      match(P::of(Op::Add, {P::of(Op::Exp, {P::any("x")}), P::any("y")}), t.node(), uses).has_value(),
      match(P::any("v").with_rank(2), t.node(), uses).has_value(), match(P::any("v").with_rank(1), t.node(), uses).has_value(),
      match(P::any("v").where([](const Node& n) { return n.shape[1] == 3; }), t.node(), uses).has_value(),
      match(P::any("v").where([](const Node& n) { return n.shape[1] == 4; }), t.node(), uses).has_value()});
  MLS_ORACLE_CHECK(
      CHECK(match(P::of(Op::Add, {P::any("x"), P::any("x")}), t.node(), uses));
      CHECK_FALSE(match(P::of(Op::Mul, {P::any("x"), P::any("x")}).commutative(), m1.node(), uses));
      // e has three uses (twice in t, once as an output).
      CHECK_FALSE(match(P::of(Op::Add, {P::of(Op::Exp, {P::any("x")}).one_use(), P::any("y")}), t.node(), uses));
      CHECK(match(P::of(Op::Add, {P::of(Op::Exp, {P::any("x")}), P::any("y")}), t.node(), uses));
      CHECK(match(P::any("v").with_rank(2), t.node(), uses));
      CHECK_FALSE(match(P::any("v").with_rank(1), t.node(), uses));
      CHECK(match(P::any("v").where([](const Node& n) { return n.shape[1] == 3; }), t.node(), uses));
      CHECK_FALSE(match(P::any("v").where([](const Node& n) { return n.shape[1] == 4; }), t.node(), uses)));
}

TEST_CASE("the fixpoint driver applies rules until nothing matches", "[lab3][pattern]") {
  // neg(neg(x)) -> x, applied to neg^6(x) needs three rewrites.
  Program p;
  const Var x = p.input("x", {4});
  Var y = x;
  for (int i = 0; i < 6; ++i) y = -y;
  p.output(autodiff::exp(y));
  const Rule r{"neg(neg(x))", P::of(Op::Neg, {P::of(Op::Neg, {P::any("x")})}),
               [](Program&, const Match& m) { return m["x"]; }};
  auto [q, n] = apply_checked(p, [&](Program& g) { return rewrite_fixpoint(g, {r}).total(); });
  MLS_CHECK_EQ(n, 3);
  MLS_CHECK_EQ(count_op(q, Op::Neg), 0);
  mls::testing::observe("where exp's input stands", node_index(q, q.outputs[0].get()->inputs[0].get()));
  MLS_ORACLE_CHECK(CHECK(q.outputs[0].get()->inputs[0].get() == q.inputs[0].get()));
  MLS_CHECK_EQ(q.size(), 2);  // x and exp: dead negs are gone
}

TEST_CASE("a rule whose two sides disagree is refused, naming the rule", "[lab3][pattern]") {
  Program p;
  const Var x = p.input("x", {4, 3});
  p.output(autodiff::relu(x));
  const Rule bad{"relu-to-sum", P::of(Op::Relu, {P::any("x")}), [](Program&, const Match& m) { return autodiff::sum(m["x"], {0}); }};
  require_error([&] { rewrite_fixpoint(p, {bad}); }, "rule 'relu-to-sum' replaced a float32 [4, 3] value by a float32 [3] one");
  const Rule cast{"relu-to-f64", P::of(Op::Relu, {P::any("x")}),
                  [](Program&, const Match& m) { return autodiff::cast(m["x"], DType::Float64); }};
  require_error([&] { rewrite_fixpoint(p, {cast}); }, "rule 'relu-to-f64'");
}
