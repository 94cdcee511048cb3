// Every collective algorithm against a direct computation, on N = 1..8 simulated ranks, sizes
// not divisible by N (smaller than N, and 0), every reduce op and float32/float64/int64.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>

#include "lab5_testing.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using namespace mls::parallel::testing;

namespace {

/// Runs an allreduce (or reduce) of every op/dtype/size on N = 1..8 ranks and checks every rank.
void check_allreduce(Algo algo) {
  for (int n = 1; n <= 8; ++n)
    for (std::int64_t size : sizes_for(n))
      for (DType dt : all_dtypes())
        for (ReduceOp op : all_ops()) {
          std::vector<Tensor> inputs;
          for (int r = 0; r < n; ++r) inputs.push_back(input_of(r, size, dt));
          std::vector<std::vector<double>> got(n);
          run_simulated(n, [&](Communicator& c) {
            Tensor t = inputs[c.rank()].clone();
            c.allreduce(t, op, algo);
            got[c.rank()] = t.to_vector<double>();
          });
          MLS_ORACLE(const std::vector<double> want = reduce_ref(inputs, op);)
          for (int r = 0; r < n; ++r) {
            MLS_CHECK_CLOSE(got[r], want, dt, n, ctx(n, size, dt, to_string(op)) << " rank " << r);
            CHECK(got[r] == got[0]);  // bit-identical on every rank
          }
        }
}

}  // namespace

TEST_CASE("allreduce ring: every op and dtype, N = 1..8, ragged sizes", "[lab5][allreduce_ring]") {
  check_allreduce(Algo::Ring);
}

TEST_CASE("allreduce recursive doubling: every op and dtype, N = 1..8 (powers of two and folds)",
          "[lab5][allreduce_recursive_doubling]") {
  check_allreduce(Algo::RecursiveDoubling);
}

TEST_CASE("allreduce Rabenseifner: every op and dtype, N = 1..8, sizes smaller than N", "[lab5][allreduce_rabenseifner]") {
  check_allreduce(Algo::Rabenseifner);
}

TEST_CASE("allreduce auto: the model's choice gives the same result as ring", "[lab5][model]") {
  std::vector<std::vector<double>> got(5), ring(5);
  run_simulated(5, [&](Communicator& c) {
    Tensor t = input_of(c.rank(), 1000, DType::Float64);
    Tensor u = t.clone();
    c.allreduce(t);
    c.allreduce(u, ReduceOp::Sum, Algo::Ring);
    got[c.rank()] = t.to_vector<double>();
    ring[c.rank()] = u.to_vector<double>();
  });
  for (int r = 0; r < 5; ++r) mls::testing::observe("ring", ring[r], tol_of(DType::Float64, 5));
  for (int r = 0; r < 5; ++r) MLS_CHECK_CLOSE(got[r], ring[r], DType::Float64, 5, "auto vs ring");
}

TEST_CASE("allreduce of a non-contiguous 2-D tensor writes back in place", "[lab5][allreduce_ring]") {
  std::vector<std::vector<double>> got(3);
  run_simulated(3, [&](Communicator& c) {
    Tensor base = Tensor::arange(12, DType::Float32).view({3, 4});
    Tensor t = base.transpose(0, 1);  // [4, 3], not contiguous
    c.allreduce(t, ReduceOp::Sum, Algo::Ring);
    got[c.rank()] = base.to_vector<double>();
  });
  for (int r = 0; r < 3; ++r) mls::testing::observe("base after allreduce", got[r]);
  MLS_ORACLE_CHECK(for (int r = 0; r < 3; ++r) for (int i = 0; i < 12; ++i) CHECK(got[r][i] == 3.0 * i));
}

TEST_CASE("broadcast tree and linear: every root, dtype and size, N = 1..8", "[lab5][broadcast]") {
  for (Algo algo : {Algo::Tree, Algo::Linear, Algo::Auto})
    for (int n = 1; n <= 8; ++n)
      for (std::int64_t size : sizes_for(n))
        for (DType dt : all_dtypes())
          for (int root = 0; root < n; ++root) {
            std::vector<std::vector<double>> got(n);
            run_simulated(n, [&](Communicator& c) {
              Tensor t = c.rank() == root ? input_of(root, size, dt) : Tensor::zeros({size}, dt);
              c.broadcast(t, root, algo);
              got[c.rank()] = t.to_vector<double>();
            });
            for (int r = 0; r < n; ++r) mls::testing::observe("broadcast", got[r]);
            MLS_ORACLE(const std::vector<double> want = input_of(root, size, dt).to_vector<double>();)
            MLS_ORACLE_CHECK(for (int r = 0; r < n; ++r) CHECK(got[r] == want));
          }
}

TEST_CASE("reduce tree: every op, dtype, root and size, N = 1..8", "[lab5][reduce]") {
  for (int n = 1; n <= 8; ++n)
    for (std::int64_t size : sizes_for(n))
      for (DType dt : all_dtypes())
        for (ReduceOp op : all_ops()) {
          const int root = (n * 7 + static_cast<int>(size)) % n;
          std::vector<Tensor> inputs;
          for (int r = 0; r < n; ++r) inputs.push_back(input_of(r, size, dt));
          std::vector<double> got;
          run_simulated(n, [&](Communicator& c) {
            Tensor t = inputs[c.rank()].clone();
            c.reduce(t, op, root);
            if (c.rank() == root) got = t.to_vector<double>();
          });
          MLS_CHECK_CLOSE(got, reduce_ref(inputs, op), dt, n, ctx(n, size, dt, to_string(op)) << " root " << root);
        }
}

