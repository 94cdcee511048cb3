// Control flow in graphs (control.hpp): cond and while_loop eagerly and in graphs against host
// references on random inputs, their gradients (float64 gradcheck, eager tape vs the graph's reverse
// replay), forward mode against reverse mode, an LSTM and a GRU over a sequence written with
// while_loop against the unrolled C++ loop of cells, the replay task on its own, and bad input.
// Scored group "control" (lab.json): the tag [control].
#include "helpers.hpp"
#include "mls/autodiff/control.hpp"
#include "mls/autodiff/workload.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::check_grad;
using autodiff_test::randn;
using autodiff_test::require_error;
using V = std::vector<Var>;

namespace {

/// A 0-d int64 constant in v's world (its graph, or eager).
Var int_like(const Var& v, std::int64_t x) { return constant_like(v, Tensor::scalar(static_cast<double>(x), DType::Int64)); }

/// x <- tanh(x * w + b) for `steps` iterations with a counter: captured w, b.
V tanh_loop(const Var& x, const Var& w, const Var& b, std::int64_t steps) {
  return while_loop([&](const V& s) { return lt(s[0], int_like(s[0], steps)); },
                    [&](const V& s) { return V{s[0] + int_like(s[0], 1), tanh(s[1] * w + b)}; }, {int_like(x, 0), x});
}

/// An LSTM over xs [T, B, I] written with while_loop: state (t, h, c); x_t = xs[t] picked by the
/// counter (an embedding row of xs viewed as [T, B*I]). The weights are captured by the body.
LstmState lstm_loop(const Var& xs, const LstmState& s0, const V& w) {
  const std::int64_t T = xs.shape()[0], B = xs.shape()[1], I = xs.shape()[2];
  const Var flat = reshape(xs, {T, B * I});
  const V out = while_loop(
      [&](const V& s) { return lt(s[0], int_like(s[0], T)); },
      [&](const V& s) {
        const Var x = reshape(embedding(flat, s[0]), {B, I});
        const LstmState n = lstm_cell(x, {s[1], s[2]}, w[0], w[1], w[2], w[3]);
        return V{s[0] + int_like(s[0], 1), n.h, n.c};
      },
      {int_like(xs, 0), s0.h, s0.c});
  return {out[1], out[2]};
}
/// The same LSTM unrolled: a C++ loop of cells (T nodes of each kind, one after the other).
LstmState lstm_unrolled(const Var& xs, LstmState s, const V& w) {
  const std::int64_t T = xs.shape()[0], B = xs.shape()[1], I = xs.shape()[2];
  for (std::int64_t t = 0; t < T; ++t) s = lstm_cell(reshape(slice(xs, 0, t, t + 1), {B, I}), s, w[0], w[1], w[2], w[3]);
  return s;
}
Var gru_loop(const Var& xs, const Var& h0, const V& w) {
  const std::int64_t T = xs.shape()[0], B = xs.shape()[1], I = xs.shape()[2];
  const Var flat = reshape(xs, {T, B * I});
  return while_loop([&](const V& s) { return lt(s[0], int_like(s[0], T)); },
                    [&](const V& s) {
                      const Var x = reshape(embedding(flat, s[0]), {B, I});
                      return V{s[0] + int_like(s[0], 1), gru_cell(x, s[1], w[0], w[1], w[2], w[3])};
                    },
                    {int_like(xs, 0), h0})[1];
}
Var gru_unrolled(const Var& xs, Var h, const V& w) {
  const std::int64_t T = xs.shape()[0], B = xs.shape()[1], I = xs.shape()[2];
  for (std::int64_t t = 0; t < T; ++t) h = gru_cell(reshape(slice(xs, 0, t, t + 1), {B, I}), h, w[0], w[1], w[2], w[3]);
  return h;
}
/// Random RNN inputs: xs [T, B, I], h0 [B, H] (and c0), weights for `gates` gates.
std::vector<Tensor> rnn_inputs(std::int64_t T, std::int64_t B, std::int64_t I, std::int64_t H, std::int64_t gates,
                               std::uint64_t seed) {
  return {randn({T, B, I}, seed),         randn({B, H}, seed + 1),         randn({B, H}, seed + 2),
          randn({gates * H, I}, seed + 3), randn({gates * H, H}, seed + 4), randn({gates * H}, seed + 5),
          randn({gates * H}, seed + 6)};
}

/// Values and gradients (of sum(out * wt)) of `f` on `inputs`, eagerly and as a graph run.
struct Run {
  Tensor value;
  std::vector<Tensor> grads;
};
Run run_eager(const std::function<Var(const V&)>& f, const std::vector<Tensor>& inputs, const Tensor& wt) {
  V leaves;
  for (const Tensor& t : inputs) leaves.emplace_back(t.clone(), true);
  const Var out = f(leaves);
  sum(out * Var(wt)).backward();
  Run r{out.value(), {}};
  for (const Var& l : leaves)  // no gradient reached l (a loop of 0 iterations ignores its captures): zeros
    r.grads.push_back(l.grad().defined() ? l.grad().value() : Tensor::zeros(l.shape(), l.dtype()));
  return r;
}
Run run_graph(const std::function<Var(const V&)>& f, const std::vector<Tensor>& inputs, const Tensor& wt) {
  Graph g;
  V ph;
  Feeds feeds;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ph.push_back(g.placeholder("x" + std::to_string(i), inputs[i].shape(), inputs[i].dtype()));
    feeds.emplace_back(ph.back(), inputs[i]);
  }
  const Var out = f(ph);
  V fetch{out};
  for (const Var& d : gradients(sum(out * g.constant(wt)), ph)) fetch.push_back(d);
  const std::vector<Tensor> vals = Executor(g).run(fetch, feeds);
  return {vals[0], std::vector<Tensor>(vals.begin() + 1, vals.end())};
}
void same_runs(const Run& a, const Run& b) {
  CHECK(allclose(a.value, b.value, 1e-12, 1e-12));
  REQUIRE(a.grads.size() == b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i) {
    INFO("gradient " << i);
    CHECK(allclose(a.grads[i], b.grads[i], 1e-10, 1e-12));
  }
}

}  // namespace

