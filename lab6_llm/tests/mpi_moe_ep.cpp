// Expert parallelism on the MPI backend (CTest's lab6:mpi:zero:np2 runs this program under lab 5's
// run_mpi.sh; started directly, a test case re-runs itself under mpirun -np 2): EP over 2
// processes equals the single-rank fused MoE (computed on every rank) over 10 SGD steps.
#include <catch2/catch.hpp>
#include <filesystem>

#include "mls/llm/checkpoint.hpp"
#include "moe_ep_testing.hpp"
#include "mls/parallel/mpi.hpp"
#include "mls/testing.hpp"
#include "mpi_launch.hpp"

using namespace mls;
using namespace mls::llm;
using namespace mls::parallel;
using namespace llm_test;

TEST_CASE("mpi expert parallelism: EP on 2 processes equals the single-rank MoE over 10 SGD steps",
          "[lab6][mpi][moe_ep_mpi]") {
  MLS_MPI_TEST(2);
  Communicator c = mpi_world();
  for (const std::int64_t K : {1, 2}) {
    const GPTConfig cfg = ep_config(4, K, 0.75);
    const std::int64_t B = 2, T = 12, N = B * T, C = cfg.n_embd, Nl = N / c.size();
    Rng rng(60 + static_cast<std::uint64_t>(K), "moe-ep-mpi");  // the same on every rank
    const GPTParams init = random_params(cfg, rng);
    std::vector<float> resid(static_cast<std::size_t>(N * C)), W(resid.size());
    for (auto& v : resid) v = static_cast<float>(rng.normal(0.0, 1.0));
    for (auto& v : W) v = static_cast<float>(rng.normal(0.0, 1.0));
    const MoeSteps single = single_moe_steps(cfg, init, {resid}, {W}, B, T);
    const std::int64_t r = c.rank();
    const MoeSteps ep = ep_moe_steps(cfg, c, init, single.x0.data() + r * Nl * C, W.data() + r * Nl * C, Nl);
    INFO("K " << K << " rank " << c.rank());
    check_ep_rank(cfg, ep, &single, c.rank(), c.size(), Nl);
  }
}

TEST_CASE("mpi expert parallelism x data parallelism: EP 2 x DP 2 on a 2-D mesh of 4 processes",
          "[lab6][mpi][moe_ep_mpi]") {
  // CTest's lab6:mpi:moe_ep:np4 runs this case under run_mpi.sh 4 (the np2 run passes over it).
  // World rank w = d * 2 + e: EP groups {0, 1} and {2, 3} (split by d), DP groups {0, 2} and
  // {1, 3} (split by e), as the simulated-rank test; the reference (every rank computes it): the
  // single-rank MoE on each replica's tokens, the two gradients summed.
  MLS_MPI_TEST(4);
  Communicator world = mpi_world();
  if (world.size() != 4) {
    SUCCEED("this case runs on 4 processes (lab6:mpi:moe_ep:np4)");
    return;
  }
  const int EP = 2, DP = 2;
  const GPTConfig cfg = ep_config(4, 2, 0.75);
  const std::int64_t B = 2, T = 12, N = B * T, C = cfg.n_embd, Nl = N / EP;
  Rng rng(50, "moe-ep-dp");
  const GPTParams init = random_params(cfg, rng);
  const DpInputs in = dp_inputs(DP, N * C, rng);
  const std::vector<std::vector<float>>&resids = in.resids, &Ws = in.Ws;
  const MoeSteps single = single_moe_steps(cfg, init, resids, Ws, B, T);
  const int w = world.rank(), d = w / EP, e = w % EP;
  Communicator ep_comm = world.split(d, e), dp_comm = world.split(e, d);
  const std::int64_t row0 = d * N + e * Nl;
  MoeSteps mine = ep_moe_steps(cfg, ep_comm, init, single.x0.data() + row0 * C,
                               Ws[static_cast<std::size_t>(d)].data() + e * Nl * C, Nl, &dp_comm);
  // The losses and drops are per EP group; the reference sums both replicas': add the other's
  // (the same rank of the other EP group: a sum over the DP group).
  Tensor ld = Tensor::zeros({2 * kEpSteps}, DType::Float64);
  for (int s = 0; s < kEpSteps; ++s) {
    ld.data<double>()[s] = mine.losses[static_cast<std::size_t>(s)];
    ld.data<double>()[kEpSteps + s] = mine.dropped[static_cast<std::size_t>(s)];
  }
  dp_comm.allreduce(ld, ReduceOp::Sum);
  for (int s = 0; s < kEpSteps; ++s) {
    mine.losses[static_cast<std::size_t>(s)] = ld.data<double>()[s];
    mine.dropped[static_cast<std::size_t>(s)] = ld.data<double>()[kEpSteps + s];
  }
  INFO("world rank " << w);
  check_ep_rank(cfg, mine, &single, e, EP, Nl, row0);
}