TEST_CASE("allgather ring: rank order, every dtype and size, N = 1..8", "[lab5][allgather]") {
  for (int n = 1; n <= 8; ++n)
    for (std::int64_t size : sizes_for(n))
      for (DType dt : all_dtypes()) {
        std::vector<Tensor> got(n);
        run_simulated(n, [&](Communicator& c) { got[c.rank()] = c.allgather(input_of(c.rank(), size, dt)); });
        MLS_ORACLE(std::vector<double> want; for (int r = 0; r < n; ++r) {
          auto v = input_of(r, size, dt).to_vector<double>();
          want.insert(want.end(), v.begin(), v.end());
        })
        for (int r = 0; r < n; ++r) {
          mls::testing::observe_values("allgather", got[r]);
          MLS_ORACLE_CHECK(CHECK(got[r].shape() == Shape{n, size}); CHECK(got[r].dtype() == dt);
                           CHECK(got[r].to_vector<double>() == want));
        }
      }
}

TEST_CASE("reduce_scatter ring: ragged row chunks, every op and dtype, N = 1..8", "[lab5][reduce_scatter]") {
  for (int n = 1; n <= 8; ++n)
    for (std::int64_t rows : sizes_for(n))
      for (DType dt : all_dtypes())
        for (ReduceOp op : all_ops()) {
          const std::int64_t cols = 3;
          std::vector<Tensor> inputs;
          for (int r = 0; r < n; ++r) inputs.push_back(input_of(r, rows * cols, dt));
          std::vector<Tensor> got(n);
          run_simulated(n, [&](Communicator& c) {
            got[c.rank()] = c.reduce_scatter(inputs[c.rank()].view({rows, cols}), op);
          });
          MLS_ORACLE(const std::vector<double> full = reduce_ref(inputs, op); const auto b = chunk_bounds(rows, n);)
          for (int r = 0; r < n; ++r) {
            mls::testing::observe("reduce_scatter shape", got[r].shape());
            MLS_ORACLE(std::vector<double> want(full.begin() + b[r] * cols, full.begin() + b[r + 1] * cols);)
            MLS_ORACLE_CHECK(CHECK(got[r].shape() == Shape{b[r + 1] - b[r], cols}));
            MLS_CHECK_CLOSE(got[r].to_vector<double>(), want, dt, n, ctx(n, rows, dt, to_string(op)) << " rank " << r);
          }
        }
}

TEST_CASE("all_to_all pairwise: row s of rank r's result is rank s's row r, N = 1..8", "[lab5][all_to_all]") {
  for (int n = 1; n <= 8; ++n)
    for (std::int64_t cols : {0, 1, 5})
      for (DType dt : all_dtypes()) {
        std::vector<Tensor> got(n);
        run_simulated(n, [&](Communicator& c) {
          got[c.rank()] = c.all_to_all(input_of(c.rank(), n * cols, dt).view({n, cols}));
        });
        for (int r = 0; r < n; ++r) {
          mls::testing::observe_values("all_to_all", got[r]);
          MLS_ORACLE_CHECK(REQUIRE(got[r].shape() == Shape{n, cols}); for (int s = 0; s < n; ++s) {
            auto src = input_of(s, n * cols, dt).to_vector<double>();
            auto row = got[r].select(0, s).to_vector<double>();
            CHECK(row == std::vector<double>(src.begin() + r * cols, src.begin() + (r + 1) * cols));
          });
        }
      }
}

TEST_CASE("gather and scatter linear: every root, N = 1..8", "[lab5][gather_scatter]") {
  for (int n = 1; n <= 8; ++n)
    for (std::int64_t size : sizes_for(n))
      for (int root = 0; root < n; ++root) {
        std::vector<Tensor> gathered(n), scattered(n);
        const DType dt = (root % 2) ? DType::Int64 : DType::Float32;
        Tensor all = input_of(99, n * size, dt).view({n, size});
        run_simulated(n, [&](Communicator& c) {
          gathered[c.rank()] = c.gather(input_of(c.rank(), size, dt), root);
          scattered[c.rank()] = c.scatter(c.rank() == root ? all : Tensor::zeros({n, size}, dt), root);
        });
        for (int r = 0; r < n; ++r) {
          mls::testing::observe_values("scattered", scattered[r]);
          mls::testing::observe_values("gathered", gathered[r]);
          MLS_ORACLE_CHECK(CHECK(scattered[r].to_vector<double>() == all.select(0, r).to_vector<double>()); if (r == root) {
            REQUIRE(gathered[r].shape() == Shape{n, size});
            for (int s = 0; s < n; ++s)
              CHECK(gathered[r].select(0, s).to_vector<double>() == input_of(s, size, dt).to_vector<double>());
          } else {
            CHECK(gathered[r].numel() == 0);
          });
        }
      }
}

TEST_CASE("barrier: nobody leaves before everybody entered", "[lab5][barrier]") {
  for (int n = 1; n <= 8; ++n) {
    std::atomic<int> entered{0};
    std::vector<int> seen(n, -1);
    auto rep = run_simulated(n, [&](Communicator& c) {
      entered.fetch_add(1);
      c.barrier();
      seen[c.rank()] = entered.load();
    });
    MLS_OBSERVE(seen);
    for (int r = 0; r < n; ++r) mls::testing::observe("barrier messages sent", rep.traffic[r].total.messages_sent);
    MLS_ORACLE(const int rounds = n > 1 ? static_cast<int>(std::ceil(std::log2(n))) : 0;)
    MLS_ORACLE_CHECK(for (int r = 0; r < n; ++r) CHECK(seen[r] == n);
                     for (int r = 0; r < n; ++r) CHECK(rep.traffic[r].total.messages_sent == rounds));
  }
}