TEST_CASE("cond: eager and graph pick the branch of the predicate", "[lab2][control]") {
  for (std::int64_t n : {1, 7}) {
    const Tensor xv = randn({n, 3}, 10 + static_cast<std::uint64_t>(n)), yv = randn({3}, 20);
    const auto then_fn = [](const V& v) { return V{v[0] * v[1] + 1.0, sum(v[0])}; };
    const auto else_fn = [](const V& v) { return V{sin(v[0]) - v[1], mean(v[0])}; };
    for (bool p : {true, false}) {
      const Tensor ref0 = p ? mls::add(mls::mul(xv, yv), 1.0) : mls::sub(mls::sin(xv), yv);
      const Tensor ref1 = p ? mls::sum(xv) : mls::mean(xv);
      // eager
      const V e = cond(Var(Tensor::scalar(p ? 1 : 0, DType::Bool)), then_fn, else_fn, {Var(xv), Var(yv)});
      CHECK(allclose(e[0].value(), ref0, 1e-12, 1e-12));
      CHECK(allclose(e[1].value(), ref1, 1e-12, 1e-12));
      // graph: the predicate fed at run time, an unknown batch
      Graph g;
      const Var pp = g.placeholder("p", {}, DType::Bool), x = g.placeholder("x", {-1, 3}, DType::Float64);
      const Var y = g.placeholder("y", {3}, DType::Float64);
      const V out = cond(pp, then_fn, else_fn, {x, y});
      CHECK(out[0].shape() == Shape{-1, 3});
      CHECK(out[0].get()->op == Op::Cond);
      REQUIRE(control_flow(*out[0].get()) != nullptr);
      CHECK(control_flow(*out[0].get())->subs.size() == 2);
      const auto vals = Executor(g).run(out, {{pp, Tensor::scalar(p ? 1 : 0, DType::Bool)}, {x, xv}, {y, yv}});
      CHECK(allclose(vals[0], ref0, 1e-12, 1e-12));
      CHECK(allclose(vals[1], ref1, 1e-12, 1e-12));
    }
  }
}

TEST_CASE("cond: gradients (a cond over the branches' backward sub-graphs), captures, JVP", "[lab2][control]") {
  const Tensor xv = randn({2, 5}, 31), wv = randn({5}, 32);
  for (double p : {1.0, 0.0}) {
    INFO("predicate " << p);
    // w is captured by the branches (not an operand): its gradient flows through the capture.
    const GradFn f = [p](const V& v) {
      const Var w = v[1];
      return cond(scalar_like(v[0], p), [&](const V& o) { return V{tanh(o[0] * w)}; },
                  [&](const V& o) { return V{exp(o[0]) * 0.5 + w}; }, {v[0]})[0];
    };
    check_grad(f, {xv, wv});
    same_runs(run_eager(f, {xv, wv}, randn({2, 5}, 33)), run_graph(f, {xv, wv}, randn({2, 5}, 33)));
    // forward mode: J u through the branch taken equals eager reverse mode's <J^T v, u> for v = e_sum
    const Tensor ux = randn({2, 5}, 34), uw = randn({5}, 35);
    const JvpResult r = jvp([&](const V& v) { return V{f(v)}; }, {xv, wv}, {ux, uw});
    const Run e = run_eager(f, {xv, wv}, Tensor::ones({2, 5}, DType::Float64));
    CHECK(allclose(r.values[0], e.value, 1e-12, 1e-12));
    const double lhs = mls::sum(r.tangents[0]).item();
    const double rhs = mls::sum(mls::mul(e.grads[0], ux)).item() + mls::sum(mls::mul(e.grads[1], uw)).item();
    CHECK(lhs == Approx(rhs).epsilon(1e-10));
  }
}