TEST_CASE("mpi expert parallelism in the GPT: train --ep 2 on 2 processes equals one rank over the union batch",
          "[lab6][mpi][moe_ep_mpi]") {
  MLS_MPI_TEST(2);
  Communicator c = mpi_world();
  if (c.size() != 2) {
    SUCCEED("this case runs on 2 processes (lab6:mpi:zero:np2)");
    return;
  }
  EpRunOptions o;
  o.cfg.n_layer = 2, o.cfg.n_head = 2, o.cfg.n_embd = 16, o.cfg.block_size = 8, o.cfg.vocab_size = 13;
  o.cfg.moe_experts = 4, o.cfg.moe_top_k = 2, o.cfg.moe_every = 1, o.cfg.capacity_factor = 1.0;
  o.cfg.moe_aux_coef = 0.05, o.cfg.moe_z_coef = 0.01;
  o.batch = 2, o.context = 8, o.steps = 10, o.lr = 3e-3, o.seed = 7;
  const EpRunReport ep = run_ep(c, o);
  EpRunOptions whole = o;
  whole.batch = 2 * o.batch;
  Communicator self = c.split(c.rank(), 0);
  const EpRunReport single = run_ep(self, whole);
  std::int64_t dropped = 0;
  for (auto d : ep.dropped) dropped += d;
  CHECK(dropped > 0);
  CHECK(ep.dropped == single.dropped);
  for (std::size_t s = 0; s < ep.losses.size(); ++s) CHECK(ep.losses[s] == Approx(single.losses[s]).epsilon(1e-5));
  CHECK(rel_err(ep.final_params.data(), single.final_params.data(), static_cast<std::int64_t>(ep.final_params.size())) < 5e-5);
  // Each process holds its own experts only; accumulation and recompute take the same step; the
  // checkpoint gathers every expert into rank 0's file, which one rank resumes from.
  CHECK(ep.expert_floats * 2 == single.expert_floats);
  CHECK(ep.param_floats - ep.expert_floats == single.param_floats - single.expert_floats);
  EpRunOptions mixed = o;
  mixed.batch = 4, mixed.accum = 2, mixed.remat = RecomputeKind::Sqrt, mixed.steps = 6;
  mixed.save = mls::testing::test_temp_dir() + "/ep_mpi.bin";
  if (c.rank() == 0) std::filesystem::remove(mixed.save);
  c.barrier();
  const EpRunReport em = run_ep(c, mixed);
  EpRunOptions mixed1 = mixed;
  mixed1.batch = 8, mixed1.save.clear();
  const EpRunReport sm = run_ep(self, mixed1);
  for (std::size_t s = 0; s < em.losses.size(); ++s) CHECK(em.losses[s] == Approx(sm.losses[s]).epsilon(1e-5));
  CHECK(rel_err(em.final_params.data(), sm.final_params.data(), static_cast<std::int64_t>(sm.final_params.size())) < 5e-5);
  if (c.rank() == 0) {
    const Checkpoint ck = load_checkpoint(mixed.save);
    CHECK(ck.step == 6);
    CHECK(get_params(ck, "") == em.final_params);
  }
}
