// compile's training-graph passes (issue 29): "concat-slices" (a sum of slice_backward pieces ->
// one concat) and "reshape-like" (reshape_like -> reshape, a view), each on random graphs with
// their gradients, against the graph before the pass; concat computed in its planned buffer.
#include "helpers.hpp"

#include "mls/autodiff/gradcheck.hpp"
#include "mls/common/rng.hpp"

#include <cmath>
#include <limits>

using namespace graph_opt_test;

namespace {

/// q run by lab 2's executor and by the planned executor in its memory plan, each output observed
/// under `label` (and "`label` in planned buffers").
std::pair<std::vector<Tensor>, std::vector<Tensor>> run_plain_and_planned(const Program& q, const std::vector<Tensor>& feeds,
                                                                          const std::string& label) {
  std::vector<Tensor> got = run(q, feeds);
  observe_outputs(label, got);
  PlannedExecutor ex(q, plan_memory(q));
  std::vector<Tensor> planned = ex.run(feeds);
  observe_outputs(label + " in planned buffers", planned);
  return {std::move(got), std::move(planned)};
}

/// A random forward graph that slices x [.. n along `dim` ..] into disjoint pieces (some of it
/// left out, the pieces used in a random order), maps each through an op and sums, with the
/// gradients w.r.t. x and w appended (lab 2's autodiff::gradients): the backward adds one
/// slice_backward per piece.
Program sliced_graph(Rng& rng, DType dt, std::int64_t& dim, int& pieces) {
  Program p;
  const std::int64_t nd = rng.randint(1, 4);
  Shape s;
  for (std::int64_t d = 0; d < nd; ++d) s.push_back(rng.randint(1, 5));
  dim = rng.randint(0, nd);
  s[static_cast<std::size_t>(dim)] = rng.randint(3, 10);
  const Var x = p.input("x", s, dt), w = p.input("w", s, dt);
  const Var h = x * w;  // the sliced value is an intermediate, as attention's qkv is
  // Cut points: pieces [c_k, c_{k+1}), each kept with probability 3/4 (at least two kept).
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  const std::int64_t n = s[static_cast<std::size_t>(dim)];
  for (std::int64_t at = 0; at < n;) {
    const std::int64_t len = std::min(n - at, rng.randint(1, 3));
    if (rng.uniform_double() < 0.75 || ranges.size() < 2) ranges.emplace_back(at, at + len);
    at += len;
  }
  for (std::size_t k = ranges.size(); k > 1; --k) std::swap(ranges[k - 1], ranges[static_cast<std::size_t>(rng.randint(0, static_cast<std::int64_t>(k)))]);
  Var total;
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    // Negative bounds some of the time (lab 2's slice counts them from the end).
    const std::int64_t start = rng.uniform_double() < 0.3 ? ranges[k].first - n : ranges[k].first;
    const std::int64_t stop = rng.uniform_double() < 0.3 && ranges[k].second < n ? ranges[k].second - n : ranges[k].second;
    Var piece = autodiff::slice(h, dim, start, stop);
    piece = k % 3 == 0 ? autodiff::exp(piece * 0.5) : (k % 3 == 1 ? autodiff::tanh(piece) : piece * piece);
    const Var term = autodiff::sum(piece);
    total = total.defined() ? total + term : term;
  }
  pieces = static_cast<int>(ranges.size());
  p.output(total);
  for (const Var& g : autodiff::gradients(total, {x, w})) p.output(g);
  return p;
}
}  // namespace

