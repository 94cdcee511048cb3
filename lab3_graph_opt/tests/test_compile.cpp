// compile(fn): compiled == eager (values and gradients), guards and recompilation, the version
// limit, graph breaks and bad input.
#include "helpers.hpp"

#include "mls/autodiff/nn.hpp"
#include "mls/common/rng.hpp"
#include "mls/graph_opt/compile.hpp"

using namespace graph_opt_test;
using autodiff::Var;
using mls::testing::observe_values;
using mls::testing::Tolerance;

namespace {

/// Tolerance of a float32 comparison between compiled and eager: max_rel_error's (1024 ulp).
constexpr Tolerance kTol{2048 * 1.1920929e-7, 2048 * 1.1920929e-7};

/// The gradients of `vars` (each must require grad and have one), then clears them.
std::vector<Tensor> take_grads(std::vector<Var>& vars) {
  std::vector<Tensor> g;
  for (Var& v : vars) {
    g.push_back(v.grad().defined() ? v.grad().value() : Tensor::zeros(v.shape(), v.dtype()));
    v.zero_grad();
  }
  return g;
}

/// Values and gradients of `fn` on `inputs`, eager and compiled (`calls` calls, the last one's
/// gradients), compared; observes the compiled ones. `wrt`: the Vars whose gradients count.
void check_against_eager(const std::string& label, CompiledFunction::Fn fn, const std::vector<Var>& inputs,
                         std::vector<Var> wrt, int calls = 2) {
  CompiledFunction cf(fn, {.name = label});
  std::vector<Tensor> got, got_grads;
  for (int c = 0; c < calls; ++c) {
    for (Var& v : wrt) v.zero_grad();
    const std::vector<Var> out = cf(inputs);
    got.clear();
    Var total;
    for (const Var& o : out) {
      got.push_back(o.value());
      if (is_floating(o.dtype())) total = total.defined() ? total + autodiff::sum(o) : autodiff::sum(o);
    }
    if (!wrt.empty()) total.backward();
    got_grads = take_grads(wrt);
  }
  CHECK(cf.stats().compiles == 1);
  CHECK(cf.stats().cache_hits == calls - 1);
  for (std::size_t k = 0; k < got.size(); ++k) observe_values(label + ": output " + std::to_string(k), got[k], kTol);
  for (std::size_t k = 0; k < got_grads.size(); ++k)
    observe_values(label + ": gradient " + std::to_string(k), got_grads[k], kTol);
  MLS_ORACLE(std::vector<Tensor> want; Var total; for (const Var& o : fn(inputs)) {
    want.push_back(o.value());
    if (is_floating(o.dtype())) total = total.defined() ? total + autodiff::sum(o) : autodiff::sum(o);
  } if (!wrt.empty()) total.backward();
             const std::vector<Tensor> want_grads = take_grads(wrt);)
  MLS_ORACLE_CHECK(INFO(label); CHECK(max_rel_error(got, want) <= 1.0); CHECK(max_rel_error(got_grads, want_grads) <= 1.0));
}

/// A random function of two inputs a [m, n], b [n, k] and a captured bias [k] (a parameter or a
/// constant): a chain of `ops` ops drawn from elementwise, broadcasting, matmul and reductions.
CompiledFunction::Fn random_function(std::uint64_t seed, Var bias, int ops) {
  return [seed, bias, ops](const std::vector<Var>& in) -> std::vector<Var> {
    using namespace autodiff;
    Rng rng(seed, "compile-random-fn");
    Var y = matmul(in.at(0), in.at(1));  // [m, k]
    for (int i = 0; i < ops; ++i) {
      switch (rng.randint(0, 8)) {
        case 0: y = y + bias; break;
        case 1: y = tanh(y); break;
        case 2: y = relu(y) + y * 0.5; break;
        case 3: y = y * y * 0.25 - y; break;
        case 4: y = sigmoid(y) * bias; break;
        case 5: y = y - mean(y, {0}, true); break;
        case 6: y = exp(y * 0.1) + 1.0; break;
        default: y = matmul(y, transpose(y)) * 0.1; y = matmul(y, matmul(in.at(0), in.at(1))); break;
      }
    }
    return {sum(y * y, {1}), y};
  };
}

}  // namespace

