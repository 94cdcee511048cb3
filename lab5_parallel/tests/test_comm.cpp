// Point to point, split, bad input, failures and determinism on the simulated backend.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "lab5_testing.hpp"
#include "mls/autodiff/nn.hpp"
#include "mls/autodiff/var.hpp"
#include "mls/common/parallel.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/parallel/sim.hpp"
#include "mls/parallel/timeline.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using namespace mls::parallel::testing;
using mls::testing::require_error;

TEST_CASE("send and recv: tags match FIFO per (source, tag), any order of tags", "[lab5][p2p]") {
  std::vector<std::vector<double>> got(2);
  run_simulated(2, [&](Communicator& c) {
    if (c.rank() == 0) {
      c.send(Tensor::from({1.0, 2.0}), 1, 5);
      c.send(Tensor::from({3.0, 4.0}), 1, 7);
      c.send(Tensor::from({5.0, 6.0}), 1, 5);
    } else {
      Tensor a = Tensor::empty({2}, DType::Float64), b = a.clone(), d = a.clone();
      c.recv(b, 0, 7);  // tag 7 first, although it was sent second
      c.recv(a, 0, 5);
      c.recv(d, 0, 5);
      got[1] = concat({a, b, d}).to_vector<double>();
    }
  });
  mls::testing::observe("rank 1: recv(tag 5), recv(tag 7), recv(tag 5) of sends tagged 5, 7, 5", got[1]);
  MLS_ORACLE_CHECK(CHECK(got[1] == std::vector<double>{1, 2, 3, 4, 5, 6}));
}

TEST_CASE("isend and irecv with wait handles, a ring exchange does not deadlock", "[lab5][p2p]") {
  for (int n = 1; n <= 8; ++n) {
    std::vector<double> got(n);
    run_simulated(n, [&](Communicator& c) {
      Tensor out = Tensor::full({3}, c.rank(), DType::Int64), in = Tensor::zeros({3}, DType::Int64);
      Request rr = c.irecv(in, (c.rank() + n - 1) % n, 1);
      Request rs = c.isend(out, (c.rank() + 1) % n, 1);
      rs.wait();
      rr.wait();
      got[c.rank()] = in.at({2});
      try {  // a second wait is an error
        rr.wait();
        got[c.rank()] = -1;
      } catch (const Error& e) {
        if (std::string(e.what()).find("already waited on") == std::string::npos) got[c.rank()] = -2;
      }
    });
    mls::testing::observe("irecv from the left neighbour on a ring of " + std::to_string(n) + " ranks, per rank", got);
    MLS_ORACLE_CHECK(for (int r = 0; r < n; ++r) CHECK(got[r] == (r + n - 1) % n));
  }
}

TEST_CASE("split: row and column communicators of a 2-D mesh, and a 3-D mesh", "[lab5][split]") {
  // 2 x 3 mesh: rank = 3*row + col.
  std::vector<std::vector<double>> rows(6), cols(6);
  std::vector<int> row_rank(6), col_rank(6), row_size(6), col_size(6);
  run_simulated(6, [&](Communicator& c) {
    const int row = c.rank() / 3, col = c.rank() % 3;
    Communicator rc = c.split(row, col);
    Communicator cc = c.split(col, -row);  // keys reverse the order inside a column
    row_rank[c.rank()] = rc.rank();
    row_size[c.rank()] = rc.size();
    col_rank[c.rank()] = cc.rank();
    col_size[c.rank()] = cc.size();
    Tensor a = Tensor::full({1}, c.rank(), DType::Int64), b = a.clone();
    rc.allreduce(a);
    cc.allreduce(b);
    rows[c.rank()] = a.to_vector<double>();
    cols[c.rank()] = b.to_vector<double>();
    c.barrier();  // the parent still works after splits
  });
  MLS_OBSERVE(row_rank);
  MLS_OBSERVE(row_size);
  MLS_OBSERVE(col_rank);
  MLS_OBSERVE(col_size);
  for (int r = 0; r < 6; ++r) mls::testing::observe("row, column sums", std::vector<double>{rows[r][0], cols[r][0]});
  MLS_ORACLE_CHECK(for (int r = 0; r < 6; ++r) {
    const int row = r / 3, col = r % 3;
    CHECK(row_size[r] == 3);
    CHECK(col_size[r] == 2);
    CHECK(row_rank[r] == col);
    CHECK(col_rank[r] == 1 - row);
    CHECK(rows[r][0] == 3 * (3 * row) + 3);
    CHECK(cols[r][0] == col + (col + 3));
  });
  // 2 x 2 x 2: split twice; the innermost communicators have 2 ranks and independent traffic.
  std::vector<double> inner(8);
  std::vector<int> inner_size(8);
  run_simulated(8, [&](Communicator& c) {
    Communicator a = c.split(c.rank() / 4, c.rank());
    Communicator b = a.split(a.rank() / 2, a.rank());
    Tensor t = Tensor::full({2}, c.rank(), DType::Float32);
    b.allreduce(t, ReduceOp::Max);
    inner[c.rank()] = t.at({0});
    inner_size[c.rank()] = b.size();
  });
  MLS_OBSERVE(inner);
  MLS_OBSERVE(inner_size);
  MLS_ORACLE_CHECK(for (int r = 0; r < 8; ++r) CHECK(inner[r] == (r | 1));
                   for (int r = 0; r < 8; ++r) CHECK(inner_size[r] == 2));
}