TEST_CASE("concat-slices turns the gradient of a sliced value into one concat, on random graphs", "[lab3][passes]") {
  Rng rng(29, "concat-slices");
  for (int trial = 0; trial < 16; ++trial) {
    INFO("trial " << trial);
    const DType dt = trial % 2 ? DType::Float64 : DType::Float32;
    std::int64_t dim = 0;
    int pieces = 0;
    const Program p = sliced_graph(rng, dt, dim, pieces);
    verify(p);  // the graph as lab 2 built it
    const std::size_t before = count_op(p, Op::SliceBackward);
    auto [q, n] = apply_checked(p, concat_slice_gradients);
    MLS_OBSERVE(n);
    MLS_OBSERVE(count_op(q, Op::SliceBackward));
    MLS_OBSERVE(count_op(q, Op::Concat));
    // Exact: the pass only drops additions of zeros (float64 and float32 alike).
    const auto feeds = random_feeds(p, 5);
    const auto [got, planned] = run_plain_and_planned(q, feeds, "concat-slices");
    MLS_ORACLE_CHECK(CHECK(before == static_cast<std::size_t>(pieces));
                     CHECK(n == 1); CHECK(count_op(q, Op::SliceBackward) == 0); CHECK(count_op(q, Op::Concat) == 1);
                     CHECK(max_rel_error(got, run(p, feeds)) == 0.0); CHECK(max_rel_error(planned, got) == 0.0));
  }
}

TEST_CASE("concat-slices leaves overlapping, strided and shared slice gradients alone", "[lab3][passes]") {
  Program p;
  const Var x = p.input("x", {4, 6}), g1 = p.input("g1", {4, 3}), g2 = p.input("g2", {4, 3}), g3 = p.input("g3", {4, 3});
  verify(p);
  // Overlapping ranges [0, 3) and [2, 5): the overlap adds up, not a concat.
  p.output(autodiff::slice_backward(g1, x, 1, 0, 3, 1) + autodiff::slice_backward(g2, x, 1, 2, 5, 1));
  // A step of 2.
  p.output(autodiff::slice_backward(g1, x, 1, 0, 6, 2) + autodiff::slice_backward(g3, x, 1, 1, 4, 1));
  // A slice_backward that is also an output (two uses).
  const Var shared = autodiff::slice_backward(g3, x, 1, 3, 6, 1);
  p.output(autodiff::slice_backward(g2, x, 1, 0, 3, 1) + shared);
  p.output(shared);
  // Different dims.
  const Var y = p.input("y", {6, 6}), h = p.input("h", {6, 2});
  p.output(autodiff::slice_backward(h, y, 1, 0, 2, 1) + autodiff::slice_backward(autodiff::transpose(h, 0, 1), y, 0, 2, 4, 1));
  auto [q, n] = apply_checked(p, concat_slice_gradients);
  MLS_OBSERVE(n);
  MLS_OBSERVE(count_op(q, Op::Concat));
  MLS_ORACLE_CHECK(CHECK(n == 0); CHECK(count_op(q, Op::SliceBackward) == 8));
}

TEST_CASE("reshape-like makes reshape_like a reshape the planners see as a view, with equal gradients", "[lab3][passes]") {
  Rng rng(29, "reshape-like");
  for (int trial = 0; trial < 8; ++trial) {
    INFO("trial " << trial);
    const DType dt = trial % 2 ? DType::Float64 : DType::Float32;
    Program p;
    const std::int64_t a = rng.randint(1, 5), b = rng.randint(1, 5), c = rng.randint(1, 5);
    const Var x = p.input("x", {a, b * c}, dt), w = p.input("w", {a, b, c}, dt);
    // reshape's gradient is reshape_like(g, x); permute + reshape makes one that must copy.
    Var y = autodiff::reshape(autodiff::tanh(x), {a, b, c}) * w;
    if (trial % 3 == 0) y = autodiff::reshape(autodiff::permute(y, {2, 1, 0}), {c * b, a});
    const Var loss = autodiff::sum(autodiff::exp(y * 0.5));
    p.output(loss);
    for (const Var& g : autodiff::gradients(loss, {x, w})) p.output(g);
    verify(p);
    const std::size_t before = count_op(p, Op::ReshapeLike);
    auto [q, n] = apply_checked(p, specialize_reshape_like);
    MLS_OBSERVE(n);
    MLS_OBSERVE(count_op(q, Op::ReshapeLike));
    const auto feeds = random_feeds(p, 9);
    PlannedExecutor ex(q, plan_memory(q));
    const std::vector<Tensor> planned = ex.run(feeds);
    observe_outputs("reshape-like in planned buffers", planned);
    MLS_ORACLE_CHECK(CHECK(before > 0); CHECK(n == static_cast<int>(before)); CHECK(count_op(q, Op::ReshapeLike) == 0);
                     CHECK(max_rel_error(planned, run(p, feeds)) == 0.0));
  }
}

