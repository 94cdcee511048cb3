// The custom eager op: a caller-computed forward and a backward callback on the tape.
#include "helpers.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::require_error;

TEST_CASE("custom: a custom op's backward callback is used on the tape", "[lab2][eager]") {
  Rng rng(7, "custom");
  Var x(Tensor::randn({3, 4}, rng, 0.0, 1.0, DType::Float64), true);
  Var w(Tensor::randn({3, 4}, rng, 0.0, 1.0, DType::Float64), true);
  int calls = 0;
  // y = 2 x * w, written as a custom op with its own gradient rule.
  auto twice_mul = [&](const Var& a, const Var& b) {
    return custom("twice_mul", {a, b}, mls::mul(mls::mul(a.value(), b.value()), 2.0),
                  [a, b, &calls](const Var& g, const std::vector<bool>& needs) {
                    ++calls;
                    std::vector<Var> gs(2);
                    if (needs[0]) gs[0] = g * b.detach() * 2.0;
                    if (needs[1]) gs[1] = g * a.detach() * 2.0;
                    return gs;
                  });
  };
  const Var y = sum(tanh(twice_mul(x, w)));
  y.backward();
  MLS_OBSERVE(calls);
  autodiff_test::observe_var("y", y);
  MLS_ORACLE_CHECK(CHECK(calls == 1));
  autodiff_test::observe_var("x.grad", x.grad(), {2e-12, 0.0});
  autodiff_test::observe_var("w.grad", w.grad(), {2e-12, 0.0});
  // The oracle (after the custom op ran): the same function from built-in ops.
  MLS_ORACLE(Var x2(x.value(), true), w2(w.value(), true); sum(tanh(x2 * w2 * 2.0)).backward();)
  MLS_ORACLE_CHECK(const auto gx = x.grad().value().to_vector<double>(), rx = x2.grad().value().to_vector<double>();
                   const auto gw = w.grad().value().to_vector<double>(), rw = w2.grad().value().to_vector<double>();
                   for (std::size_t i = 0; i < gx.size(); ++i) {
                     CHECK(gx[i] == Approx(rx[i]).epsilon(1e-12));
                     CHECK(gw[i] == Approx(rw[i]).epsilon(1e-12));
                   });
  MLS_CHECK_EQ(std::string(op_name(Op::Custom)), std::string("custom"));
}

TEST_CASE("custom: no tape without requires_grad, and bad uses are errors", "[lab2][errors]") {
  Var c(Tensor::from({1.0, 2.0}));
  const Var y = custom("ident", {c}, c.value(), [](const Var& g, const std::vector<bool>&) { return std::vector<Var>{g}; });
  autodiff_test::observe_var("y", y, {});
  CHECK_FALSE(y.requires_grad());
  require_error([&] { custom("ident", {c}, Tensor(), [](const Var& g, const std::vector<bool>&) { return std::vector<Var>{g}; }); },
                "custom 'ident': the output value is undefined");
  require_error([&] { custom("ident", {c}, c.value(), nullptr); }, "custom 'ident': no backward callback");
  Var x(Tensor::from({1.0, 2.0}), true);
  const Var bad = custom("wrong_arity", {x}, x.value(),
                         [](const Var& g, const std::vector<bool>&) { return std::vector<Var>{g, g}; });
  require_error([&] { sum(bad).backward(); }, "custom: the backward of 'wrong_arity' returned 2 gradients for 1 inputs");
  Graph gr;
  const Var ph = gr.placeholder("x", {2}, DType::Float64);
  require_error([&] { custom("ident", {ph}, c.value(), [](const Var& g, const std::vector<bool>&) { return std::vector<Var>{g}; }); },
                "custom 'ident': input 0 is a graph node; custom ops are eager only");
}
