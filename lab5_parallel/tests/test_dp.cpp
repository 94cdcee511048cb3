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
