// The op registry: an op registered from outside lab 2's op files (as later labs do) runs
// eagerly and in a graph, differentiates in reverse and forward mode, and bad registrations fail.
#include "helpers.hpp"
#include "mls/observe.hpp"
#include "mls/observe_tensor.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::require_error;

namespace {
// ---- the worked example of handouts/lab2/README.md: softplus(x) = log(1 + e^x) -----------------
Tensor softplus_fwd(std::span<const Tensor> in, const Attrs&) {
  return mls::log(mls::add(mls::exp(in[0]), 1.0));
}
void softplus_infer(std::span<const Node* const> in, const Attrs&, Shape& s, DType& d) {
  s = in[0]->shape;
  d = is_floating(in[0]->dtype) ? in[0]->dtype : DType::Float32;
}
std::vector<Var> softplus_bwd(const Var& out, const Var& g, const std::vector<bool>&) {
  return {g * sigmoid(Var(out.node()->inputs[0]))};  // d softplus = sigmoid
}
Tensor softplus_jvp(const Node&, const std::vector<Tensor>& x, const std::vector<Tensor>& t, const Tensor&) {
  return mls::mul(t[0], mls::sigmoid(x[0]));
}
const Op kSoftplus = register_op({.name = "test_softplus", .arity = 1, .forward = softplus_fwd,
                                  .infer = softplus_infer, .backward = softplus_bwd, .jvp = softplus_jvp,
                                  .doc = "log(1 + e^x)"});
Var softplus(const Var& x) { return apply(kSoftplus, {x}); }
}  // namespace

TEST_CASE("registry: a registered op runs eagerly and in a graph, with reverse and forward mode", "[lab2][opgrad]") {
  const Tensor xv = autodiff_test::randn({3, 4}, 41);
  // Reverse mode, both modes, against central differences.
  autodiff_test::check_grad([](const std::vector<Var>& v) { return sum(softplus(v[0]) * v[0]); }, {xv});
  Var x(xv, true);
  sum(softplus(x)).backward();
  const Tensor gx = x.grad().value();
  MLS_OBSERVE(gx, {1e-12, 1e-12});
  MLS_ORACLE_CHECK(CHECK(mls::allclose(gx, mls::sigmoid(xv), 1e-12, 1e-12)));
  // Graph mode through lab 2's one executor, and forward mode through the registered JVP rule.
  Graph g;
  const Var ph = g.placeholder("x", {-1, 4}, DType::Float64);
  const Var y = softplus(ph);
  MLS_CHECK_EQ(y.shape(), (Shape{-1, 4}));
  const Tensor yv = Executor(g).run({y}, {{ph, xv}})[0];
  MLS_OBSERVE(yv, {1e-12, 1e-12});
  MLS_ORACLE_CHECK(CHECK(mls::allclose(yv, mls::log(mls::add(mls::exp(xv), 1.0)), 1e-12, 1e-12)));
  const Tensor u = autodiff_test::randn({3, 4}, 42);
  const JvpResult r = jvp({y}, {{ph, xv}}, {{ph, u}});
  MLS_OBSERVE(r.tangents[0], {1e-12, 1e-12});
  MLS_ORACLE_CHECK(CHECK(mls::allclose(r.tangents[0], mls::mul(u, mls::sigmoid(xv)), 1e-12, 1e-12)));
  // The registry's view of it.
  const OpDef& def = op_def(kSoftplus);
  MLS_CHECK_EQ(def.doc, std::string("log(1 + e^x)"));
  CHECK(op_from_name("test_softplus") == kSoftplus);
  MLS_CHECK_EQ(std::string(op_name(kSoftplus)), std::string("test_softplus"));
  CHECK(is_registered(kSoftplus));
  CHECK(static_cast<std::size_t>(kSoftplus) >= static_cast<std::size_t>(Op::Count_));
  const std::vector<Op> all = registered_ops();
  CHECK(std::find(all.begin(), all.end(), kSoftplus) != all.end());
  CHECK(std::find(all.begin(), all.end(), Op::Matmul) != all.end());
  MLS_OBSERVE(static_cast<std::int64_t>(all.size()) >= static_cast<std::int64_t>(Op::Count_) + 1);
  Shape s;
  DType d = DType::Bool;
  infer_node(*y.get(), s, d);
  MLS_CHECK_EQ(s, (Shape{-1, 4}));
  mls::testing::observe("infer_node dtype", dtype_name(d));
  MLS_ORACLE_CHECK(CHECK(d == DType::Float64));
  const Tensor ev = eval_node(*y.get(), std::vector<Tensor>{xv});
  CHECK(mls::allclose(ev, yv, 0.0, 0.0));
}