TEST_CASE("chunk_bounds: sizes differ by at most one, the first n%N chunks are larger", "[lab5][p2p]") {
  MLS_OBSERVE(chunk_bounds(10, 4));
  MLS_OBSERVE(chunk_bounds(2, 4));
  MLS_OBSERVE(chunk_bounds(0, 3));
  MLS_ORACLE_CHECK(CHECK(chunk_bounds(10, 4) == std::vector<std::int64_t>{0, 3, 6, 8, 10});
                   CHECK(chunk_bounds(2, 4) == std::vector<std::int64_t>{0, 1, 2, 2, 2});
                   CHECK(chunk_bounds(0, 3) == std::vector<std::int64_t>{0, 0, 0, 0}));
  require_error([] { (void)chunk_bounds(5, 0); }, "chunk_bounds: parts must be >= 1");
  mls::testing::observe("parse_algo(\"ring\")", to_string(parse_algo("ring")));
  mls::testing::observe("parse_reduce_op(\"max\")", to_string(parse_reduce_op("max")));
  MLS_ORACLE_CHECK(CHECK(parse_algo("ring") == Algo::Ring); CHECK(parse_reduce_op("max") == ReduceOp::Max));
  require_error([] { (void)parse_algo("butterfly"); }, "unknown algorithm 'butterfly'");
  require_error([] { (void)parse_reduce_op("xor"); }, "unknown reduce op 'xor'");
}

// ---- bad input: a clear mls::Error on every rank, within the timeout ----------------------------

TEST_CASE("mismatched sizes across ranks: every rank gets the error", "[lab5][errors]") {
  for (Algo algo : {Algo::Ring, Algo::RecursiveDoubling, Algo::Rabenseifner}) {
    std::vector<std::string> msgs(4);
    require_error(
        [&] {
          run_simulated(4, [&](Communicator& c) {
            Tensor t = Tensor::ones({c.rank() == 2 ? 9 : 8});
            try {
              c.allreduce(t, ReduceOp::Sum, algo);
            } catch (const Error& e) {
              msgs[c.rank()] = e.what();
              throw;
            }
          }, quick());
        },
        "size mismatch");
    std::int64_t ranks_named = 0;
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r << ": " << msgs[r]);
      CHECK(msgs[r].find("allreduce: size mismatch") != std::string::npos);
      ranks_named += msgs[r].find("allreduce: size mismatch") != std::string::npos;
    }
    MLS_OBSERVE(ranks_named);  // how many ranks got the error (not which came first: threads)
  }
}

TEST_CASE("mismatched dtypes, roots, ops and collectives across ranks", "[lab5][errors]") {
  require_error([] { run_simulated(2, [](Communicator& c) {
                  Tensor t = Tensor::ones({4}, c.rank() ? DType::Float64 : DType::Float32);
                  c.allreduce(t);
                }, quick()); },
                "allreduce: dtype mismatch");
  require_error([] { run_simulated(3, [](Communicator& c) {
                  Tensor t = Tensor::ones({4});
                  c.broadcast(t, c.rank() == 0 ? 0 : 1, Algo::Linear);
                }, quick()); },
                "never received 1 message(s)");
  require_error([] { run_simulated(2, [](Communicator& c) {
                  Tensor t = Tensor::ones({4});
                  c.allreduce(t, c.rank() ? ReduceOp::Max : ReduceOp::Sum, Algo::Ring);
                }, quick()); },
                "reduce op mismatch");
  require_error([] { run_simulated(2, [](Communicator& c) {
                  Tensor t = Tensor::ones({4});
                  if (c.rank() == 0) c.allreduce(t, ReduceOp::Sum, Algo::Ring);
                  else (void)c.allgather(t);
                }, quick()); },
                "every rank must call the same collectives in the same order");
  require_error([] { run_simulated(2, [](Communicator& c) {
                  Tensor t = Tensor::ones({4});
                  if (c.rank() == 0) c.send(t, 1);
                  else {
                    Tensor u = Tensor::ones({5});
                    c.recv(u, 0);
                  }
                }, quick()); },
                "recv: size mismatch: rank 1 has 5 elements but rank 0 has 4");
}