TEST_CASE("while_loop: eager and graph run the loop, the executor evaluates the body per iteration", "[lab2][control]") {
  for (std::int64_t steps : {0, 1, 5}) {
    const Tensor xv = randn({3, 2}, 40), wv = randn({3, 2}, 41), bv = randn({2}, 42);
    Tensor ref = xv;  // host reference
    for (std::int64_t i = 0; i < steps; ++i) ref = mls::tanh(mls::add(mls::mul(ref, wv), bv));
    const V e = tanh_loop(Var(xv), Var(wv), Var(bv), steps);
    CHECK(e[0].value().item() == static_cast<double>(steps));
    CHECK(allclose(e[1].value(), ref, 1e-12, 1e-12));
    Graph g;
    const Var x = g.placeholder("x", {3, 2}, DType::Float64);
    const V out = tanh_loop(x, g.constant(wv, "w"), g.constant(bv, "b"), steps);
    CHECK(out[1].get()->op == Op::WhileLoop);
    CHECK(control_flow(*out[1].get())->num_captures == 2);  // w and b
    CHECK(last_trip_count(*out[1].get()) == -1);
    const auto vals = Executor(g).run(out, {{x, xv}});
    CHECK(vals[0].item() == static_cast<double>(steps));
    CHECK(allclose(vals[1], ref, 1e-12, 1e-12));
    CHECK(last_trip_count(*out[1].get()) == steps);
  }
}

TEST_CASE("while_loop: gradients replay the iterations and accumulate into captures, JVP per iteration",
          "[lab2][control]") {
  const Tensor xv = randn({4, 3}, 50), wv = randn({4, 3}, 51), bv = randn({3}, 52);
  for (std::int64_t steps : {0, 1, 3}) {
    INFO("steps " << steps);
    const GradFn f = [steps](const V& v) { return tanh_loop(v[0], v[1], v[2], steps)[1]; };
    if (steps > 0) check_grad(f, {xv, wv, bv});  // (gradcheck needs every input to reach the output)
    same_runs(run_eager(f, {xv, wv, bv}, randn({4, 3}, 53)), run_graph(f, {xv, wv, bv}, randn({4, 3}, 53)));
    const std::vector<Tensor> us{randn({4, 3}, 54), randn({4, 3}, 55), randn({3}, 56)};
    const JvpResult r = jvp([&](const V& v) { return V{f(v)}; }, {xv, wv, bv}, us);
    const Run e = run_eager(f, {xv, wv, bv}, Tensor::ones({4, 3}, DType::Float64));
    double rhs = 0;
    for (std::size_t i = 0; i < us.size(); ++i) rhs += mls::sum(mls::mul(e.grads[i], us[i])).item();
    CHECK(mls::sum(r.tangents[0]).item() == Approx(rhs).epsilon(1e-10));
  }
}