TEST_CASE("compile: lab 2's MLP step (784-256-256-10, batch 128) equals eager in loss and gradients", "[lab3][compile]") {
  EagerExample ex = eager_example("mlp", 3);
  check_against_eager("mlp", ex.fn, ex.inputs, ex.params);
  CompiledFunction cf(ex.fn);
  (void)cf(ex.inputs);
  const CompiledVersion& v = cf.version(0);
  CHECK(v.has_backward);
  CHECK(v.grad_inputs.size() == 6);  // x and the labels need none: 3 weights, 3 biases
  CHECK(v.forward.outputs.size() > v.num_outputs);  // saved activations
  MLS_OBSERVE(v.captures.size());
}

TEST_CASE("compile: random small functions (awkward sizes) equal eager in values and gradients", "[lab3][compile]") {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    Rng rng(seed, "compile-random-sizes");
    const std::int64_t sizes[] = {1, 2, 3, 5, 7};
    const std::int64_t m = sizes[rng.randint(0, 5)], n = sizes[rng.randint(0, 5)], k = sizes[rng.randint(0, 5)];
    const bool param_bias = seed % 2 == 0, double_prec = seed % 3 == 0;
    const DType dt = double_prec ? DType::Float64 : DType::Float32;
    Var a(Tensor::randn({m, n}, rng, 0.0, 1.0, dt), true), b(Tensor::randn({n, k}, rng, 0.0, 1.0, dt), seed % 4 != 1);
    Var bias(Tensor::randn({k}, rng, 0.0, 1.0, dt), param_bias);
    const std::vector<Var> wrt = b.requires_grad() ? (param_bias ? std::vector<Var>{a, b, bias} : std::vector<Var>{a, b})
                                                   : (param_bias ? std::vector<Var>{a, bias} : std::vector<Var>{a});
    check_against_eager("random fn seed " + std::to_string(seed) + " " + shape_str(Shape{m, n, k}),
                        random_function(seed, bias, 2 + static_cast<int>(seed % 5)), {a, b}, wrt);
  }
}

TEST_CASE("compile: a Var f(Var x, Var w) keeps its signature, and a tuple of Vars comes back as a tuple", "[lab3][compile]") {
  Rng rng(5, "compile-signature");
  auto f = compile([](Var x, const Var& w) { return autodiff::tanh(autodiff::matmul(x, w)); });
  Var x(Tensor::randn({3, 4}, rng)), w(Tensor::randn({4, 2}, rng), true);
  const Var y = f(x, w);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(y)>, Var>);
  autodiff::sum(y).backward();
  const Tensor gw = w.grad().value();
  w.zero_grad();
  autodiff::sum(autodiff::tanh(autodiff::matmul(x, w))).backward();
  CHECK(max_rel_error({y.value(), gw}, {autodiff::tanh(autodiff::matmul(x, w)).value(), w.grad().value()}) <= 1.0);
  auto g = compile([](Var a, Var b) { return std::tuple<Var, Var>{a + b, a * b}; });
  const auto [s, p] = g(x, x);
  MLS_OBSERVE_VALUES(s.value());
  MLS_OBSERVE_VALUES(p.value());
  CHECK(max_rel_error({s.value(), p.value()}, {(x + x).value(), (x * x).value()}) <= 1.0);
}

TEST_CASE("compile: two outputs, each with its own adjoint, give eager's gradients", "[lab3][compile]") {
  Rng rng(6, "compile-two-outputs");
  Var a(Tensor::randn({4, 3}, rng), true);
  auto fn = [](const std::vector<Var>& in) -> std::vector<Var> {
    return {autodiff::exp(in[0] * 0.5), autodiff::sum(autodiff::relu(in[0]), {0})};
  };
  auto cf = compile(fn);
  std::vector<Var> out = cf({a});
  (autodiff::sum(out[0] * 3.0) + autodiff::sum(out[1])).backward();
  const Tensor got = a.grad().value();
  a.zero_grad();
  out = fn({a});
  (autodiff::sum(out[0] * 3.0) + autodiff::sum(out[1])).backward();
  MLS_OBSERVE_VALUES(got, kTol);
  CHECK(max_rel_error({got}, {a.grad().value()}) <= 1.0);
  // an output that is an input as it is: its gradient is the adjoint itself
  a.zero_grad();
  auto identity = compile([](Var x) { return x; });
  (identity(a) * 2.0).backward(Tensor::ones({4, 3}));
  MLS_OBSERVE_VALUES(a.grad().value());
  CHECK(max_rel_error({a.grad().value()}, {Tensor::full({4, 3}, 2.0)}) <= 1.0);
  // gradients of gradients need the eager function
  require_error([&] { cf({a})[1].backward(Tensor::ones({3}), false, /*create_graph=*/true); }, "create_graph=true");
}

