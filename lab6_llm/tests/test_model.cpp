// Lab 6: the fused path against the autodiff path, gradchecks, counts, AdamW and the schedule.
#include <catch2/catch.hpp>
#include <cmath>

#include "mls/autodiff/gradcheck.hpp"
#include "mls/autodiff/nn.hpp"
#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "mls/llm/autodiff_model.hpp"
#include "mls/llm/model.hpp"
#include "mls/observe_tensor.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace llm_test;
namespace A = mls::autodiff;

namespace {

/// Fused forward + backward of a batch: (loss, grads).
std::pair<double, GPTGrads> fused_loss_grads(const GPTParams& p, const Batch& b) {
  GPTActivations acts(p.config(), b.B, b.T), dacts(p.config(), b.B, b.T);
  GPTGrads g(p.config());
  const double loss =
      gpt_forward(p, acts, b.inputs.data(), b.targets.data(), b.mask.data(), b.B, b.T);
  gpt_backward(p, g, acts, dacts, b.inputs.data(), b.targets.data(), b.mask.data());
  return {loss, g};
}

std::pair<double, GPTGrads> autodiff_loss_grads(const GPTParams& p, const Batch& b, DType dtype) {
  auto leaves = tape::to_leaves(p, dtype);
  A::Var loss = tape::gpt_loss(p.config(), leaves, tape::ids_tensor(b.inputs, b.B, b.T),
                               tape::ids_tensor(b.targets, b.B, b.T),
                               tape::mask_tensor(b.mask, b.B, b.T, dtype));
  loss.backward();
  return {loss.value().item(), tape::grads_of(p.config(), leaves)};
}

}  // namespace

TEST_CASE("counts: the parameter count and the training FLOPs are the closed forms",
          "[lab6][plumbing]") {
  for (const char* name : {"nano", "small"}) {
    GPTConfig c = config_by_name(name);
    c.vocab_size = 65;
    const auto T = c.block_size;
    MLS_OBSERVE(num_params(c));
    MLS_OBSERVE(flops_params(c));
    MLS_OBSERVE(train_flops_per_token(c, T), {2.4e-5, 0.0});
    MLS_OBSERVE(GPTParams(c).size());
    const auto offsets = param_offsets(c);
    mls::testing::observe("param_offsets", std::vector<std::int64_t>(offsets.begin(), offsets.end()));
    // The closed forms (oracles), after the code ran.
    MLS_ORACLE(const auto L = c.n_layer; const auto C = c.n_embd; const auto V = c.vocab_size;
               std::int64_t sum = 0;
               for (const auto& s : param_shapes(c)) {
                 std::int64_t n = 1;
                 for (auto d : s) n *= d;
                 sum += n;
               })
    MLS_ORACLE_CHECK(CHECK(num_params(c) == L * (12 * C * C + 13 * C) + V * C + T * C + 2 * C);
                     CHECK(num_params(c) == sum); CHECK(GPTParams(c).size() == sum);
                     const auto off = param_offsets(c); CHECK(off[0] == 0); CHECK(off[15] == sum - C);
                     CHECK(flops_params(c) == L * (12 * C * C + 13 * C) + V * C + 2 * C);
                     CHECK(train_flops_per_token(c, T) == Approx(6.0 * flops_params(c) + 12.0 * L * T * C)));
  }
}

