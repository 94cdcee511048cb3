// Data parallelism on simulated ranks: N ranks on B/N rows match one rank on B rows after 10 SGD
// steps, for every bucket size, with and without overlap; one allreduce per bucket per step.
#include <catch2/catch.hpp>

#include "mls/parallel/data_parallel.hpp"
#include "mls/observe_tensor.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using mls::autodiff::Var;
namespace nn = mls::autodiff::nn;

namespace {
struct Model {
  nn::Linear l1, l2;
  explicit Model(DType dt) : l1(make(6, 8, "l1", dt)), l2(make(8, 3, "l2", dt)) {}
  static nn::Linear make(std::int64_t i, std::int64_t o, const char* name, DType dt) {
    Rng rng(5, name);
    nn::Linear l(i, o, rng, nn::Init::Xavier, true, dt);
    l.bias = nn::parameter(Tensor::randn({o}, rng, 0.0, 0.2, dt));
    return l;
  }
  std::vector<nn::Parameter> params() { return {l1.weight, l1.bias, l2.weight, l2.bias}; }
  Var forward(const Var& x) { return l2.forward(autodiff::tanh(l1.forward(x))); }
  /// The same function through DataParallel's hooks (overlap).
  static Var forward_hooked(DataParallel& dp, const Var& x) {
    const Var h = autodiff::tanh(autodiff::matmul(x, dp.hook(0)) + dp.hook(1));
    return autodiff::matmul(h, dp.hook(2)) + dp.hook(3);
  }
};
std::array<Tensor, 2> batch(int step, DType dt) {
  Rng rng(17, "dp-batch-" + std::to_string(step));
  const Tensor x = Tensor::randn({12, 6}, rng, 0.0, 1.0, dt);
  return {x, Tensor::randn({12, 3}, rng, 0.0, 1.0, dt)};
}
constexpr int kSteps = 10;

#ifndef MLS_GRADED_BUILD
std::vector<std::vector<double>> train_single(DType dt) {
  Model m(dt);
  nn::SGD opt(m.params(), 0.1, 0.9);
  for (int s = 0; s < kSteps; ++s) {
    const auto [x, y] = batch(s, dt);
    opt.zero_grad();
    autodiff::mse_loss(m.forward(Var(x)), Var(y)).backward();
    opt.step();
  }
  std::vector<std::vector<double>> out;
  for (auto& p : m.params()) out.push_back(p.value().to_vector<double>());
  return out;
}
#endif  // MLS_GRADED_BUILD
}  // namespace