TEST_CASE("compile's pipeline starts with the training-graph passes", "[lab3][manager]") {
  Program p;
  const Var x = p.input("x", {2, 3});
  p.output(autodiff::reshape(autodiff::exp(x) * 1.0, {3, 2}));
  const std::string pipeline = compile_pipeline();
  PassManager pm;
  pm.add_pipeline(pipeline);  // every name is registered
  const PassReport r = pm.run(p);
  MLS_OBSERVE(pipeline);
  MLS_OBSERVE(r.stats.size());
  MLS_ORACLE_CHECK(CHECK(pipeline == "reshape-like,concat-slices," + default_pipeline()); CHECK(pm.size() == 13));
}

TEST_CASE("layer_norm and concat computed in their planned buffers equal lab 2's executor, on random shapes", "[lab3][memory]") {
  Rng rng(29, "layer-norm-into");
  for (int trial = 0; trial < 8; ++trial) {
    INFO("trial " << trial);
    const DType dt = trial % 2 ? DType::Float64 : DType::Float32;
    const std::int64_t a = rng.randint(1, 6), c = rng.randint(1, 70);
    Program p;
    const Var x = p.input("x", {a, 3, c}, dt), g = p.input("gamma", {c}, dt), b = p.input("beta", {c}, dt);
    const Var xs = trial % 3 == 0 ? autodiff::permute(p.input("xt", {3, a, c}, dt), {1, 0, 2}) : x;  // a strided view
    const Var y = autodiff::layer_norm(xs * 2.0, g, b, 1e-5);
    p.output(autodiff::concat({autodiff::exp(y), y * 3.0}, 1));
    verify(p);
    const auto feeds = random_feeds(p, 40 + static_cast<std::uint64_t>(trial));
    PlannedExecutor ex(p, plan_memory(p));
    const std::vector<Tensor> planned = ex.run(feeds);
    observe_outputs("layer_norm and concat in planned buffers", planned);
    MLS_ORACLE_CHECK(CHECK(max_rel_error(planned, run(p, feeds)) <= 1.0));
  }
}

TEST_CASE("fused-layernorm gives layer_norm's values and gradients, on random graphs", "[lab3][passes]") {
  Rng rng(29, "fused-layernorm");
  for (int trial = 0; trial < 10; ++trial) {
    INFO("trial " << trial);
    const DType dt = trial % 2 ? DType::Float64 : DType::Float32;
    const std::int64_t a = rng.randint(1, 5), t = rng.randint(1, 7), c = rng.randint(1, 40);
    Program p;
    const Var x = p.input("x", {a, t, c}, dt), w = p.input("w", {c, c}, dt), g = p.input("gamma", {c}, dt),
              b = p.input("beta", {c}, dt);
    // Two layer norms, one of them on a strided view, with residuals (as a transformer block).
    const Var h = autodiff::layer_norm(x, g, b, 1e-5);
    const Var y = x + autodiff::tanh(autodiff::matmul(h, w));
    const Var z = autodiff::layer_norm(trial % 3 == 0 ? autodiff::transpose(y, 0, 1) : y, g * 2.0, b, 1e-3);
    const Var loss = autodiff::sum(z * z) + autodiff::sum(h);
    p.output(loss);
    Program q = clone(p);
    verify(q);
    const int n = fuse_layer_norm(q);
    verify(q);
    // Gradients of both: lab 2's rules before, the fused rule after.
    for (const Var& d : autodiff::gradients(loss, {x, w, g, b})) p.output(d);
    std::vector<Var> wrt;
    for (std::size_t i = 0; i < 4; ++i) wrt.push_back(q.inputs[i]);
    for (const Var& d : autodiff::gradients(q.outputs[0], wrt)) q.output(d);
    verify(q);
    MLS_OBSERVE(n);
    MLS_OBSERVE(count_op(q, kLayerNormDx));
    const auto feeds = random_feeds(p, 60 + static_cast<std::uint64_t>(trial));
    const auto [got, planned] = run_plain_and_planned(q, feeds, "fused-layernorm");
    MLS_ORACLE_CHECK(CHECK(n == 2); CHECK(count_op(q, Op::LayerNorm) == 0); CHECK(count_op(q, kLayerNormDx) == 2);
                     CHECK(count_op(q, kLayerNormDgamma) == 2);
                     CHECK(max_rel_error(got, run(p, feeds)) <= 1.0); CHECK(max_rel_error(planned, got) <= 1.0));
  }
}