TEST_CASE("fused path: the same loss and gradients as the autodiff path on random configs",
          "[lab6][model][fused]") {
  Rng rng(7, "fused-vs-autodiff");
  for (int trial = 0; trial < 6; ++trial) {
    const GPTConfig cfg = random_config(rng);
    const GPTParams p = random_params(cfg, rng);
    const std::int64_t B = rng.randint(1, 4), T = rng.randint(1, cfg.block_size + 1);
    const Batch b = random_batch(cfg, B, T, rng);
    INFO("trial " << trial << ": L " << cfg.n_layer << " H " << cfg.n_head << " C " << cfg.n_embd
                  << " T " << T << " V " << cfg.vocab_size << " B " << B);
    const auto [lf, gf] = fused_loss_grads(p, b);
    MLS_OBSERVE(lf, {2e-5, 0.0});
    // The oracle: the autodiff path (lab 2's ops), after the fused path ran.
    MLS_ORACLE(const auto [la, ga] = autodiff_loss_grads(p, b, DType::Float32);
               const auto [l64, g64] = autodiff_loss_grads(p, b, DType::Float64);)
    MLS_ORACLE_CHECK(CHECK(lf == Approx(la).epsilon(1e-5)); CHECK(lf == Approx(l64).epsilon(1e-5)));
    const auto shapes = param_shapes(cfg);
    for (int i = 0; i < kNumParamTensors; ++i) {
      std::int64_t n = 1;
      for (auto d : shapes[i]) n *= d;
      INFO("tensor " << param_names()[i]);
      // float32 tolerance for reductions of a few hundred terms: a few hundred ulp of the largest
      observe_rel(param_names()[i], gf.tensor(i), LAB6_WANT(g64.tensor(i)), n, 2e-4);
      MLS_ORACLE_CHECK(CHECK(rel_err(gf.tensor(i), ga.tensor(i), n) < 2e-4);
                       CHECK(rel_err(gf.tensor(i), g64.tensor(i), n) < 2e-4));
    }
  }
}

TEST_CASE("fused path: gradients match float64 finite differences of the autodiff path",
          "[lab6][model][fused]") {
  GPTConfig cfg{1, 2, 4, 3, 5};
  Rng rng(11, "fd");
  const GPTParams p = random_params(cfg, rng);
  const Batch b = random_batch(cfg, 2, 3, rng);
  const auto [lf, gf] = fused_loss_grads(p, b);
  MLS_OBSERVE(lf, {2e-5, 0.0});
  // The oracle: float64 finite differences of the autodiff path, after the fused path ran.
  MLS_ORACLE(const Tensor in = tape::ids_tensor(b.inputs, b.B, b.T);
             const Tensor tg = tape::ids_tensor(b.targets, b.B, b.T);
             const Tensor mk = tape::mask_tensor(b.mask, b.B, b.T, DType::Float64);
             const A::GradFn f = [&](const std::vector<A::Var>& P) { return tape::gpt_loss(cfg, P, in, tg, mk); };
             std::vector<Tensor> inputs;
             for (auto& v : tape::to_leaves(p, DType::Float64)) inputs.push_back(v.value());)
  const auto shapes = param_shapes(cfg);
  for (int i = 0; i < kNumParamTensors; ++i) {
    std::int64_t n = 1;
    for (auto d : shapes[i]) n *= d;
    MLS_ORACLE(const Tensor num = A::numeric_gradient(f, inputs, static_cast<std::size_t>(i),
                                                      Tensor::scalar(1.0, DType::Float64), 0.0)
                                      .to(DType::Float32)
                                      .compact();)
    INFO("tensor " << param_names()[i]);
    observe_rel(param_names()[i], gf.tensor(i), LAB6_WANT(num.data<float>()), n, 1e-3);
    MLS_ORACLE_CHECK(CHECK(num.numel() == n); CHECK(rel_err(gf.tensor(i), num.data<float>(), n) < 1e-3));
  }
}