TEST_CASE("dp: make_buckets groups parameters in backward order", "[lab5][dp]") {
  using B = std::vector<std::vector<std::size_t>>;
  // Each grouping flattened, buckets separated by -1.
  auto flat = [](const B& b) {
    std::vector<std::int64_t> out;
    for (const auto& bucket : b) {
      for (std::size_t i : bucket) out.push_back(static_cast<std::int64_t>(i));
      out.push_back(-1);
    }
    return out;
  };
  mls::testing::observe("buckets", flat(make_buckets({4, 4, 4, 4}, 8)));
  mls::testing::observe("buckets", flat(make_buckets({4, 4, 4, 4}, 1)));
  mls::testing::observe("buckets", flat(make_buckets({4, 4, 4, 4}, 1000)));
  mls::testing::observe("buckets", flat(make_buckets({100, 4, 4, 20}, 24)));
  mls::testing::observe("buckets", flat(make_buckets({}, 8)));
  // PyTorch DDP's policy: a small first bucket, then cap-sized ones
  mls::testing::observe("buckets", flat(make_buckets({4, 4, 4, 4}, 8, 4)));
  mls::testing::observe("buckets", flat(make_buckets({4, 4, 4, 4}, 1000, 1)));
  mls::testing::observe("buckets", flat(make_buckets({4, 4, 4, 4}, 8, 8)));
  mls::testing::observe("buckets", flat(make_buckets({2, 3, 5, 7, 11}, 12, 20)));
  MLS_ORACLE_CHECK(CHECK(make_buckets({4, 4, 4, 4}, 8) == B{{3, 2}, {1, 0}});
                   CHECK(make_buckets({4, 4, 4, 4}, 1) == B{{3}, {2}, {1}, {0}});
                   CHECK(make_buckets({4, 4, 4, 4}, 1000) == B{{3, 2, 1, 0}});
                   CHECK(make_buckets({100, 4, 4, 20}, 24) == B{{3, 2}, {1}, {0}});
                   CHECK(make_buckets({}, 8).empty());
                   CHECK(make_buckets({4, 4, 4, 4}, 8, 4) == B{{3}, {2, 1}, {0}});
                   CHECK(make_buckets({4, 4, 4, 4}, 1000, 1) == B{{3}, {2, 1, 0}});
                   CHECK(make_buckets({4, 4, 4, 4}, 8, 8) == make_buckets({4, 4, 4, 4}, 8));
                   CHECK(make_buckets({2, 3, 5, 7, 11}, 12, 20) == B{{4, 3}, {2, 1, 0}}));
  mls::testing::require_error([] { make_buckets({4}, 0); }, "make_buckets: bucket_bytes = 0 must be > 0");
  mls::testing::require_error([] { make_buckets({4}, 8, -1); },
                              "make_buckets: first_bucket_bytes = -1 must be >= 0 (0: the same as bucket_bytes)");
  const Tensor t = Tensor::arange(12).reshape({6, 2});
  MLS_OBSERVE_VALUES(shard_batch(t, 1, 3));
  MLS_ORACLE_CHECK(CHECK(shard_batch(t, 1, 3).to_vector<double>() == std::vector<double>{4, 5, 6, 7}));
  mls::testing::require_error([&] { shard_batch(t, 0, 4); }, "shard_batch: a batch of 6 rows does not split into 4 equal shards");
}