TEST_CASE("fused_layer_norm passes a float64 gradcheck, and its ops refuse bad shapes", "[lab3][passes]") {
  Program p;
  const Var px = p.input("x", {2, 3, 5}, DType::Float64), pg = p.input("gamma", {5}, DType::Float64);
  p.output(p.make(kFusedLayerNorm, {px, pg, pg}, autodiff::Attrs().set("eps", 1e-5)));
  verify(p);
  const std::vector<Tensor> in{randn64({2, 3, 5}, 1, "ln-x"), randn64({5}, 2, "ln-g"), randn64({5}, 3, "ln-b")};
  const autodiff::GradcheckResult r = autodiff::gradcheck(
      [](const std::vector<Var>& v) {
        return autodiff::apply(kFusedLayerNorm, {v[0] * v[0], v[1], v[2]}, autodiff::Attrs().set("eps", 1e-5));
      },
      in);
  MLS_OBSERVE(r.ok);
  CHECK(r.ok);
  INFO(r.report);
  const Var x(Tensor::zeros({2, 4})), c4(Tensor::zeros({4})), c3(Tensor::zeros({3}));
  const autodiff::Attrs eps = autodiff::Attrs().set("eps", 1e-5);
  require_error([&] { (void)autodiff::apply(kFusedLayerNorm, {x, c3, c4}, eps); }, "fused_layer_norm: input 1 must be [4]");
  require_error([&] { (void)autodiff::apply(kLayerNormDx, {x, c4, Var(Tensor::zeros({2, 3}))}, eps); }, "layer_norm_dx: input 2 must be [2, 4]");
  require_error([&] { (void)autodiff::apply(kLayerNormDgamma, {x, Var(Tensor::zeros({2, 4}, DType::Float64))}, eps); },
                "layer_norm_dgamma: input 1 is float64");
}