TEST_CASE("root out of range, bad peers, tags and shapes", "[lab5][plumbing]") {
  require_error([] { run_simulated(3, [](Communicator& c) { Tensor t = Tensor::ones({2}); c.broadcast(t, 3); }); },
                "broadcast: root rank 3 is out of range [0, 3)");
  require_error([] { run_simulated(3, [](Communicator& c) { Tensor t = Tensor::ones({2}); c.reduce(t, ReduceOp::Sum, -1); }); },
                "reduce: root rank -1 is out of range [0, 3)");
  require_error([] { run_simulated(2, [](Communicator& c) { (void)c.gather(Tensor::ones({2}), 2); }); },
                "gather: root rank 2 is out of range [0, 2)");
  require_error([] { run_simulated(2, [](Communicator& c) { c.send(Tensor::ones({2}), 5); }); },
                "send: destination rank 5 is out of range [0, 2)");
  require_error([] { run_simulated(2, [](Communicator& c) { c.send(Tensor::ones({2}), 1 - c.rank(), -4); }); },
                "send: tag -4 is out of range");
  require_error([] { run_simulated(2, [](Communicator& c) { (void)c.scatter(Tensor::ones({3, 2}), 0); }); },
                "scatter: the tensor must have shape [2, ...]");
  require_error([] { run_simulated(2, [](Communicator& c) { (void)c.all_to_all(Tensor::ones({4})); }); },
                "all_to_all: the tensor must have shape [2, ...]");
  require_error([] { run_simulated(2, [](Communicator& c) { Tensor t = Tensor::ones({2}, DType::Bool); c.allreduce(t); }); },
                "allreduce: cannot reduce dtype bool");
  require_error([] { run_simulated(2, [](Communicator& c) {
                  Tensor t = Tensor::ones({4}).slice(0, 0, 4, 2);
                  c.send(t, 1 - c.rank());
                }); },
                "send: the tensor must be contiguous");
  require_error([] { run_simulated(0, [](Communicator&) {}); }, "number of ranks must be >= 1");
}

TEST_CASE("split with inconsistent arguments fails on every rank", "[lab5][plumbing]") {
  std::vector<std::string> msgs(3);
  require_error([&] {
    run_simulated(3, [&](Communicator& c) {
      try {
        (void)c.split(c.rank() == 1 ? -2 : 0, 0);
      } catch (const Error& e) {
        msgs[c.rank()] = e.what();
        throw;
      }
    }, quick());
  }, "split: rank 1 passed color -2");
  std::int64_t ranks_named = 0;
  for (int r = 0; r < 3; ++r) {
    CHECK(msgs[r].find("split: rank 1 passed color -2") != std::string::npos);
    ranks_named += msgs[r].find("split: rank 1 passed color -2") != std::string::npos;
  }
  MLS_OBSERVE(ranks_named);
}

TEST_CASE("a rank that throws stops every rank promptly, naming the rank", "[lab5][plumbing]") {
  std::atomic<int> stopped{0};
  require_error([&] {
    run_simulated(4, [&](Communicator& c) {
      if (c.rank() == 2) throw Error("rank two's model diverged");
      Tensor t = Tensor::ones({16});
      try {
        c.recv(t, 2);  // waits for the rank that throws
      } catch (const Error&) {
        stopped.fetch_add(1);
        throw;
      }
    }, quick(60000));  // a hang would take a minute; the abort is immediate
  }, "rank 2 of 4: rank two's model diverged");
  MLS_OBSERVE(stopped.load());
  MLS_ORACLE_CHECK(CHECK(stopped.load() == 3));
}