TEST_CASE("while_loop: an LSTM and a GRU over a sequence equal the unrolled cells", "[lab2][control]") {
  for (std::int64_t T : {1, 5}) {
    INFO("T " << T);
    const std::vector<Tensor> in = rnn_inputs(T, 2, 3, 4, 4, 60 + static_cast<std::uint64_t>(T));
    const auto loop = [](const V& v) {
      const LstmState s = lstm_loop(v[0], {v[1], v[2]}, {v[3], v[4], v[5], v[6]});
      return s.h + s.c * 0.5;
    };
    const auto unrolled = [](const V& v) {
      const LstmState s = lstm_unrolled(v[0], {v[1], v[2]}, {v[3], v[4], v[5], v[6]});
      return s.h + s.c * 0.5;
    };
    const Tensor wt = randn({2, 4}, 70);
    const Run ref = run_eager(unrolled, in, wt);
    same_runs(run_eager(loop, in, wt), ref);
    same_runs(run_graph(loop, in, wt), ref);
    // GRU: h0 is input 1; c0 is unused
    const std::vector<Tensor> gin = rnn_inputs(T, 3, 2, 5, 3, 80 + static_cast<std::uint64_t>(T));
    const std::vector<Tensor> gi{gin[0], gin[1], gin[3], gin[4], gin[5], gin[6]};
    const auto gloop = [](const V& v) { return gru_loop(v[0], v[1], {v[2], v[3], v[4], v[5]}); };
    const auto gunrolled = [](const V& v) { return gru_unrolled(v[0], v[1], {v[2], v[3], v[4], v[5]}); };
    const Tensor gwt = randn({3, 5}, 90);
    const Run gref = run_eager(gunrolled, gi, gwt);
    same_runs(run_eager(gloop, gi, gwt), gref);
    same_runs(run_graph(gloop, gi, gwt), gref);
  }
  // float64 gradcheck of the loop versions (small sizes, prime T)
  const std::vector<Tensor> in = rnn_inputs(3, 1, 2, 3, 4, 100);
  check_grad([](const V& v) { return lstm_loop(v[0], {v[1], v[2]}, {v[3], v[4], v[5], v[6]}).h; }, in);
  const std::vector<Tensor> gin = rnn_inputs(3, 2, 2, 3, 3, 110);
  check_grad([](const V& v) { return gru_loop(v[0], v[1], {v[2], v[3], v[4], v[5]}); },
             {gin[0], gin[1], gin[3], gin[4], gin[5], gin[6]});
}

TEST_CASE("while_loop: an RNN is an O(T) sequential chain", "[lab2][control]") {
  // Each iteration reads the state the previous one wrote: the body's new h depends on its state
  // placeholder h, so iteration t cannot start before t-1 ends, and the T iterations run one after
  // the other (attention, by contrast, computes every position from the inputs at once: one
  // matmul over the sequence, no chain). The forward saves T + 1 states for the replay: O(T) memory.
  const std::int64_t T = 7;
  const std::vector<Tensor> in = rnn_inputs(T, 2, 3, 4, 4, 120);
  Graph g;
  V ph;
  Feeds feeds;
  for (std::size_t i = 0; i < in.size(); ++i) {
    ph.push_back(g.placeholder("x" + std::to_string(i), in[i].shape(), in[i].dtype()));
    feeds.emplace_back(ph.back(), in[i]);
  }
  const LstmState s = lstm_loop(ph[0], {ph[1], ph[2]}, {ph[3], ph[4], ph[5], ph[6]});
  const ControlFlow& cf = *control_flow(*s.h.get());
  CHECK(cf.num_operands == 3);  // t, h, c
  CHECK(cf.num_captures == 5);  // xs (as [T, B*I]) and the four weights
  const SubGraph& body = cf.subs[1];
  const std::vector<Node*> deps = topo_sort(std::vector<Var>{body.outputs[1]});
  CHECK(std::find(deps.begin(), deps.end(), body.inputs[1].get()) != deps.end());  // h' reads h
  CHECK(std::find(deps.begin(), deps.end(), body.inputs[2].get()) != deps.end());  // and c
  CHECK_FALSE(cf.saves_states);
  const V grads = gradients(sum(s.h), {ph[3]});
  CHECK(control_flow(*s.h.get())->saves_states);  // a gradient exists: the forward keeps its states
  (void)Executor(g).run({s.h, grads[0]}, feeds);
  CHECK(last_trip_count(*s.h.get()) == T);
}

TEST_CASE("while_backward_replay: the reverse walk over the saved states", "[lab2][control]") {
  // A linear loop s <- w * s (elementwise, w captured): after T steps s_T = w^T s_0, so
  // ds_0 = w^T a and dw = sum_t a w^(T-1-t) s_t w^0... checked against the closed form.
  const Tensor s0 = randn({5}, 130), w = randn({5}, 131), a = randn({5}, 132);
  for (std::size_t T : {0u, 1u, 4u}) {
    std::vector<std::vector<Tensor>> states{{s0}};
    for (std::size_t t = 0; t < T; ++t) states.push_back({mls::mul(states.back()[0], w)});
    int calls = 0;
    const BodyVjpFn vjp = [&](const std::vector<Tensor>& s, const std::vector<Tensor>& adj) {
      ++calls;
      return BodyVjp{{mls::mul(adj[0], w)}, {mls::mul(adj[0], s[0])}};
    };
    const WhileGrads r = while_backward_replay(states, {a}, {Tensor::zeros({5}, DType::Float64)}, vjp);
    CHECK(calls == static_cast<int>(T));
    Tensor wp = Tensor::ones({5}, DType::Float64);
    for (std::size_t t = 0; t < T; ++t) wp = mls::mul(wp, w);
    CHECK(allclose(r.d_init[0], mls::mul(a, wp), 1e-12, 1e-12));
    // d s_T / d w = T w^(T-1) s0 (elementwise)
    Tensor wt1 = Tensor::ones({5}, DType::Float64);
    for (std::size_t t = 1; t < T; ++t) wt1 = mls::mul(wt1, w);
    const Tensor dw = T == 0 ? Tensor::zeros({5}, DType::Float64)
                             : mls::mul(mls::mul(mls::mul(wt1, s0), static_cast<double>(T)), a);
    CHECK(allclose(r.d_captures[0], dw, 1e-12, 1e-12));
  }
  require_error([&] { (void)while_backward_replay({}, {a}, {}, {}); }, "while_backward_replay: no saved states");
}

