// Counted traffic equals the theory exactly, and the simulated α-β-γ clock equals the closed
// forms of cost.hpp where the algorithm's critical path is the formula's.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>

#include "lab5_testing.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/parallel/cost.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using namespace mls::parallel::testing;

namespace {
#ifndef MLS_GRADED_BUILD
int ceil_log2(int n) { return n > 1 ? std::bit_width(static_cast<unsigned>(n - 1)) : 0; }
#endif
bool pow2(int n) { return std::has_single_bit(static_cast<unsigned>(n)); }

SimOptions model_opts() {
  SimOptions o;
  o.cost = CostModel{1e-6, 1e-9, 1e-10};
  return o;
}

/// Records messages and bytes sent and received.
void observe_counts(const std::string& label, const Traffic::Counts& t) {
  mls::testing::observe(label + ": messages sent, bytes sent, messages received, bytes received",
                        std::vector<std::int64_t>{t.messages_sent, t.bytes_sent, t.messages_recv, t.bytes_recv});
}

void check_model(const SimReport& rep, const CostModel& m, const std::string& coll, const std::string& algo, int n,
                 std::int64_t bytes, int elem) {
  mls::testing::observe(coll + " " + algo + " modelled seconds", rep.max_modelled_seconds(), {2e-9, 2e-15});
  MLS_ORACLE(const double want = estimate(m, coll, algo, n, bytes, elem).seconds;)
  MLS_ORACLE_CHECK(INFO(coll << " " << algo << " N=" << n << " bytes=" << bytes);
                   CHECK(rep.max_modelled_seconds() == Approx(want).epsilon(1e-9).margin(1e-15)));
}
}  // namespace

TEST_CASE("ring allreduce traffic: 2(N-1) messages and steps, 2(N-1)/N*n elements per rank", "[lab5][traffic]") {
  for (int n = 1; n <= 8; ++n)
    for (std::int64_t size : {std::int64_t{0}, std::int64_t{3}, std::int64_t{n} * 5, std::int64_t{n} * 5 + 3}) {
      auto rep = run_simulated(n, [&](Communicator& c) {
        Tensor t = Tensor::ones({size}, DType::Float64);
        c.allreduce(t, ReduceOp::Sum, Algo::Ring);
      });
      std::int64_t total = 0;
      for (int r = 0; r < n; ++r) {
        const auto& t = rep.traffic[r].by_op.at("allreduce");
        observe_counts("allreduce", t);
        MLS_OBSERVE(t.steps);
        MLS_ORACLE_CHECK(CHECK(t.messages_sent == 2 * (n - 1)); CHECK(t.messages_recv == 2 * (n - 1));
                         CHECK(t.steps == 2 * (n - 1));
                         // Reduce-scatter sends every chunk but r+1's... precisely: all but chunk r, then all but chunk r+1.
                         const auto b = chunk_bounds(size, n); const int r1 = (r + 1) % n;
                         const std::int64_t elems = n == 1 ? 0 : (size - (b[r + 1] - b[r])) + (size - (b[r1 + 1] - b[r1]));
                         CHECK(t.bytes_sent == elems * 8);
                         if (size % n == 0) CHECK(t.bytes_sent == 2 * (n - 1) * (size / n) * 8));
        total += t.bytes_sent;
        CHECK(rep.traffic[r].total.bytes_sent == t.bytes_sent);
      }
      MLS_OBSERVE(total);
      MLS_ORACLE_CHECK(CHECK(total == 2 * (n - 1) * size * 8));
    }
}

TEST_CASE("tree broadcast traffic: ceil(log2 N) rounds, N-1 messages in all", "[lab5][traffic]") {
  for (int n = 1; n <= 8; ++n)
    for (int root : {0, n - 1}) {
      auto rep = run_simulated(n, [&](Communicator& c) {
        Tensor t = Tensor::ones({10}, DType::Float32);
        c.broadcast(t, root, Algo::Tree);
      });
      std::int64_t sent = 0;
      for (int r = 0; r < n; ++r) sent += rep.traffic[r].total.messages_sent;
      MLS_ORACLE_CHECK(for (int r = 0; r < n; ++r) CHECK(rep.traffic[r].total.messages_recv == (r == root ? 0 : 1)));
      for (int r = 0; r < n; ++r) observe_counts("broadcast", rep.traffic[r].total);
      MLS_OBSERVE(rep.traffic[root].total.steps);
      MLS_ORACLE_CHECK(CHECK(sent == n - 1); CHECK(rep.traffic[root].total.steps == ceil_log2(n)));
    }
}