TEST_CASE("dp: N ranks with batch B/N match one rank with batch B after 10 SGD steps, overlap is bit-identical",
          "[lab5][dp]") {
  // three runs each: blocking; overlapped; overlapped with each bucket's SGD step as soon as its
  // allreduce is waited (allreduce_gradients' on_bucket, one SGD per bucket): all bit-identical
  for (DType dt : {DType::Float64, DType::Float32}) {
    MLS_ORACLE(std::vector<std::vector<double>> ref;)  // the single rank's run, after the first parallel one
    const double tol = dt == DType::Float64 ? 1e-12 : 1e-6;
    for (int n : {2, 3, 4}) {
      for (std::int64_t bucket : {std::int64_t{1}, std::int64_t{128}, std::int64_t{1} << 20}) {
        std::vector<std::vector<std::vector<double>>> plain;  // the run without overlap
        for (int mode : {0, 1, 2}) {
          const bool overlap = mode > 0, per_bucket = mode == 2;
          std::vector<std::vector<std::vector<double>>> got(static_cast<std::size_t>(n));
          std::vector<std::int64_t> calls(static_cast<std::size_t>(n)), overlapped(static_cast<std::size_t>(n));
          std::vector<std::size_t> nb(static_cast<std::size_t>(n));
          run_simulated(n, [&](Communicator& comm) {
            Model m(dt);
            DataParallel dp(comm, m.params(), DataParallelOptions{bucket, overlap});
            dp.broadcast_parameters(0);
            nn::SGD opt(m.params(), 0.1, 0.9);
            std::vector<nn::SGD> bucket_opts;
            for (std::size_t b = 0; per_bucket && b < dp.buckets().size(); ++b)
              bucket_opts.emplace_back(dp.bucket_parameters(b), 0.1, 0.9);
            for (int s = 0; s < kSteps; ++s) {
              const auto [x, y] = batch(s, dt);
              const Var xs(shard_batch(x, comm.rank(), n)), ys(shard_batch(y, comm.rank(), n));
              opt.zero_grad();
              const Var out = overlap ? Model::forward_hooked(dp, xs) : m.forward(xs);
              autodiff::mse_loss(out, ys).backward();
              if (per_bucket) {
                dp.allreduce_gradients([&](std::size_t b) { bucket_opts[b].step(); });
              } else {
                dp.allreduce_gradients();
                opt.step();
              }
            }
            const auto r = static_cast<std::size_t>(comm.rank());
            for (auto& p : m.params()) got[r].push_back(p.value().to_vector<double>());
            calls[r] = dp.allreduce_calls();
            overlapped[r] = dp.overlapped_buckets();
            nb[r] = dp.buckets().size();
          });
          INFO(dtype_name(dt) << " N = " << n << ", bucket " << bucket << ", overlap " << overlap
                              << ", optimizer per bucket " << per_bucket);
          if (!overlap) plain = got;
          else CHECK(got == plain);  // bit-identical parameters with and without overlap, every rank
          for (int r = 0; r < n; ++r) {
            const auto u = static_cast<std::size_t>(r);
            mls::testing::observe("allreduce calls, overlapped, buckets", std::vector<std::int64_t>{
                calls[u], overlapped[u], static_cast<std::int64_t>(nb[u])});
            for (std::size_t k = 0; k < got[u].size(); ++k) mls::testing::observe("parameter", got[u][k], {2 * tol, 2 * tol});
          }
          MLS_ORACLE(if (ref.empty()) ref = train_single(dt);)
          MLS_ORACLE_CHECK(for (int r = 0; r < n; ++r) {
            const auto u = static_cast<std::size_t>(r);
            CHECK(calls[u] == static_cast<std::int64_t>(nb[u]) * kSteps);
            CHECK(overlapped[u] == (overlap ? calls[u] : 0));
            REQUIRE(got[u].size() == ref.size());
            for (std::size_t k = 0; k < ref.size(); ++k) {
              REQUIRE(got[u][k].size() == ref[k].size());
              for (std::size_t i = 0; i < ref[k].size(); ++i)
                CHECK(got[u][k][i] == Approx(ref[k][i]).epsilon(tol).margin(tol));
            }
          } CHECK(nb[0] == (bucket == 1 ? 4u : bucket == 128 ? (dt == DType::Float64 ? 4u : 3u) : 1u)));
        }
      }
    }
  }
}

TEST_CASE("dp: hooks need overlap, and a parameter hooked twice is an error", "[lab5][train_errors]") {
  mls::testing::require_error(
      [] {
        run_simulated(1, [](Communicator& comm) {
          Model m(DType::Float64);
          DataParallel dp(comm, m.params());
          dp.hook(0);
        });
      },
      "DataParallel::hook: construct with overlap = true");
  mls::testing::require_error(
      [] {
        run_simulated(1, [](Communicator& comm) {
          Model m(DType::Float64);
          DataParallel dp(comm, m.params(), DataParallelOptions{1 << 20, true});
          const Var x(Tensor::ones({2, 6}, DType::Float64));
          autodiff::sum(autodiff::matmul(x, dp.hook(0)) + autodiff::matmul(x, dp.hook(0))).backward();
        });
      },
      "DataParallel::hook: parameter 0 was used twice in one forward");
  mls::testing::require_error(
      [] {
        run_simulated(1, [](Communicator& comm) {
          Model m(DType::Float64);
          DataParallel dp(comm, m.params(), DataParallelOptions{1 << 20});
          dp.bucket_parameters(1);
        });
      },
      "DataParallel::bucket_parameters: bucket 1 of 1, expected 0..0");
  mls::testing::require_error(
      [] {
        run_simulated(1, [](Communicator& comm) {
          DataParallel dp(comm, {Var(Tensor::ones({2}))});
        });
      },
      "DataParallel: parameter 0 is not a leaf that requires grad");
}

// ---- re-prioritised buckets (P3, ByteScheduler) and waits in the next forward (issue 30) ------