TEST_CASE("autodiff path: gradcheck of every layer in float64", "[lab6][model][gradcheck]") {
  Rng rng(3, "gradcheck");
  const std::int64_t B = 2, T = 3, C = 4, H = 2;
  auto rnd = [&](Shape s) { return Tensor::randn(s, rng, 0.0, 0.5, DType::Float64); };
  A::GradcheckOptions o;
  o.mode = A::CheckMode::Eager;
  // Records the layer's value on the inputs and the gradients of its sum (the analytic backward
  // that gradcheck's finite differences, an oracle, check), float64 within a float64 tolerance.
  auto observe_value = [](const A::GradFn& f, const std::vector<Tensor>& in) {
    if (!mls::testing::observing()) return;
    std::vector<A::Var> vars;
    for (const Tensor& t : in) vars.emplace_back(t, true);
    const A::Var y = f(vars);
    mls::testing::observe_values("f(x)", y.value(), {1e-9, 1e-12});
    A::sum(y).backward();
    for (std::size_t i = 0; i < vars.size(); ++i)
      mls::testing::observe_values("d sum f / d x" + std::to_string(i), vars[i].grad().value(), {1e-8, 1e-10});
  };
  SECTION("causal self-attention") {
    const std::vector<Tensor> in{rnd({B, T, 3 * C})};
    const A::GradFn f = [&](const std::vector<A::Var>& x) { return tape::causal_self_attention(x[0], H); };
    observe_value(f, in);
    MLS_ORACLE_CHECK(auto r = A::gradcheck(f, in, o); INFO(r.report); CHECK(r.ok));
  }
  SECTION("attention sublayer") {
    const std::vector<Tensor> in{rnd({B, T, C}), rnd({C}), rnd({C}), rnd({3 * C, C}), rnd({3 * C}), rnd({C, C}), rnd({C})};
    const A::GradFn f = [&](const std::vector<A::Var>& x) {
      return tape::attention_sublayer(x[0], x[1], x[2], x[3], x[4], x[5], x[6], H);
    };
    observe_value(f, in);
    MLS_ORACLE_CHECK(auto r = A::gradcheck(f, in, o); INFO(r.report); CHECK(r.ok));
  }
  SECTION("MLP sublayer") {
    const std::vector<Tensor> in{rnd({B, T, C}), rnd({C}), rnd({C}), rnd({4 * C, C}), rnd({4 * C}), rnd({C, 4 * C}),
                                 rnd({C})};
    const A::GradFn f = [&](const std::vector<A::Var>& x) {
      return tape::mlp_sublayer(x[0], x[1], x[2], x[3], x[4], x[5], x[6]);
    };
    observe_value(f, in);
    MLS_ORACLE_CHECK(auto r = A::gradcheck(f, in, o); INFO(r.report); CHECK(r.ok));
  }
  SECTION("the whole model's loss") {
    GPTConfig cfg{1, 2, 4, 3, 5};
    const GPTParams p = random_params(cfg, rng);
    const Batch b = random_batch(cfg, 2, 3, rng);
    const Tensor in = tape::ids_tensor(b.inputs, b.B, b.T),
                 tg = tape::ids_tensor(b.targets, b.B, b.T),
                 mk = tape::mask_tensor(b.mask, b.B, b.T, DType::Float64);
    std::vector<Tensor> inputs;
    for (auto& v : tape::to_leaves(p, DType::Float64)) inputs.push_back(v.value());
    const A::GradFn f = [&](const std::vector<A::Var>& P) { return tape::gpt_loss(cfg, P, in, tg, mk); };
    observe_value(f, inputs);
    MLS_ORACLE_CHECK(auto r = A::gradcheck(f, inputs, o); INFO(r.report); CHECK(r.ok));
  }
}

TEST_CASE("attention_forward and attention_backward against the autodiff layer",
          "[lab6][model][attention]") {
  Rng rng(5, "attention");
  for (int trial = 0; trial < 4; ++trial) {
    const std::int64_t B = rng.randint(1, 3), T = rng.randint(1, 9), H = rng.randint(1, 4),
                       C = H * rng.randint(1, 6);
    std::vector<float> qkv(B * T * 3 * C), dout(B * T * C);
    for (auto& x : qkv) x = static_cast<float>(rng.normal());
    for (auto& x : dout) x = static_cast<float>(rng.normal());
    std::vector<float> out(B * T * C), att(B * H * T * T), dqkv(B * T * 3 * C, 0.f),
        datt(B * H * T * T);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, H);
    attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, H);
    // The oracle: the autodiff layer (lab 2's ops), after the fused kernels ran.
    MLS_ORACLE(A::Var x(Tensor::from_vector(qkv, {B, T, 3 * C}).to(DType::Float64), true);
               A::Var y = tape::causal_self_attention(x, H);
               y.backward(Tensor::from_vector(dout, {B, T, C}).to(DType::Float64));
               const Tensor y32 = y.value().to(DType::Float32).compact();
               const Tensor g32 = x.grad().value().to(DType::Float32).compact();)
    observe_rel("out", out.data(), LAB6_WANT(y32.data<float>()), B * T * C, 1e-5);
    observe_rel("dqkv", dqkv.data(), LAB6_WANT(g32.data<float>()), B * T * 3 * C, 1e-5);
    mls::testing::observe("att", att, {1e-5, 1e-6});
    MLS_ORACLE_CHECK(CHECK(rel_err(out.data(), y32.data<float>(), y32.numel()) < 1e-5);
                     CHECK(rel_err(dqkv.data(), g32.data<float>(), g32.numel()) < 1e-5);
                     for (std::int64_t i = 0; i < B * H * T; ++i) {  // rows are distributions over the past only
                       const std::int64_t t = i % T;
                       double s = 0;
                       for (std::int64_t t2 = 0; t2 < T; ++t2) {
                         s += att[i * T + t2];
                         if (t2 > t) CHECK(att[i * T + t2] == 0.f);
                       }
                       CHECK(s == Approx(1.0).epsilon(1e-5));
                     });
  }
}