TEST_CASE("recursive doubling and Rabenseifner traffic on powers of two", "[lab5][traffic]") {
  for (int n : {2, 4, 8}) {
    const std::int64_t size = 8 * n;
    auto rd = run_simulated(n, [&](Communicator& c) {
      Tensor t = Tensor::ones({size});
      c.allreduce(t, ReduceOp::Sum, Algo::RecursiveDoubling);
    });
    auto rab = run_simulated(n, [&](Communicator& c) {
      Tensor t = Tensor::ones({size});
      c.allreduce(t, ReduceOp::Sum, Algo::Rabenseifner);
    });
    MLS_ORACLE(const int lg = ceil_log2(n);)
    for (int r = 0; r < n; ++r) {
      observe_counts("recursive doubling", rd.traffic[r].total);
      observe_counts("rabenseifner", rab.traffic[r].total);
      MLS_ORACLE_CHECK(CHECK(rd.traffic[r].total.messages_sent == lg); CHECK(rd.traffic[r].total.bytes_sent == lg * size * 4);
                       CHECK(rab.traffic[r].total.messages_sent == 2 * lg);
                       CHECK(rab.traffic[r].total.bytes_sent == 2 * (n - 1) * (size / n) * 4));
    }
  }
}

TEST_CASE("allgather, reduce_scatter, all_to_all, gather, scatter traffic", "[lab5][traffic]") {
  for (int n = 1; n <= 8; ++n) {
    const std::int64_t k = 6;  // elements per rank's chunk
    auto rep = run_simulated(n, [&](Communicator& c) {
      Tensor mine = Tensor::ones({k});
      (void)c.allgather(mine);
      (void)c.reduce_scatter(Tensor::ones({n * k}));
      (void)c.all_to_all(Tensor::ones({n, k}));
      (void)c.gather(mine, 0);
      (void)c.scatter(Tensor::ones({n, k}), 0);
    });
    for (int r = 0; r < n; ++r) {
      const auto& by = rep.traffic[r].by_op;
      for (const char* op : {"allgather", "reduce_scatter", "all_to_all"}) {
        INFO(op << " N=" << n << " rank " << r);
        observe_counts(op, by.at(op));
        MLS_ORACLE_CHECK(CHECK(by.at(op).messages_sent == n - 1); CHECK(by.at(op).bytes_sent == (n - 1) * k * 4));
      }
      observe_counts("gather", by.at("gather"));
      observe_counts("scatter", by.at("scatter"));
      MLS_ORACLE_CHECK(CHECK(by.at("gather").messages_sent == (r == 0 ? 0 : 1));
                       CHECK(by.at("gather").messages_recv == (r == 0 ? n - 1 : 0));
                       CHECK(by.at("scatter").messages_sent == (r == 0 ? n - 1 : 0));
                       CHECK(by.at("scatter").bytes_recv == (r == 0 ? 0 : k * 4)));
    }
  }
}

TEST_CASE("user send/recv traffic is counted under send and recv", "[lab5][p2p]") {
  auto rep = run_simulated(2, [&](Communicator& c) {
    Tensor t = Tensor::ones({5}, DType::Int64);
    if (c.rank() == 0) c.send(t, 1, 3);
    else c.recv(t, 0, 3);
  });
  observe_counts("send", rep.traffic[0].by_op.at("send"));
  observe_counts("recv", rep.traffic[1].by_op.at("recv"));
  observe_counts("send total", rep.traffic[0].total);
  MLS_ORACLE_CHECK(CHECK(rep.traffic[0].by_op.at("send").bytes_sent == 40);
                   CHECK(rep.traffic[1].by_op.at("recv").bytes_recv == 40);
                   CHECK(rep.traffic[0].total.messages_sent == 1));
  rep.traffic[0].reset();
  observe_counts("send total after reset", rep.traffic[0].total);
  MLS_ORACLE_CHECK(CHECK(rep.traffic[0].total.messages_sent == 0));
}