TEST_CASE("dp: bucket_issue_order puts the deferred buckets last, in forward order", "[lab5][dp_defer]") {
  using O = std::vector<std::size_t>;
  const std::vector<std::pair<std::size_t, std::size_t>> cases = {{4, 0}, {4, 1}, {4, 2}, {4, 4}, {1, 1}, {0, 0}, {7, 3}};
  for (const auto& [n, k] : cases) {
    const O got = bucket_issue_order(n, k);
    mls::testing::observe("bucket_issue_order(" + std::to_string(n) + ", " + std::to_string(k) + ")",
                          std::vector<std::int64_t>(got.begin(), got.end()));
    MLS_ORACLE(O want; for (std::size_t b = 0; b < n - k; ++b) want.push_back(b);  // the not deferred, as they are
               for (std::size_t j = 0; j < k; ++j) want.push_back(n - 1 - j);)      // then n-1, n-2, ... n-k
    MLS_ORACLE_CHECK(CHECK(got == want));
  }
  MLS_ORACLE_CHECK(CHECK(bucket_issue_order(4, 2) == O{0, 1, 3, 2}); CHECK(bucket_issue_order(4, 4) == O{3, 2, 1, 0}));
  mls::testing::require_error([] { bucket_issue_order(4, 5); }, "bucket_issue_order: defer = 5 with 4 buckets, expected 0..4");
}

TEST_CASE("dp: deferred buckets, waited in the next forward, are bit-identical to the blocking run after 10 steps + flush",
          "[lab5][dp_defer]") {
  // Per case: the blocking run (each bucket launched and waited in turn, its SGD step as it is
  // waited) against (a) the deferred order without overlap, (b) with overlap, (c) with overlap and
  // the deferred buckets waited by the next forward's hooks (then flush()): every parameter of
  // every rank bit-identical. Before the flush the deferred buckets' parameters still lack the
  // last step's update: flush() applies it.
  for (DType dt : {DType::Float64, DType::Float32}) {
    const double tol = dt == DType::Float64 ? 1e-12 : 1e-6;
    for (int n : {2, 3}) {
      for (std::int64_t bucket : {std::int64_t{1}, std::int64_t{128}}) {
        std::vector<std::vector<std::vector<double>>> plain;
        std::size_t nb = 0;
        for (int defer = 0; defer <= 4; ++defer) {
          for (int mode : {0, 1, 2}) {  // 0 blocking, 1 overlap, 2 overlap + wait_in_forward
            if (defer == 0 && mode != 0) continue;
            if (nb != 0 && static_cast<std::size_t>(defer) > nb) continue;
            const bool overlap = mode > 0, wait = mode == 2;
            std::vector<std::vector<std::vector<double>>> got(static_cast<std::size_t>(n)), before(got);
            std::vector<std::vector<std::int64_t>> order(static_cast<std::size_t>(n));
            std::vector<std::int64_t> unflushed(static_cast<std::size_t>(n)), launched_in_order(static_cast<std::size_t>(n));
            run_simulated(n, [&](Communicator& comm) {
              Model m(dt);
              DataParallelOptions o{bucket, overlap};
              o.defer_buckets = defer, o.wait_in_forward = wait;
              DataParallel dp(comm, m.params(), o);
              dp.broadcast_parameters(0);
              std::vector<nn::SGD> bucket_opts;
              for (std::size_t b = 0; b < dp.buckets().size(); ++b) bucket_opts.emplace_back(dp.bucket_parameters(b), 0.1, 0.9);
              nn::SGD all(m.params(), 0.1, 0.9);  // only for zero_grad
              const auto r = static_cast<std::size_t>(comm.rank());
              for (int s = 0; s < kSteps; ++s) {
                const auto [x, y] = batch(s, dt);
                const Var xs(shard_batch(x, comm.rank(), n)), ys(shard_batch(y, comm.rank(), n));
                all.zero_grad();
                const Var out = overlap ? Model::forward_hooked(dp, xs) : m.forward(xs);
                autodiff::mse_loss(out, ys).backward();
                dp.allreduce_gradients([&bucket_opts](std::size_t b) { bucket_opts[b].step(); });
                // the launches happened in the issue order (hooks and allreduce_gradients alike)
                std::int64_t ok = 1;
                for (std::size_t k = 1; k < dp.issue_order().size(); ++k)
                  ok &= dp.launch_times()[dp.issue_order()[k - 1]] <= dp.launch_times()[dp.issue_order()[k]];
                launched_in_order[r] = s == 0 ? ok : launched_in_order[r] & ok;
              }
              unflushed[r] = static_cast<std::int64_t>(dp.unflushed());
              for (auto& p : m.params()) before[r].push_back(p.value().to_vector<double>());
              dp.flush();
              for (auto& p : m.params()) got[r].push_back(p.value().to_vector<double>());
              for (std::size_t b : dp.issue_order()) order[r].push_back(static_cast<std::int64_t>(b));
              if (r == 0) nb = dp.buckets().size();
            });
            INFO(dtype_name(dt) << " N = " << n << ", bucket " << bucket << ", defer " << defer << ", overlap "
                                << overlap << ", wait_in_forward " << wait);
            if (defer == 0) plain = got;
            else CHECK(got == plain);  // bit-identical, every rank
            for (int r = 0; r < n; ++r) {
              const auto u = static_cast<std::size_t>(r);
              mls::testing::observe("issue order", order[u]);
              mls::testing::observe("buckets in flight after the last step, launched in issue order",
                                    std::vector<std::int64_t>{unflushed[u], launched_in_order[u]});
              for (std::size_t k = 0; k < got[u].size(); ++k) {
                mls::testing::observe("parameter before flush()", before[u][k], {2 * tol, 2 * tol});
                mls::testing::observe("parameter", got[u][k], {2 * tol, 2 * tol});
              }
            }
            MLS_ORACLE_CHECK(for (int r = 0; r < n; ++r) {
              const auto u = static_cast<std::size_t>(r);
              CHECK(unflushed[u] == (wait ? defer : 0));
              CHECK(launched_in_order[u] == 1);
              std::vector<std::int64_t> want;
              for (std::size_t b = 0; b + static_cast<std::size_t>(defer) < nb; ++b) want.push_back(static_cast<std::int64_t>(b));
              for (int j = 0; j < defer; ++j) want.push_back(static_cast<std::int64_t>(nb) - 1 - j);
              CHECK(order[u] == want);
              // before flush(), exactly the deferred buckets' parameters (the first layers') lag a step
              // (parameter 0 is in the last bucket, deferred whenever defer >= 1)
              if (wait) CHECK(before[u][0] != got[u][0]);
              else CHECK(before[u] == got[u]);
            });
          }
        }
      }
    }
  }
}