TEST_CASE("fuse-gelu gives gelu's values and gradients, with and without a bias, on random graphs", "[lab3][passes]") {
  Rng rng(29, "fuse-gelu");
  for (int trial = 0; trial < 12; ++trial) {
    INFO("trial " << trial);
    const DType dt = trial % 2 ? DType::Float64 : DType::Float32;
    const std::int64_t a = rng.randint(1, 5), t = rng.randint(1, 7), c = rng.randint(1, 30), n = rng.randint(1, 40);
    Program p;
    const Var x = p.input("x", {a, t, c}, dt), w = p.input("w", {c, n}, dt),
              b = p.input("b", trial % 3 == 1 ? Shape{1, 1, n} : Shape{n}, dt);
    // As a transformer's MLP: gelu(x W + b), the bias on either side of the add; a gelu with no
    // bias; and (every fourth trial) a pre-activation read twice, whose bias stays an add.
    const Var h = autodiff::matmul(x, w);
    const Var pre = trial % 2 ? h + b : b + h;
    const Var y = autodiff::gelu(pre);
    Var loss = autodiff::sum(y * y) + autodiff::sum(autodiff::gelu(x * 3.0));
    if (trial % 4 == 3) loss = loss + autodiff::sum(pre);
    p.output(loss);
    Program q = clone(p);
    verify(q);
    const int rewritten = fuse_gelu(q);
    verify(q);
    for (const Var& d : autodiff::gradients(loss, {x, w, b})) p.output(d);
    std::vector<Var> wrt;
    for (std::size_t i = 0; i < 3; ++i) wrt.push_back(q.inputs[i]);
    for (const Var& d : autodiff::gradients(q.outputs[0], wrt)) q.output(d);
    verify(q);
    MLS_OBSERVE(rewritten);
    MLS_OBSERVE(count_op(q, kBiasGeluBackward));
    MLS_OBSERVE(count_op(q, Op::Add));
    const auto feeds = random_feeds(p, 90 + static_cast<std::uint64_t>(trial));
    const auto [got, planned] = run_plain_and_planned(q, feeds, "fuse-gelu");
    std::size_t with_bias = 0;
    for (const NodePtr& m : q.graph->nodes()) with_bias += m->op == kBiasGelu && m->inputs.size() == 2;
    MLS_ORACLE_CHECK(CHECK(rewritten == 2); CHECK(count_op(q, Op::Gelu) == 0); CHECK(count_op(q, kBiasGeluBackward) == 2);
                     CHECK(with_bias == (trial % 4 == 3 ? 0u : 1u));
                     CHECK(max_rel_error(got, run(p, feeds)) <= 1.0); CHECK(max_rel_error(planned, got) <= 1.0));
  }
}

TEST_CASE("bias_gelu passes a float64 gradcheck with and without a bias, and its ops refuse bad inputs", "[lab3][passes]") {
  Program p;
  const Var px = p.input("x", {2, 3, 5}, DType::Float64), pb = p.input("b", {5}, DType::Float64);
  p.output(p.make(kBiasGelu, {px, pb}));
  verify(p);
  const std::vector<Tensor> in{randn64({2, 3, 5}, 7, "gelu-x"), randn64({5}, 8, "gelu-b")};
  const autodiff::GradcheckResult r = autodiff::gradcheck(
      [](const std::vector<Var>& v) { return autodiff::apply(kBiasGelu, {v[0] * 2.0, v[1]}) + autodiff::apply(kBiasGelu, {v[0]}); },
      in);
  MLS_OBSERVE(r.ok);
  INFO(r.report);
  CHECK(r.ok);
  // Its value is lab 1's gelu of x + b, bit for bit (one add and the same gelu per element).
  Rng rng(29, "bias_gelu value");
  const Tensor x = Tensor::randn({4, 7}, rng, 0.0, 2.0), bias = Tensor::randn({7}, rng, 0.0, 2.0);
  const Tensor fused = autodiff::apply(kBiasGelu, {Var(x), Var(bias)}).value();
  MLS_OBSERVE_VALUES(fused);
  MLS_ORACLE_CHECK(CHECK(max_rel_error({fused}, {autodiff::gelu(Var(x) + Var(bias)).value()}) == 0.0));
  const Var x24(Tensor::zeros({2, 4})), c4(Tensor::zeros({4})), c3(Tensor::zeros({3}));
  require_error([&] { (void)autodiff::apply(kBiasGelu, {x24, c3}); }, "bias_gelu: input 1 must be [4] for x [2, 4], got [3]");
  require_error([&] { (void)autodiff::apply(kBiasGelu, {x24, Var(Tensor::zeros({4}, DType::Float64))}); },
                "bias_gelu: input 1 is float64, x is float32");
  require_error([&] { (void)autodiff::apply(kBiasGelu, {x24, c4, c4}); }, "bias_gelu: expected 1 or 2 inputs");
  require_error([&] { (void)autodiff::apply(kBiasGelu, {Var(Tensor::zeros({2, 4}, DType::Int64))}); },
                "bias_gelu: x must be float32 or float64, got int64");
  require_error([&] { (void)autodiff::apply(kBiasGeluBackward, {x24, c4, Var(Tensor::zeros({2, 3}))}); },
                "bias_gelu_backward: input 2 must be [2, 4] for x [2, 4], got [2, 3]");
  require_error([&] { (void)autodiff::apply(kBiasGeluBackward, {x24}); }, "bias_gelu_backward: expected 2 or 3 inputs");
}