TEST_CASE("simulated clock equals the closed-form α-β-γ model", "[lab5][model]") {
  const SimOptions o = model_opts();
  for (int n = 1; n <= 8; ++n) {
    const std::int64_t k = 16 * 7 * 5 * 3 * n;  // divisible by every chunk count used
    const std::int64_t bytes = k * 4;
    auto run = [&](auto f) { return run_simulated(n, f, o); };
    check_model(run([&](Communicator& c) { Tensor t = Tensor::ones({k}); c.allreduce(t, ReduceOp::Sum, Algo::Ring); }),
                o.cost, "allreduce", "ring", n, bytes, 4);
    const std::int64_t kp = 16 * 7 * 5 * 3 * static_cast<std::int64_t>(std::bit_floor(static_cast<unsigned>(n)));
    check_model(run([&](Communicator& c) { Tensor t = Tensor::ones({kp}); c.allreduce(t, ReduceOp::Sum, Algo::RecursiveDoubling); }),
                o.cost, "allreduce", "recursive_doubling", n, kp * 4, 4);
    check_model(run([&](Communicator& c) { Tensor t = Tensor::ones({kp}); c.allreduce(t, ReduceOp::Sum, Algo::Rabenseifner); }),
                o.cost, "allreduce", "rabenseifner", n, kp * 4, 4);
    check_model(run([&](Communicator& c) { Tensor t = Tensor::ones({k}); c.broadcast(t, n / 2, Algo::Tree); }),
                o.cost, "broadcast", "tree", n, bytes, 4);
    check_model(run([&](Communicator& c) { Tensor t = Tensor::ones({k}); c.broadcast(t, 0, Algo::Linear); }),
                o.cost, "broadcast", "linear", n, bytes, 4);
    check_model(run([&](Communicator& c) { (void)c.allgather(Tensor::ones({k / n})); }), o.cost, "allgather", "ring", n,
                bytes, 4);
    check_model(run([&](Communicator& c) { (void)c.reduce_scatter(Tensor::ones({k})); }), o.cost, "reduce_scatter",
                "ring", n, bytes, 4);
    check_model(run([&](Communicator& c) { (void)c.all_to_all(Tensor::ones({n, k / n})); }), o.cost, "all_to_all",
                "pairwise", n, bytes, 4);
    check_model(run([&](Communicator& c) { (void)c.gather(Tensor::ones({k / n}), 0); }), o.cost, "gather", "linear", n,
                bytes, 4);
    check_model(run([&](Communicator& c) { (void)c.scatter(Tensor::ones({n, k / n}), n - 1); }), o.cost, "scatter",
                "linear", n, bytes, 4);
    if (pow2(n))
      check_model(run([&](Communicator& c) { Tensor t = Tensor::ones({k}); c.reduce(t, ReduceOp::Sum, 0); }), o.cost,
                  "reduce", "tree", n, bytes, 4);
  }
}

TEST_CASE("cost model: closed forms, the crossover and bad names", "[lab5][cost]") {
  CostModel m{1e-5, 1e-10, 0};
  // Latency-bound small messages: recursive doubling; bandwidth-bound large ones: ring/Rabenseifner.
  MLS_OBSERVE(cheapest(m, "allreduce", 8, 64));
  MLS_OBSERVE(cheapest(m, "allreduce", 8, 64 << 20));
  MLS_OBSERVE(estimate(m, "allreduce", "ring", 4, 4000).seconds, {1e-9, 0.0});
  MLS_OBSERVE(estimate(m, "broadcast", "tree", 5, 100).steps);
  MLS_OBSERVE(estimate(m, "allreduce", "ring", 1, 100).seconds);
  MLS_ORACLE_CHECK(CHECK(cheapest(m, "allreduce", 8, 64) == "recursive_doubling");
                   CHECK(cheapest(m, "allreduce", 8, 64 << 20) != "recursive_doubling");
                   CHECK(estimate(m, "allreduce", "ring", 4, 4000).seconds == Approx(6 * 1e-5 + 1.5 * 4000 * 1e-10));
                   CHECK(estimate(m, "broadcast", "tree", 5, 100).steps == 3);
                   CHECK(estimate(m, "allreduce", "ring", 1, 100).seconds == 0));
  mls::testing::require_error([&] { (void)estimate(m, "allreduce", "tree", 4, 10); }, "allreduce has no algorithm 'tree'");
  mls::testing::require_error([&] { (void)algorithms_of("allscatter"); }, "unknown collective 'allscatter'");
  mls::testing::require_error([&] { (void)estimate(m, "allreduce", "ring", 0, 10); }, "ranks must be >= 1");
  // Communicator::choose follows the same model.
  std::vector<std::string> chosen(8);
  run_simulated(8, [&](Communicator& c) {
    c.set_cost_model(m);
    chosen[static_cast<std::size_t>(c.rank())] = to_string(c.choose("allreduce", 64));
  });
  for (const auto& a : chosen) mls::testing::observe("choose(\"allreduce\", 64)", a);
  MLS_ORACLE_CHECK(for (const auto& a : chosen) CHECK(a == to_string(Algo::RecursiveDoubling)));
}

TEST_CASE("cost model JSON round trip and bad files", "[lab5][cost]") {
  CostModel m{3e-6, 2e-10, 1e-9};
  const std::string path = "lab5_cost_model_test.json";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fputs(m.to_json().c_str(), f);
    std::fclose(f);
  }
  CostModel back = CostModel::load(path);
  MLS_OBSERVE(std::vector<double>({back.alpha, back.beta, back.gamma}));
  MLS_ORACLE_CHECK(CHECK(back.alpha == m.alpha); CHECK(back.beta == m.beta); CHECK(back.gamma == m.gamma));
  std::remove(path.c_str());
  mls::testing::require_error([&] { (void)CostModel::load("no/such/file.json"); }, "cannot open 'no/such/file.json'");
}