TEST_CASE("compile: a new shape recompiles, the old shape is a cache hit again", "[lab3][compile]") {
  Rng rng(7, "compile-shapes");
  auto f = compile([](Var x) { return autodiff::sum(x * x + 1.0, {1}); });
  const Var a(Tensor::randn({4, 3}, rng)), b(Tensor::randn({5, 3}, rng)), c(Tensor::randn({4, 3}, rng));
  CHECK(max_rel_error({f(a).value()}, {autodiff::sum(a * a + 1.0, {1}).value()}) <= 1.0);
  CHECK(f.stats().compiles == 1);
  CHECK(max_rel_error({f(b).value()}, {autodiff::sum(b * b + 1.0, {1}).value()}) <= 1.0);
  CHECK(f.stats().compiles == 2);
  CHECK(max_rel_error({f(c).value()}, {autodiff::sum(c * c + 1.0, {1}).value()}) <= 1.0);
  MLS_OBSERVE(f.stats().compiles);
  MLS_OBSERVE(f.stats().cache_hits);
  CHECK(f.stats().cache_hits == 1);
  CHECK(f.impl().num_versions() == 2);
  // requires_grad and the grad mode are part of the signature too
  const Var d(Tensor::randn({4, 3}, rng), true);
  (void)f(d);
  CHECK(f.stats().compiles == 3);
  CHECK(f.impl().version(2).has_backward);
  {
    autodiff::NoGradGuard no_grad;
    (void)f(d);
  }
  CHECK(f.stats().compiles == 4);
  CHECK_FALSE(f.impl().version(3).has_backward);
}

TEST_CASE("compile: past max_versions new signatures run eagerly (counted), old ones stay compiled", "[lab3][compile]") {
  auto f = compile([](Var x) { return x * 2.0 + 1.0; }, {.name = "bounded", .max_versions = 2});
  std::vector<Var> xs;
  for (std::int64_t n : {1, 2, 3, 5}) xs.emplace_back(Tensor::arange(0, static_cast<double>(n), 1.0, DType::Float32));
  for (const Var& x : xs) CHECK(max_rel_error({f(x).value()}, {(x * 2.0 + 1.0).value()}) <= 1.0);
  MLS_OBSERVE(f.stats().compiles);
  MLS_OBSERVE(f.stats().fallbacks);
  CHECK(f.stats().compiles == 2);
  CHECK(f.stats().fallbacks == 2);
  (void)f(xs[0]);
  CHECK(f.stats().cache_hits == 1);
  REQUIRE_THROWS_WITH(compile([](Var x) { return x; }, {.max_versions = 0}), Catch::Contains("max_versions must be >= 1"));
}

TEST_CASE("compile: parameters are inputs, so an optimizer step is no recompile, while a constant changed in place recompiles",
          "[lab3][compile]") {
  Rng rng(8, "compile-captures");
  Var w(Tensor::randn({3, 2}, rng), true);
  Tensor c = Tensor::randn({2}, rng);
  const Var cv(c);
  auto f = compile([&](Var x) { return autodiff::sum(autodiff::matmul(x, w) + cv); });
  const Var x(Tensor::randn({4, 3}, rng));
  for (int step = 0; step < 3; ++step) {
    w.zero_grad();
    const Var loss = f(x);
    CHECK(max_rel_error({loss.value()}, {autodiff::sum(autodiff::matmul(x, w) + cv).value()}) <= 1.0);
    loss.backward();
    autodiff::nn::SGD(std::vector<Var>{w}, 0.1).step();  // in place
  }
  CHECK(f.stats().compiles == 1);
  CHECK(f.stats().cache_hits == 2);
  c.data<float>()[0] += 1.0f;  // the captured constant, in place
  const std::string why = check_guards(f.impl().version(0).signature, f.impl().version(0).captures, signature_of({x}, true));
  MLS_OBSERVE(why.substr(0, why.find('(')));
  CHECK(why.find("changed in place") != std::string::npos);
  CHECK(max_rel_error({f(x).value()}, {autodiff::sum(autodiff::matmul(x, w) + cv).value()}) <= 1.0);
  CHECK(f.stats().compiles == 2);
  MLS_OBSERVE(f.impl().guards(1));
}