TEST_CASE("a receive that never matches times out with a clear error", "[lab5][plumbing]") {
  require_error([] {
    run_simulated(2, [](Communicator& c) {
      Tensor t = Tensor::ones({2});
      if (c.rank() == 0) c.recv(t, 1, 9);
      else c.recv(t, 0, 9);  // both wait: a deadlock becomes an error
    }, quick(200));
  }, "timed out after 200 ms waiting for a message from rank");
  require_error([] {
    run_simulated(2, [](Communicator& c) {
      Tensor t = Tensor::ones({2});
      if (c.rank() == 0) c.recv(t, 1, 3);  // rank 1 returns without sending
    }, quick(60000));
  }, "rank 1 returned without sending it");
  require_error([] {
    run_simulated(3, [](Communicator& c) {
      Tensor t = Tensor::ones({2});
      if (c.rank() != 1) (void)c.split(0, 0);  // rank 1 skips the collective
    }, quick(60000));
  }, "returned without sending");
}

TEST_CASE("not implemented passes through run_simulated as NotImplemented", "[lab5][plumbing]") {
  bool caught = false;
  std::string what = "nothing thrown";
  try {
    run_simulated(2, [](Communicator& c) {
      if (c.rank() == 1) MLS_TODO("lab5: example");
      // Rank 0 waits in given plumbing (a receive), not in a collective a handout has not written.
      Tensor t = Tensor::ones({2});
      c.recv(t, 1);
    }, quick());
  } catch (const NotImplemented& e) {
    caught = std::string(e.what()).find("not implemented: lab5: example") != std::string::npos;
    what = mls::testing::error_observation(e.what(), "not implemented: lab5: example");
  }
  mls::testing::observe("the NotImplemented that reached the caller", what);
  CHECK(caught);
}

TEST_CASE("step_over_max_floor: the overlap efficiency's formula solved for the step", "[lab5][plumbing]") {
  // independent reference: t_step = t_compute + t_comm - e * min, over max
  Rng rng(2030, "step_over_max_floor");
  for (int k = 0; k < 50; ++k) {
    const double tc = rng.uniform(1e-3, 1.0), tm = rng.uniform(1e-3, 1.0), e = rng.uniform(0.0, 1.0);
    const double t_step = tc + tm - e * std::min(tc, tm);
    CHECK(step_over_max_floor(tc, tm, e) == Approx(t_step / std::max(tc, tm)).epsilon(1e-12));
    // the efficiency of that step is e again
    CHECK((tc + tm - t_step) / std::min(tc, tm) == Approx(e).margin(1e-9));
  }
  // the arithmetic: at t_comm = t_compute it is 2 - e; 1.15 needs e >= 0.85
  CHECK(step_over_max_floor(0.5, 0.5, 0.6) == Approx(1.4));
  CHECK(step_over_max_floor(2.0, 2.0, 0.85) == Approx(1.15));
  CHECK(step_over_max_floor(1.0, 1.0, 1.0) == Approx(1.0));
  CHECK(step_over_max_floor(2.0, 1.0, 1.0) == Approx(1.0));  // all of the shorter hidden: the longer alone
  CHECK(step_over_max_floor(2.0, 1.0, 0.0) == Approx(1.5));  // nothing hidden: the sum
  mls::testing::require_error([] { step_over_max_floor(0.0, 1.0, 0.5); }, "step_over_max_floor: t_compute = 0 s");
  mls::testing::require_error([] { step_over_max_floor(1.0, -1.0, 0.5); }, "t_comm = -1 s, expected both > 0");
  mls::testing::require_error([] { step_over_max_floor(1.0, 1.0, 1.5); }, "efficiency = 1.5, expected 0 <= efficiency <= 1");
  mls::testing::require_error([] { step_over_max_floor(1.0, 1.0, -0.1); }, "efficiency = -0.1");
}

// ---- determinism and shared state ------------------------------------------------------------

TEST_CASE("same seed, bit-identical results and modelled times across runs", "[lab5][sim]") {
  auto once = [] {
    std::vector<std::vector<double>> out(7);
    auto rep = run_simulated(7, [&](Communicator& c) {
      Rng rng = rank_rng(42, c);
      Tensor t = Tensor::randn({1001}, rng);
      c.allreduce(t, ReduceOp::Sum, Algo::Ring);
      Tensor u = Tensor::randn({333}, rng);
      c.allreduce(u, ReduceOp::Avg, Algo::Rabenseifner);
      out[c.rank()] = concat({t, u}).to_vector<double>();
    });
    return std::make_pair(out, rep.modelled_seconds);
  };
  auto a = once(), b = once();
  MLS_OBSERVE(a.first[0], tol_of(DType::Float32, 7));
  MLS_OBSERVE(a.second, {1e-9, 0.0});
  CHECK(a.first == b.first);
  CHECK(a.second == b.second);
  for (int r = 1; r < 7; ++r) CHECK(a.first[r] == a.first[0]);
}