TEST_CASE("control flow rejects bad input with the op and the shapes", "[lab2][control]") {
  const Var x(randn({2, 3}, 140));
  Graph g;
  const Var gx = g.placeholder("x", {2, 3}, DType::Float64);
  // the body changes the state's shape (graph: when built; eager: at the first iteration)
  const auto grow = [](const V& s) { return V{concat({s[0], s[0]}, 0)}; };
  const auto always = [](const V& s) { return gt(sum(s[0]), scalar_like(s[0], -1e300)); };
  require_error([&] { (void)while_loop(always, grow, {gx}); },
                "while_loop: the body changes state 0 from [2, 3] float64 to [4, 3] float64");
  require_error([&] { (void)while_loop(always, grow, {x}); },
                "while_loop: the body changes state 0 from [2, 3] float64 to [4, 3] float64");
  require_error([&] { (void)while_loop(always, [](const V& s) { return V{s[0], s[0]}; }, {gx}); },
                "while_loop: the body returns 2 Vars for a state of 1");
  require_error([&] { (void)while_loop(always, [](const V& s) { return V{cast(s[0], DType::Float32)}; }, {gx}); },
                "from [2, 3] float64 to [2, 3] float32");
  // branches with different output shapes
  require_error([&] {
    (void)cond(g.placeholder("p", {}, DType::Bool), [](const V& v) { return V{v[0]}; },
               [](const V& v) { return V{sum(v[0], {0})}; }, {gx});
  }, "cond: output 0 differs between the branches: then gives [2, 3] float64, else gives [3] float64");
  // a predicate that is not 0-d
  require_error([&] { (void)cond(gt(gx, scalar_like(gx, 0.0)), [](const V& v) { return v; }, [](const V& v) { return v; }, {gx}); },
                "cond: the predicate must be a 0-d scalar (bool or number), got [2, 3] bool");
  require_error([&] { (void)cond(Var(Tensor::ones({1}, DType::Bool)), [](const V& v) { return v; }, [](const V& v) { return v; }, {x}); },
                "cond: the predicate must be a 0-d scalar (bool or number), got [1] bool");
  require_error([&] { (void)while_loop([](const V& s) { return gt(s[0], scalar_like(s[0], 0.0)); }, [](const V& s) { return s; }, {gx}); },
                "while_loop: the predicate must be a 0-d scalar (bool or number), got [2, 3] bool");
  // a loop that does not stop: a named error, not a hang (graph: at run time; eager: at once)
  const V forever = while_loop(always, [](const V& s) { return V{s[0] * 0.5}; }, {gx}, 100);
  require_error([&] { (void)Executor(g).run(forever, {{gx, x.value()}}); }, "while_loop: more than max_iterations = 100");
  require_error([&] { (void)while_loop(always, [](const V& s) { return V{s[0] * 0.5}; }, {x}, 10); },
                "while_loop: more than max_iterations = 10");
  require_error([&] { (void)while_loop(always, [](const V& s) { return s; }, {x}, -1); },
                "while_loop: max_iterations must be >= 0, got -1");
  require_error([&] { (void)while_loop(always, [](const V& s) { return s; }, {}); }, "while_loop: the state is empty");
  // a gradient of a gradient through a loop: a named error
  const V once = while_loop([](const V& s) { return lt(s[0], int_like(s[0], 1)); },
                            [](const V& s) { return V{s[0] + int_like(s[0], 1), s[1] * s[1]}; }, {int_like(gx, 0), gx});
  const Var d = gradients(sum(once[1]), {gx})[0];
  require_error([&] { (void)gradients(sum(d), {gx}); }, "backward: op while_grad has no gradient rule");
}