TEST_CASE("compile: signature_of and check_guards name the first guard that fails", "[lab3][compile]") {
  Rng rng(9, "compile-guards");
  const Var a(Tensor::randn({2, 3}, rng)), b(Tensor::zeros({4}, DType::Int64)), g(Tensor::randn({2, 3}, rng), true);
  const Signature s = signature_of({a, b}, true);
  REQUIRE(s.inputs.size() == 2);
  CHECK(s.inputs[1].dtype == DType::Int64);
  MLS_CHECK_EQ(s.inputs[0].shape, (Shape{2, 3}));
  MLS_OBSERVE(s.str());
  MLS_CHECK_EQ(check_guards(s, {}, s), std::string());
  MLS_CHECK_EQ(check_guards(s, {}, signature_of({a, b}, false)), std::string("grad_mode: 1 compiled, 0 now"));
  MLS_CHECK_EQ(check_guards(s, {}, signature_of({a}, true)), std::string("number of inputs: 2 compiled, 1 now"));
  MLS_CHECK_EQ(check_guards(s, {}, signature_of({a, Var(Tensor::zeros({5}, DType::Int64))}, true)),
               std::string("input 1: shape [4] compiled, [5] now"));
  MLS_CHECK_EQ(check_guards(s, {}, signature_of({a, Var(Tensor::zeros({4}))}, true)),
               std::string("input 1: dtype int64 compiled, float32 now"));
  MLS_CHECK_EQ(check_guards(s, {}, signature_of({g, b}, true)), std::string("input 0: requires_grad 0 compiled, 1 now"));
  Var p(Tensor::randn({3}, rng), true);
  Capture pc{p.node(), true, {}, 0, {3}, DType::Float32, "capture 0 'p'"};
  MLS_CHECK_EQ(check_guards(s, {pc}, s), std::string());
  p.requires_grad_(false);
  MLS_CHECK_EQ(check_guards(s, {pc}, s), std::string("capture 0 'p': no longer requires grad"));
  const Var k(Tensor::randn({3}, rng));
  Capture kc{k.node(), false, k.value(), tensor_checksum(k.value()), {3}, DType::Float32, "capture 1"};
  MLS_CHECK_EQ(check_guards(s, {kc}, s), std::string());
  k.node()->value = k.value().clone();
  MLS_CHECK_EQ(check_guards(s, {kc}, s), std::string("capture 1: replaced by another tensor"));
  k.node()->value = Tensor::zeros({4});
  MLS_CHECK_EQ(check_guards(s, {kc}, s), std::string("capture 1: shape [3] compiled, [4] now"));
  require_error([&] { (void)signature_of({a, Var()}, true); }, "input 1 is an undefined Var");
}

TEST_CASE("compile: reading a traced value on the host is a graph break: a clear error", "[lab3][compile]") {
  auto f = compile([](Var x) {
    if (autodiff::sum(x).value().item() > 0) return x * 2.0;  // data-dependent control flow
    return x;
  }, {.name = "branchy"});
  const Var x(Tensor::ones({3}));
  require_error([&] { (void)f(x); }, "cannot trace data-dependent control flow");
  require_error([&] { (void)f(x); }, "sum (float32 [])");
  require_error([&] { (void)f(x); }, "where(cond, a, b)");
  auto g = compile([](Var x) { autodiff::sum(x).backward(); return x; });
  require_error([&] { (void)g(Var(Tensor::ones({3}), true)); }, "Var::backward()");
  // outside compile, lab 2's message is unchanged
  autodiff::Graph graph;
  require_error([&] { (void)graph.placeholder("p", {2}).value(); }, "run it with an Executor");
}