TEST_CASE("matmul_forward and matmul_backward against a naive reference", "[lab6][plumbing]") {
  Rng rng(9, "matmul");
  for (const std::int64_t N : {1, 3, 7, 40}) {  // a few rows take the matrix-vector path
    const std::int64_t C = 5, OC = 9;
    INFO("N = " << N);
    std::vector<float> x(N * C), w(OC * C), b(OC), dout(N * OC);
    for (auto* v : {&x, &w, &b, &dout})
      for (auto& e : *v) e = static_cast<float>(rng.normal());
    std::vector<float> out(N * OC), dx(N * C, 0.f), dw(OC * C, 0.f), db(OC, 0.f);
    matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, C, OC);
    // Approx(s).margin(1e-5) on both sides.
    mls::testing::observe("out", out, {2.4e-5, 2e-5});
    mls::testing::observe("dx", dx, {2.4e-5, 2e-5});
    mls::testing::observe("dw", dw, {2.4e-5, 2e-5});
    mls::testing::observe("db", db, {2.4e-5, 2e-5});
    // The oracle: naive double sums, after the code ran.
    MLS_ORACLE_CHECK(
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t o = 0; o < OC; ++o) {
        double s = b[o];
        for (std::int64_t c = 0; c < C; ++c) s += static_cast<double>(x[n * C + c]) * w[o * C + c];
        CHECK(out[n * OC + o] == Approx(s).margin(1e-5));
      }
    for (std::int64_t o = 0; o < OC; ++o) {
      double s = 0;
      for (std::int64_t n = 0; n < N; ++n) s += dout[n * OC + o];
      CHECK(db[o] == Approx(s).margin(1e-5));
      for (std::int64_t c = 0; c < C; ++c) {
        double g = 0;
        for (std::int64_t n = 0; n < N; ++n)
          g += static_cast<double>(dout[n * OC + o]) * x[n * C + c];
        CHECK(dw[o * C + c] == Approx(g).margin(1e-5));
      }
    }
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t c = 0; c < C; ++c) {
        double g = 0;
        for (std::int64_t o = 0; o < OC; ++o)
          g += static_cast<double>(dout[n * OC + o]) * w[o * C + c];
        CHECK(dx[n * C + c] == Approx(g).margin(1e-5));
      });
  }
}

TEST_CASE("fused path: results do not depend on the thread count", "[lab6][model][fused]") {
  GPTConfig cfg = config_by_name("nano");
  cfg.vocab_size = 11;
  Rng rng(1, "threads");
  const GPTParams p = random_params(cfg, rng);
  const Batch b = random_batch(cfg, 4, cfg.block_size, rng);
  std::pair<double, GPTGrads> r1, r2;
  {
    ThreadCountGuard g(1);
    r1 = fused_loss_grads(p, b);
  }
  {
    ThreadCountGuard g(2);
    r2 = fused_loss_grads(p, b);
  }
  MLS_OBSERVE(r1.first, {1e-5, 0.0});  // across builds: float32 reductions in another order
  observe_rel("grads", r1.second.vec().data(), r1.second.vec().data(), static_cast<std::int64_t>(r1.second.vec().size()), 2e-4);
  CHECK(r1.first == r2.first);
  CHECK(r1.second.vec() == r2.second.vec());
}

