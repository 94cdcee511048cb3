// Graphviz dumps: structure of the DOT text (nodes, edges, labels, colours), not pixels.
#include "helpers.hpp"

#include <regex>

using namespace mls;
using namespace mls::autodiff;

namespace {
std::size_t count(const std::string& s, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("dot: the (exp(v1)+1)exp(v1) graph, forward and backward", "[lab2][dot]") {
  Graph g;
  const Var v1 = g.placeholder("v1", {});
  const Var v4 = examples::exp_example(v1);
  (void)gradients(v4, {v1});
  const DotGraph fwd = to_dot(g, {.title = "forward", .show_backward = false});
  MLS_OBSERVE(fwd.num_nodes());
  MLS_OBSERVE(fwd.num_edges());
  MLS_OBSERVE(fwd.str());  // the forward nodes' labels and edges as drawn (what the label checks below read)
  MLS_ORACLE_CHECK(CHECK(fwd.num_nodes() == 5);
                   CHECK(fwd.num_edges() == 5));  // v1->exp, exp->add, 1->add, exp->mul, add->mul
  const DotGraph all = to_dot(g, {.title = "backward"});
  MLS_OBSERVE(all.num_nodes());
  MLS_OBSERVE(all.num_edges());
  MLS_OBSERVE(count(all.str(), "#f8cfa0"));
  MLS_ORACLE_CHECK(CHECK(all.num_nodes() == 10);
                   CHECK(all.num_edges() == 13));  // 5 forward + 2 for each of the 4 backward ops
  const std::string text = all.str();
  MLS_ORACLE_CHECK(CHECK(text.find("digraph") != std::string::npos);
                   CHECK(count(text, "#f8cfa0") == 5);  // backward nodes are filled orange
                   CHECK(text.find("v2\\nexp\\n[]") != std::string::npos);
                   CHECK(text.find("v4\\nmul\\n[]") != std::string::npos));
}

TEST_CASE("dot: logistic regression nodes carry op names and shapes, edges carry shapes", "[lab2][dot]") {
  examples::Model m = examples::logistic_regression(Tensor::zeros({784, 10}));
  const DotGraph d = to_dot(*m.graph);
  MLS_OBSERVE(d.num_nodes());
  MLS_OBSERVE(d.num_edges());
  MLS_OBSERVE(m.graph->num_backward());
  CHECK(d.num_nodes() == m.graph->size());
  std::size_t edges = 0;
  for (const auto& n : m.graph->nodes()) edges += n->inputs.size();
  CHECK(d.num_edges() == edges);
  // The forward graph as drawn (the nodes and edges the label checks below read).
  MLS_OBSERVE(to_dot(*m.graph, {.show_backward = false}).str());
  const std::string text = d.str();
  MLS_ORACLE_CHECK(CHECK(text.find("x\\nplaceholder\\n[-1, 784]") != std::string::npos);
                   CHECK(text.find("W\\nvariable\\n[784, 10]") != std::string::npos);
                   CHECK(text.find("matmul\\n[-1, 10]") != std::string::npos);
                   CHECK(text.find("label=\"[784, 10]\"") != std::string::npos));  // the edge out of W
  CHECK(m.graph->num_backward() > 0);
}

TEST_CASE("dot: an eager tape can be drawn from its output", "[lab2][dot]") {
  Var x(Tensor::ones({2, 3}), true);
  const Var y = sum(relu(x) * 2.0);
  const DotGraph d = to_dot(std::vector<Var>{y});
  MLS_OBSERVE(d.num_nodes());
  MLS_OBSERVE(d.num_edges());
  MLS_ORACLE_CHECK(CHECK(d.num_nodes() == 5);  // x, relu, const 2, mul, sum
                   CHECK(d.num_edges() == 4));
  y.backward();
  autodiff_test::observe_var("x.grad", x.grad(), {});
  CHECK(x.grad().defined());
}