TEST_CASE("dp: deferred buckets and waits in forward refuse what makes no sense", "[lab5][dp_defer]") {
  auto opts = [](int defer, bool overlap, bool wait) {
    DataParallelOptions o{1, overlap};  // 1-byte buckets: one bucket per parameter, 4 buckets
    o.defer_buckets = defer, o.wait_in_forward = wait;
    return o;
  };
  // one good step first: wait_in_forward leaves two buckets in flight
  std::int64_t in_flight = -1;
  run_simulated(1, [&](Communicator& comm) {
    Model m(DType::Float64);
    DataParallel dp(comm, m.params(), opts(2, true, true));
    const auto [x, y] = batch(0, DType::Float64);
    autodiff::mse_loss(Model::forward_hooked(dp, Var(x)), Var(y)).backward();
    dp.allreduce_gradients([](std::size_t) {});
    in_flight = static_cast<std::int64_t>(dp.unflushed());
    dp.flush();
  });
  MLS_OBSERVE(in_flight);
  MLS_ORACLE_CHECK(CHECK(in_flight == 2));
  auto with = [&](DataParallelOptions o, const std::function<void(DataParallel&, Model&)>& f) {
    return [o, f] {
      run_simulated(1, [&](Communicator& comm) {
        Model m(DType::Float64);
        DataParallel dp(comm, m.params(), o);
        f(dp, m);
      });
    };
  };
  auto nothing = [](DataParallel&, Model&) {};
  mls::testing::require_error(with(opts(-1, true, false), nothing), "DataParallel: defer_buckets = -1 with 4 buckets, expected 0..4");
  mls::testing::require_error(with(opts(5, true, false), nothing), "DataParallel: defer_buckets = 5 with 4 buckets, expected 0..4");
  mls::testing::require_error(with(opts(2, false, true), nothing), "DataParallel: wait_in_forward needs overlap = true");
  mls::testing::require_error(with(opts(0, true, true), nothing),
                              "DataParallel: wait_in_forward with defer_buckets = 0 leaves no bucket to the next forward");
  // one step whose deferred buckets stay in flight
  auto step = [](DataParallel& dp, const std::function<void(std::size_t)>& on_bucket) {
    const auto [x, y] = batch(0, DType::Float64);
    autodiff::mse_loss(Model::forward_hooked(dp, Var(x)), Var(y)).backward();
    dp.allreduce_gradients(on_bucket);
  };
  auto no_step = [](std::size_t) {};
  mls::testing::require_error(with(opts(2, true, true), [&](DataParallel& dp, Model&) { step(dp, {}); }),
                              "DataParallel::allreduce_gradients: wait_in_forward leaves the deferred buckets' optimizer "
                              "steps to the next forward; pass on_bucket");
  // the next step's forward does not take the parameters through hook(): its buckets were never waited
  mls::testing::require_error(with(opts(2, true, true),
                                   [&](DataParallel& dp, Model& m) {
                                     step(dp, no_step);
                                     const auto [x, y] = batch(1, DType::Float64);
                                     autodiff::mse_loss(m.forward(Var(x)), Var(y)).backward();
                                     dp.allreduce_gradients(no_step);
                                   }),
                              "DataParallel::allreduce_gradients: bucket 2's allreduce from the previous step was never waited");
  // the parameter list changed while buckets are in flight: the next forward's hook and flush() refuse
  mls::testing::require_error(with(opts(2, true, true),
                                   [&](DataParallel& dp, Model&) {
                                     step(dp, no_step);
                                     dp.parameters()[0] = nn::parameter(Tensor::ones({3, 8}, DType::Float64));
                                     dp.hook(3);
                                   }),
                              "DataParallel::hook: parameter 0 changed (shape [6, 8] -> [3, 8], another tensor) while "
                              "bucket 3's allreduce was in flight (wait_in_forward); call flush() before changing");
  mls::testing::require_error(with(opts(2, true, true),
                                   [&](DataParallel& dp, Model&) {
                                     step(dp, no_step);
                                     dp.parameters().push_back(nn::parameter(Tensor::ones({2}, DType::Float64)));
                                     dp.flush();
                                   }),
                              "DataParallel::flush: the parameter list changed from 4 to 5 parameters (with 2 bucket(s) "
                              "in flight)");
}