TEST_CASE("8 ranks train an MLP at once: shared pool, allocator, RNG streams, grad mode", "[lab5][sim]") {
  // Data parallel by hand: every rank has the same initial weights (seed), its own data stream,
  // averages gradients with allreduce and takes an SGD step; the weights stay identical.
  namespace autodiff = mls::autodiff;
  ThreadCountGuard threads(2);
  auto train = [] {
    std::vector<std::vector<double>> w(8);
    run_simulated(8, [&](Communicator& c) {
      Rng init(7, "init");
      auto net = autodiff::nn::mlp({6, 16, 1}, init);
      Rng data = rank_rng(11, c);
      for (int step = 0; step < 4; ++step) {
        Tensor x = Tensor::randn({32, 6}, data);
        Tensor y = Tensor::randn({32, 1}, data);
        for (auto& p : net->parameters()) p.zero_grad();
        autodiff::Var loss = autodiff::mse_loss(net->forward(autodiff::Var(x)), autodiff::Var(y));
        loss.backward();
        for (auto& p : net->parameters()) {
          Tensor g = p.grad().value().contiguous();
          c.allreduce(g, ReduceOp::Avg);
          Tensor v = p.value();  // a handle on the parameter's storage
          v -= g * 0.1;
        }
        {
          autodiff::NoGradGuard no_grad;  // thread-local: must not leak to the other ranks
          (void)net->forward(autodiff::Var(x));
        }
      }
      std::vector<double> flat;
      for (auto& p : net->parameters()) {
        auto v = p.value().to_vector<double>();
        flat.insert(flat.end(), v.begin(), v.end());
      }
      w[c.rank()] = flat;
    });
    return w;
  };
  auto a = train();
  MLS_OBSERVE(a[0], {1e-5, 1e-6});
  for (int r = 1; r < 8; ++r) CHECK(a[r] == a[0]);
  CHECK(train() == a);
}

TEST_CASE("make_sim_world: transports driven by the caller's own threads", "[lab5][plumbing]") {
  auto ts = make_sim_world(2);
  Communicator a(std::move(ts[0])), b(std::move(ts[1]));
  mls::testing::observe("backend", std::string(a.backend()));
  MLS_ORACLE_CHECK(CHECK(a.backend() == "sim"));
  std::thread th([&] { b.send(Tensor::from({1.f, 2.f}), 0); });
  Tensor t = Tensor::empty({2});
  a.recv(t, 1);
  th.join();
  MLS_OBSERVE_VALUES(t);
  MLS_ORACLE_CHECK(CHECK(t.to_vector<float>() == std::vector<float>{1.f, 2.f}));
}

TEST_CASE("ping_pong: iters round trips between ranks 0 and 1, other ranks idle", "[lab5][plumbing]") {
  // Catch2's assertions are not thread-safe: each rank keeps its result, this thread checks them.
  std::vector<float> first(3, -1.0f);
  auto rep = run_simulated(3, [&first](Communicator& c) {
    Tensor t = Tensor::full({5}, static_cast<double>(c.rank()), DType::Float32);
    ping_pong(c, t, 4);
    first[c.rank()] = t.to_vector<float>()[0];
  });
  // Rank 1 last received rank 0's tensor, rank 0 got it back; rank 2 kept its own.
  MLS_OBSERVE(first);
  MLS_ORACLE_CHECK(CHECK(first == std::vector<float>{0.0f, 0.0f, 2.0f}));
  for (int r : {0, 1, 2}) {
    mls::testing::observe("messages sent, received, bytes sent", std::vector<std::int64_t>{
        static_cast<std::int64_t>(rep.traffic[r].total.messages_sent), static_cast<std::int64_t>(rep.traffic[r].total.messages_recv),
        static_cast<std::int64_t>(rep.traffic[r].total.bytes_sent)});
  }
  MLS_ORACLE_CHECK(for (int r : {0, 1}) {
    CHECK(rep.traffic[r].total.messages_sent == 4);
    CHECK(rep.traffic[r].total.messages_recv == 4);
    CHECK(rep.traffic[r].total.bytes_sent == 4 * 5 * 4);
  } CHECK(rep.traffic[2].total.messages_sent == 0));
}
