// Expert parallelism on the MPI backend (CTest's lab6:mpi:zero:np2 runs this program under lab 5's
// run_mpi.sh; started directly, a test case re-runs itself under mpirun -np 2): EP over 2
// processes equals the single-rank fused MoE (computed on every rank) over 10 SGD steps.
#include <catch2/catch.hpp>

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