TEST_CASE("compile: bad input (no outputs, an undefined output or input, another graph, a graph that changes)",
          "[lab3][compile]") {
  const Var x(Tensor::ones({3}));
  require_error([&] { (void)compile([](const std::vector<Var>&) { return std::vector<Var>{}; })({x}); }, "fn returned no outputs");
  require_error([&] { (void)compile([](Var) { return Var(); })(x); }, "returned an undefined Var as output 0");
  require_error([&] { (void)compile([](Var a, Var) { return a; })(x, Var()); }, "input 1 is an undefined Var");
  autodiff::Graph other;
  const Var foreign = other.placeholder("q", {3});
  require_error([&] { (void)compile([&](Var a) { return std::tuple<Var, Var>{a, foreign}; })(x); }, "node of another graph");
  int calls = 0;
  auto changing = compile([&](Var a) { return ++calls % 2 ? a * 2.0 : a + 2.0; }, {.name = "changing"});
  (void)changing(x);
  require_error([&] { (void)changing(x); }, "different graph under the same signature");
  STATIC_REQUIRE(Compilable<Var (*)(Var)>);
  STATIC_REQUIRE(Compilable<std::vector<Var> (*)(const std::vector<Var>&)>);
  STATIC_REQUIRE_FALSE(Compilable<int (*)(Var)>);     // fn must return Vars
  STATIC_REQUIRE_FALSE(Compilable<Tensor (*)(Var)>);
  STATIC_REQUIRE_FALSE(Compilable<Var (*)(Tensor)>);  // and take Vars
}

TEST_CASE("compile: a compiled function called inside a traced one is traced inline", "[lab3][compile]") {
  Rng rng(10, "compile-nested");
  auto inner = compile([](Var a) { return autodiff::relu(a) * 3.0; });
  auto outer = compile([&](Var a) { return autodiff::sum(inner(a) + a); });
  Var x(Tensor::randn({5}, rng), true);
  const Var y = outer(x);
  y.backward();
  MLS_OBSERVE_VALUES(x.grad().value());
  const Tensor got = x.grad().value();
  x.zero_grad();
  autodiff::sum(autodiff::relu(x) * 3.0 + x).backward();
  CHECK(max_rel_error({y.value(), got}, {autodiff::sum(autodiff::relu(x) * 3.0 + x).value(), x.grad().value()}) <= 1.0);
  CHECK(inner.stats().compiles == 0);
  CHECK(outer.stats().compiles == 1);
}

TEST_CASE("compile: views of parameters and activations are made again in the backward, not saved", "[lab3][compile]") {
  // As lab 6's GPT: a stacked parameter [L, n, n] whose layers are reshape(slice(W, 0, l, l + 1)),
  // an activation [b, t, n] read as [b t, n]. The forward saves what the views view (the
  // parameter is an input: nothing to save), never a view: a saved view was copied at every call.
  Rng rng(29, "compile-views");
  const std::int64_t L = 3, b = 2, t = 5, n = 6;
  Var W(Tensor::randn({L, n, n}, rng, 0.0, 0.4), true), g(Tensor::randn({L, n}, rng), true);
  auto fn = [W, g, L, n, b, t](const std::vector<Var>& in) -> std::vector<Var> {
    Var x = in[0];  // [b, t, n]
    for (std::int64_t l = 0; l < L; ++l) {
      const Var w = autodiff::reshape(autodiff::slice(W, 0, l, l + 1), {n, n});
      const Var gl = autodiff::reshape(autodiff::slice(g, 0, l, l + 1), {n});
      const Var h = autodiff::reshape(autodiff::tanh(x), {b * t, n});
      x = x + autodiff::reshape(autodiff::matmul(h, w), {b, t, n}) * gl;
    }
    return {autodiff::sum(x * x)};
  };
  Var x(Tensor::randn({b, t, n}, rng), true);
  check_against_eager("stacked layers", fn, {x}, {x, W, g});
  CompiledFunction cf(fn, {.name = "stacked layers"});
  (void)cf({x});
  const CompiledVersion& v = cf.version(0);
  std::size_t saved_views = 0;
  for (std::size_t k = v.num_outputs; k < v.forward.outputs.size(); ++k)
    saved_views += is_view_op(v.forward.outputs[k].get()->op) && yields_view(*v.forward.outputs[k].get());
  MLS_OBSERVE(saved_views);
  MLS_OBSERVE(v.forward.outputs.size() - v.num_outputs);
  CHECK(saved_views == 0);
  CHECK(v.forward.outputs.size() > v.num_outputs);  // the tanh values are saved
}