TEST_CASE("registry: flags of the built-in ops, shape helpers, and bad registrations", "[lab2][errors]") {
  // A differentiable op registered without a gradient rule fails when a gradient reaches it.
  static const Op no_rule = register_op({.name = "test_no_rule", .forward = softplus_fwd, .infer = softplus_infer});
  Var x(autodiff_test::randn({2}, 43), true);
  require_error([&] { sum(apply(no_rule, {x})).backward(); }, "backward: op test_no_rule has no gradient rule");
  // Flags lab 3's fusion and cost model read.
  CHECK(op_def(Op::Gelu).elementwise);
  const auto& gelu_unary = op_def(Op::Gelu).unary;
  const auto& minimum_binary = op_def(Op::Minimum).binary;
  mls::testing::observe("op_def(Op::Gelu).unary", gelu_unary ? op_name(*gelu_unary) : "none");
  mls::testing::observe("op_def(Op::Minimum).binary", minimum_binary ? op_name(*minimum_binary) : "none");
  MLS_ORACLE_CHECK(CHECK(gelu_unary == UnaryOp::Gelu); CHECK(minimum_binary == BinaryOp::Minimum));
  CHECK_FALSE(op_def(Op::Eq).elementwise);
  CHECK_FALSE(op_def(Op::Eq).differentiable);
  CHECK(op_def(Op::Permute).view);
  CHECK_FALSE(op_def(Op::Matmul).view);
  CHECK(op_def(Op::Matmul).flops != nullptr);
  Graph g;
  const Var a = g.placeholder("a", {8, 16});
  const Var b = g.placeholder("b", {16, 4});
  const double flops = op_def(Op::Matmul).flops(*matmul(a, b).get());
  MLS_OBSERVE(flops);
  MLS_ORACLE_CHECK(CHECK(flops == 2.0 * 8 * 4 * 16));
  MLS_OBSERVE(shape_numel({-1, 3, 0}));
  MLS_ORACLE_CHECK(CHECK(shape_numel({-1, 3, 0}) == 3.0));
  CHECK(shape_matches({-1, 3}, {7, 3}));
  CHECK_FALSE(shape_matches({-1, 3}, {7, 3, 1}));
  CHECK_FALSE(shape_matches({2, 3}, {7, 3}));
  // Bad registrations and lookups name the op and what is wrong.
  require_error([] { register_op({.name = "add", .forward = softplus_fwd, .infer = softplus_infer}); },
                "register_op: an op named 'add' is already registered");
  require_error([] { register_op({.name = "test_no_forward", .infer = softplus_infer}); },
                "register_op: op 'test_no_forward' needs a forward and an infer function");
  require_error([] { register_op({.name = "", .forward = softplus_fwd, .infer = softplus_infer}); },
                "register_op: the op needs a name");
  require_error(
      [] { register_op({.name = "test_bad_ew", .forward = softplus_fwd, .infer = softplus_infer, .elementwise = true}); },
      "register_op: elementwise op 'test_bad_ew' must name exactly one lab 1 scalar function");
  require_error([] { (void)op_def(static_cast<Op>(1000)); }, "op_def: unknown op 1000 (not registered)");
  require_error([] { (void)op_from_name("frobnicate"); }, "op_from_name: unknown op 'frobnicate'");
  CHECK_FALSE(is_registered(static_cast<Op>(1000)));
}