namespace {
/// softmax(scale q k^T + mask) v as lab 2's ops (GPT's causal_self_attention), q, k, v [B, H, T, D].
Var attention_ops(const Var& q, const Var& k, const Var& v, const Var& mask, double scale) {
  return autodiff::matmul(autodiff::softmax(autodiff::matmul(q, autodiff::transpose(k, -2, -1)) * scale + mask, -1), v);
}
Tensor causal_mask(std::int64_t T, DType dt) {
  std::vector<double> m(static_cast<std::size_t>(T * T), 0.0);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t u = t + 1; u < T; ++u) m[static_cast<std::size_t>(t * T + u)] = -std::numeric_limits<double>::infinity();
  return Tensor::from_vector(m, {T, T}).to(dt);
}
}  // namespace

TEST_CASE("fuse-attention gives attention's values and gradients, on random graphs", "[lab3][passes]") {
  Rng rng(29, "fuse-attention");
  for (int trial = 0; trial < 10; ++trial) {
    INFO("trial " << trial);
    const DType dt = trial % 2 ? DType::Float64 : DType::Float32;
    // Head sizes with a kernel of their own (16, 32) and others.
    const std::int64_t B = rng.randint(1, 4), H = rng.randint(1, 4), T = rng.randint(1, 12),
                       D = trial % 4 == 0 ? 16 : (trial % 4 == 1 ? 32 : rng.randint(1, 20));
    Program p;
    const Var x = p.input("x", {B, T, 3 * H * D}, dt);
    auto heads = [&](std::int64_t which) {  // as lab 6's GPT: slices of x, permuted to [B, H, T, D]
      return autodiff::permute(autodiff::reshape(autodiff::slice(x, 2, which * H * D, (which + 1) * H * D), {B, T, H, D}), {0, 2, 1, 3});
    };
    // A causal mask, or a random finite one.
    const Tensor mask = trial % 3 == 2 ? Tensor::randn({T, T}, rng, 0.0, 1.0, dt) : causal_mask(T, dt);
    const Var y = attention_ops(heads(0), heads(1), heads(2), autodiff::constant_like(x, mask), 1.0 / std::sqrt(static_cast<double>(D)));
    const Var loss = autodiff::sum(autodiff::tanh(y) * y);
    p.output(loss);
    verify(p);
    Program q = clone(p);
    const int n = fuse_attention(q);
    verify(q);
    for (const Var& d : autodiff::gradients(loss, {x})) p.output(d);
    for (const Var& d : autodiff::gradients(q.outputs[0], {q.inputs[0]})) q.output(d);
    MLS_OBSERVE(n);
    MLS_OBSERVE(count_op(q, kAttentionBackward));
    const auto feeds = random_feeds(p, 80 + static_cast<std::uint64_t>(trial));
    const auto [got, planned] = run_plain_and_planned(q, feeds, "fuse-attention");
    MLS_ORACLE_CHECK(CHECK(n == 1); CHECK(count_op(q, Op::Softmax) == 0); CHECK(count_op(q, kAttentionBackward) == 1);
                     CHECK(max_rel_error(got, run(p, feeds)) <= 1.0); CHECK(max_rel_error(planned, got) <= 1.0));
  }
}