TEST_CASE("fused path: MLS_ROWOPS=tuned (lab 4's compiled layernorm templates) gives the same loss and gradients",
          "[lab6][model][fused]") {
  GPTConfig cfg = config_by_name("nano");
  cfg.vocab_size = 11;
  Rng rng(3, "rowops");
  const GPTParams p = random_params(cfg, rng);
  const Batch b = random_batch(cfg, 2, cfg.block_size, rng);
  set_rowops_kernel("");
  const auto [l0, g0] = fused_loss_grads(p, b);  // lab 4's hand-written layernorms
  set_rowops_kernel("tuned");
  REQUIRE(rowops_kernel().layernorm_forward != nullptr);
  const auto [l1, g1] = fused_loss_grads(p, b);  // compiled at run time (or, without a compiler, the same kernels)
  set_rowops_kernel("");
  MLS_OBSERVE(l1, {1e-5, 0.0});
  observe_rel("grads", g1.vec().data(), g1.vec().data(), static_cast<std::int64_t>(g1.vec().size()), 2e-4);
  // float32: the two layernorms differ by the order of their row sums (C terms) and the column sums
  // of dweight/dbias (B T terms), a few ulp each; through the network that stays within the
  // tolerance the other fused-path tests allow (1e-5 on the loss, 2e-4 relative on the gradients).
  CHECK(l1 == Approx(l0).epsilon(1e-5));
  CHECK(rel_err(g1.vec().data(), g0.vec().data(), static_cast<std::int64_t>(g0.vec().size())) < 2e-4);
}

TEST_CASE("adamw_update matches lab 2's AdamW, the schedule warms up and decays",
          "[lab6][train][adamw]") {
  GPTConfig cfg{1, 1, 2, 2, 3};
  Rng rng(2, "adamw");
  GPTParams p = random_params(cfg, rng);
  AdamWState st(p.size());
  AdamWOptions o;
  o.weight_decay = 0.1;
  // The oracle: lab 2's AdamW on float64 copies of the parameters (steps after the code's).
  MLS_ORACLE(std::vector<A::Var> leaves = tape::to_leaves(p, DType::Float64);
             std::vector<A::Var> decayed, plain;
             for (int i = 0; i < kNumParamTensors; ++i) (param_decays(i) ? decayed : plain).push_back(leaves[i]);
             A::nn::AdamW ref_d(decayed, 0.01, o.beta1, o.beta2, o.eps, o.weight_decay);
             A::nn::AdamW ref_p(plain, 0.01, o.beta1, o.beta2, o.eps, 0.0);)
  for (int step = 0; step < 3; ++step) {
    GPTGrads g(cfg);
    for (auto& x : g.vec()) x = static_cast<float>(rng.normal());
    adamw_update(p, g, st, o, 0.01);
    MLS_ORACLE(for (int i = 0; i < kNumParamTensors; ++i) {
      const auto shapes = param_shapes(cfg);
      std::int64_t n = 1;
      for (auto d : shapes[i]) n *= d;
      leaves[i].zero_grad();
      A::Var y =
          A::sum(leaves[i] * A::Var(Tensor::from_vector(
                                        std::vector<float>(g.tensor(i), g.tensor(i) + n), shapes[i])
                                        .to(DType::Float64)));
      y.backward();
    }
    ref_d.step();
    ref_p.step();)
  }
  MLS_CHECK_EQ(st.step, 3);
  const auto shapes = param_shapes(cfg);
  for (int i = 0; i < kNumParamTensors; ++i) {
    std::int64_t n = 1;
    for (auto d : shapes[i]) n *= d;
    MLS_ORACLE(const Tensor r = leaves[i].value().to(DType::Float32).compact();)
    INFO(param_names()[i]);
    observe_rel(param_names()[i], p.tensor(i), LAB6_WANT(r.data<float>()), n, 1e-5);
    MLS_ORACLE_CHECK(CHECK(r.numel() == n); CHECK(rel_err(p.tensor(i), r.data<float>(), r.numel()) < 1e-5));
  }
  mls::testing::observe("lr_schedule", std::vector<double>{lr_schedule(0, 10, 100, 1.0, 0.1), lr_schedule(9, 10, 100, 1.0, 0.1),
      lr_schedule(10, 10, 100, 1.0, 0.1), lr_schedule(55, 10, 100, 1.0, 0.1), lr_schedule(100, 10, 100, 1.0, 0.1),
      lr_schedule(500, 10, 100, 1.0, 0.1)}, {2.4e-5, 0.0});
  MLS_ORACLE_CHECK(CHECK(lr_schedule(0, 10, 100, 1.0, 0.1) == Approx(0.1));
                   CHECK(lr_schedule(9, 10, 100, 1.0, 0.1) == Approx(1.0));
                   CHECK(lr_schedule(10, 10, 100, 1.0, 0.1) == Approx(1.0));
                   CHECK(lr_schedule(55, 10, 100, 1.0, 0.1) == Approx(0.55));
                   CHECK(lr_schedule(100, 10, 100, 1.0, 0.1) == Approx(0.1));
                   CHECK(lr_schedule(500, 10, 100, 1.0, 0.1) == Approx(0.1)));
}