TEST_CASE("dp: on the simulated clock, deferred buckets waited in the next forward shorten DDP's step", "[lab5][dp_defer]") {
  // L layers h = h * w_l (w_l: 2500 float32, 10 kB, a bucket each), each charging f seconds of
  // compute in forward and b in backward (Communicator::model_compute), on 2 ranks whose link takes
  // c = 3 ms per bucket allreduce (α = 0, β = 0.3 µs/byte: every algorithm moves 10 kB per rank).
  // The steady-state step (modelled seconds from one step's start to the next) of DDP's overlap
  // against the deferred schedules, compared with an independent two-lane replay of the schedule.
  constexpr int L = 6;
  constexpr double f = 1e-3, b = 2e-3, c = 3e-3;
  SimOptions o;
  o.cost.alpha = 0;
  o.cost.beta = 3e-7;
  o.cost.gamma = 0;
  auto period = [&](int defer, bool wait) {
    std::vector<double> got(2);
    run_simulated(2, [&](Communicator& comm) {
      std::vector<nn::Parameter> ws;
      for (int l = 0; l < L; ++l) ws.push_back(nn::parameter(Tensor::full({2500}, 1.0 + 0.01 * l, DType::Float32)));
      DataParallelOptions opts{1, true};
      opts.defer_buckets = defer, opts.wait_in_forward = wait;
      DataParallel dp(comm, ws, opts);
      std::vector<nn::SGD> sgd;
      for (std::size_t k = 0; k < dp.buckets().size(); ++k) sgd.emplace_back(dp.bucket_parameters(k), 1e-3);
      std::vector<double> starts;
      for (int s = 0; s < 5; ++s) {
        starts.push_back(comm.modelled_seconds());
        for (auto& w : ws) w.zero_grad();
        Var h(Tensor::ones({2500}, DType::Float32));
        for (int l = 0; l < L; ++l) {
          h = h * dp.hook(static_cast<std::size_t>(l));
          comm.model_compute(f);
          h = autodiff::custom("cost", {h}, h.value(), [&comm](const Var& g, const std::vector<bool>&) {
            comm.model_compute(b);  // this layer's backward, before its weight's gradient is complete
            return std::vector<Var>{g};
          });
        }
        autodiff::sum(h).backward();
        dp.allreduce_gradients([&sgd](std::size_t k) { sgd[k].step(); });
      }
      dp.flush();
      got[static_cast<std::size_t>(comm.rank())] = starts[3] - starts[2];
    }, o);
    return got;
  };
  // The replay: layer l's bucket is L-1-l; deferred: the first `defer` layers. Compute clock t,
  // one communication lane (in issue order); forward waits for a deferred layer's allreduce of the
  // step before (wait) or the step waits for every allreduce at its end.
  MLS_ORACLE(auto replay = [&](int defer, bool wait) {
    double t = 0, lane = 0;
    std::vector<double> done(L, 0.0), starts;
    auto issue = [&](int l) { lane = std::max(lane, t) + c; done[static_cast<std::size_t>(l)] = lane; };
    for (int s = 0; s < 5; ++s) {
      starts.push_back(t);
      for (int l = 0; l < L; ++l) {
        if (wait && l < defer) t = std::max(t, done[static_cast<std::size_t>(l)]);
        t += f;
      }
      for (int l = L - 1; l >= 0; --l) {
        t += b;
        if (l >= defer) issue(l);
      }
      for (int l = 0; l < defer; ++l) issue(l);
      for (int l = 0; l < L; ++l)
        if (!wait || l >= defer) t = std::max(t, done[static_cast<std::size_t>(l)]);
    }
    return starts[3] - starts[2];
  };)
  const std::vector<std::pair<int, bool>> cases = {{0, false}, {2, false}, {1, true}, {2, true}, {3, true}, {6, true}};
  std::vector<double> periods;
  for (const auto& [defer, wait] : cases) {
    const std::vector<double> got = period(defer, wait);
    INFO("defer " << defer << " wait_in_forward " << wait);
    mls::testing::observe("modelled step (ms), defer " + std::to_string(defer) + (wait ? ", waits in forward" : ""),
                          std::vector<double>{1e3 * got[0], 1e3 * got[1]}, {1e-9, 1e-9});
    periods.push_back(got[0]);
    MLS_ORACLE_CHECK(CHECK(got[0] == Approx(replay(defer, wait)).margin(1e-12));
                     CHECK(got[1] == Approx(got[0]).margin(1e-12)));
  }
  // DDP: 26 ms (the link idles through forward); waits in forward with 2 or 3 deferred: 25 ms (the
  // forward of the layers before a deferred one hides); all deferred: the link idles through backward
  MLS_ORACLE_CHECK(CHECK(periods[0] == Approx(26e-3).margin(1e-12)); CHECK(periods[3] == Approx(25e-3).margin(1e-12));
                   CHECK(periods[4] == Approx(25e-3).margin(1e-12)); CHECK(periods[5] == Approx(31e-3).margin(1e-12)));
}