TEST_CASE("fuse-attention leaves other shapes alone, and fused_attention passes a float64 gradcheck and refuses bad shapes", "[lab3][passes]") {
  Program p;
  const Var q = p.input("q", {2, 5, 4}), k = p.input("k", {2, 5, 4}), v = p.input("v", {2, 5, 4}), m = p.input("m", {5, 5});
  const Var mc = autodiff::constant_like(q, causal_mask(5, DType::Float32));
  verify(p);
  p.output(attention_ops(q, k, v, m, 0.5));                                          // the mask is not a constant
  p.output(attention_ops(q, k, autodiff::slice(v, 2, 0, 3), mc, 0.5));               // v of another shape
  p.output(autodiff::matmul(autodiff::softmax(autodiff::matmul(q, autodiff::transpose(k, -2, -1)) * 0.5 + mc, 1), v));  // not the last dim
  const Var s = autodiff::matmul(q, autodiff::transpose(k, -2, -1));
  p.output(autodiff::matmul(autodiff::softmax(s * 0.5 + mc, -1), v));
  p.output(s);  // the scores used twice
  auto [r, n] = apply_checked(p, fuse_attention);
  MLS_OBSERVE(n);
  MLS_ORACLE_CHECK(CHECK(n == 0); CHECK(count_op(r, kFusedAttention) == 0));
  const autodiff::GradcheckResult g = autodiff::gradcheck(
      [](const std::vector<Var>& x) {
        return autodiff::apply(kFusedAttention, {x[0], x[1], x[2], autodiff::constant_like(x[0], causal_mask(3, DType::Float64))},
                               autodiff::Attrs().set("scale", 0.7));
      },
      {randn64({2, 3, 4}, 4, "att-q"), randn64({2, 3, 4}, 5, "att-k"), randn64({2, 3, 4}, 6, "att-v")});
  MLS_OBSERVE(g.ok);
  INFO(g.report);
  CHECK(g.ok);
  const Var a(Tensor::zeros({2, 3, 4})), b(Tensor::zeros({2, 3, 5})), m3(Tensor::zeros({3, 3})), m4(Tensor::zeros({4, 4}));
  const autodiff::Attrs sc = autodiff::Attrs().set("scale", 1.0);
  require_error([&] { (void)autodiff::apply(kFusedAttention, {a, b, a, m3}, sc); }, "fused_attention: input 1 must be [2, 3, 4]");
  require_error([&] { (void)autodiff::apply(kFusedAttention, {a, a, a, m4}, sc); }, "fused_attention: input 3 must be [3, 3]");
  require_error([&] { (void)autodiff::apply(kAttentionBackward, {a, a, a, m3, b}, sc); }, "attention_backward: input 4 must be [2, 3, 4]");
}

TEST_CASE("a reshape that copies (a permuted value flattened) is copied straight into its planned buffer", "[lab3][passes]") {
  Rng rng(29, "reshape into");
  for (int trial = 0; trial < 8; ++trial) {
    INFO("trial " << trial);
    const DType dt = trial % 2 ? DType::Float64 : DType::Float32;
    const std::int64_t a = rng.randint(1, 4), h = rng.randint(1, 5), t = rng.randint(1, 7), d = rng.randint(1, 9);
    Program p;
    const Var x = p.input("x", {a, h, t, d}, dt);
    // attention's heads merged back: [a, h, t, d] -> [a, t, h, d] -> [a, t, h d] (a copy), then an op.
    const Var y = autodiff::reshape(autodiff::permute(autodiff::tanh(x), {0, 2, 1, 3}), {a, t, h * d});
    p.output(y * 2.0);
    p.output(y);
    verify(p);
    const MemoryPlan plan = plan_memory(p);
    std::size_t copying = 0;
    for (std::size_t i = 0; i < plan.schedule.size(); ++i) copying += plan.schedule[i]->op == Op::Reshape && plan.buffer[i] >= 0;
    MLS_OBSERVE(copying);
    const auto feeds = random_feeds(p, 40 + static_cast<std::uint64_t>(trial));
    PlannedExecutor ex(p, plan);
    std::vector<Tensor> got;
    for (int r = 0; r < 2; ++r) got = ex.run(feeds);  // the second run in the buffers the first allocated
    observe_outputs("reshape into its buffer", got, /*exact=*/true);
    MLS_ORACLE_CHECK(CHECK(forward_into(Op::Reshape) != nullptr); CHECK(copying == (h > 1 && t > 1 && d > 1 ? 1u : 0u));
                     CHECK(max_rel_error(got, run(p, feeds)) == 0.0));
  }
}