TEST_CASE("gradient clipping scales to the maximum norm", "[lab6][plumbing]") {
  GPTConfig cfg{1, 1, 2, 2, 3};
  GPTGrads g(cfg);
  for (std::size_t i = 0; i < g.vec().size(); ++i) g.vec()[i] = static_cast<float>(i % 3);
  // The oracle's norm, from the gradients before clipping (the test's input).
  MLS_ORACLE(double ref = 0; for (float x : g.vec()) ref += static_cast<double>(x) * x;)
  const double norm = grad_norm(g);
  MLS_OBSERVE(norm, {2.4e-5, 0.0});
  MLS_ORACLE_CHECK(CHECK(norm == Approx(std::sqrt(ref))));
  const double clipped_from = clip_grad_norm(g, 1.0);
  MLS_OBSERVE(clipped_from, {2.4e-5, 0.0});
  MLS_ORACLE_CHECK(CHECK(clipped_from == Approx(std::sqrt(ref))));
  MLS_OBSERVE(grad_norm(g), {2e-5, 0.0});
  MLS_OBSERVE(g.vec(), {2e-5, 1e-6});
  MLS_ORACLE_CHECK(CHECK(grad_norm(g) == Approx(1.0).epsilon(1e-5)));
}

TEST_CASE("errors: bad shapes and ids name the operation and the values", "[lab6][plumbing]") {
  GPTConfig cfg{1, 1, 4, 4, 5};
  const GPTParams p = init_params(cfg, 0);
  GPTActivations acts(cfg, 1, 4);
  std::vector<std::int32_t> ids = {0, 1, 2, 7}, ok = {0, 1, 2, 3};
  mls::testing::require_error([&] { gpt_forward(p, acts, ids.data(), nullptr, nullptr, 1, 4); },
                              "input id 7");
  mls::testing::require_error([&] { gpt_forward(p, acts, ok.data(), nullptr, nullptr, 1, 5); },
                              "block_size = 4");
  mls::testing::require_error([&] { gpt_forward(p, acts, ok.data(), nullptr, nullptr, 2, 2); },
                              "activations");
  mls::testing::require_error([&] { GPTActivations(cfg, 1, 9); }, "block_size = 4");
  std::vector<std::int32_t> bad_t = {0, 1, 2, 5};
  mls::testing::require_error([&] { gpt_forward(p, acts, ok.data(), bad_t.data(), nullptr, 1, 4); },
                              "target id 5");
  GPTConfig bad = cfg;
  bad.n_embd = 5;
  bad.n_head = 2;
  mls::testing::require_error([&] { GPTParams q(bad); }, "n_embd");
}
