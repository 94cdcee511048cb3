// all_to_allv (MPI_Alltoallv): variable counts per destination, on N = 1..8 simulated ranks, every
// dtype, empty chunks included; traffic equal to the theory; counts that disagree between ranks
// and bad counts are mls::Errors.
#include <catch2/catch.hpp>

#include "lab5_testing.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using namespace mls::parallel::testing;

namespace {

/// counts[r][s]: what rank r sends rank s (0..5, zeros included), from a seed.
std::vector<std::vector<std::int64_t>> random_counts(int n, std::uint64_t seed) {
  Rng rng(seed, "all_to_allv-counts");
  std::vector<std::vector<std::int64_t>> c(static_cast<std::size_t>(n), std::vector<std::int64_t>(static_cast<std::size_t>(n)));
  for (auto& row : c)
    for (auto& x : row) x = rng.randint(0, 6);
  return c;
}

std::vector<std::int64_t> column(const std::vector<std::vector<std::int64_t>>& c, int r) {
  std::vector<std::int64_t> col;
  for (const auto& row : c) col.push_back(row[static_cast<std::size_t>(r)]);
  return col;
}

std::int64_t sum(const std::vector<std::int64_t>& v) {
  std::int64_t s = 0;
  for (auto x : v) s += x;
  return s;
}

}  // namespace

TEST_CASE("all_to_allv pairwise: rank r receives rank s's chunk r, N = 1..8, uneven and empty chunks",
          "[lab5][all_to_allv]") {
  for (int n = 1; n <= 8; ++n)
    for (DType dt : all_dtypes())
      for (std::uint64_t seed : {1u, 2u}) {
        const auto counts = random_counts(n, seed * 100 + static_cast<std::uint64_t>(n));
        std::vector<Tensor> got(static_cast<std::size_t>(n));
        std::vector<Traffic> traffic(static_cast<std::size_t>(n));
        run_simulated(n, [&](Communicator& c) {
          const auto& send = counts[static_cast<std::size_t>(c.rank())];
          got[static_cast<std::size_t>(c.rank())] =
              c.all_to_allv(input_of(c.rank(), sum(send), dt), send, column(counts, c.rank()));
          traffic[static_cast<std::size_t>(c.rank())] = c.traffic();
        });
        for (int r = 0; r < n; ++r) {
          INFO("N " << n << " dtype " << dtype_name(dt) << " seed " << seed << " rank " << r);
          mls::testing::observe_values("all_to_allv", got[static_cast<std::size_t>(r)]);
          const auto& t = traffic[static_cast<std::size_t>(r)].by_op["all_to_allv"];
          mls::testing::observe("all_to_allv bytes sent, rank " + std::to_string(r), t.bytes_sent);
          mls::testing::observe("all_to_allv bytes received, rank " + std::to_string(r), t.bytes_recv);
          mls::testing::observe("all_to_allv messages sent, rank " + std::to_string(r), t.messages_sent);
          // The oracle: rank s's input, chunk r, for s in order; the theory's traffic.
          MLS_ORACLE(std::vector<double> want; std::int64_t sent = 0, recv = 0;
                     for (int s = 0; s < n; ++s) {
                       const auto& cs = counts[static_cast<std::size_t>(s)];
                       const auto src = input_of(s, sum(cs), dt).to_vector<double>();
                       std::int64_t off = 0;
                       for (int d = 0; d < r; ++d) off += cs[static_cast<std::size_t>(d)];
                       want.insert(want.end(), src.begin() + off, src.begin() + off + cs[static_cast<std::size_t>(r)]);
                       if (s != r) sent += counts[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)],
                                   recv += cs[static_cast<std::size_t>(r)];
                     } const std::int64_t item = static_cast<std::int64_t>(itemsize(dt));)
          MLS_ORACLE_CHECK(CHECK(got[static_cast<std::size_t>(r)].to_vector<double>() == want);
                           CHECK(t.bytes_sent == sent * item); CHECK(t.bytes_recv == recv * item);
                           CHECK(t.messages_sent == n - 1); CHECK(t.calls == 1));
        }
      }
}

TEST_CASE("all_to_allv: counts that disagree between ranks and bad counts are errors", "[lab5][all_to_allv]") {
  // Rank 0 sends 2 elements to rank 1, which expects 3.
  mls::testing::require_error(
      [] {
        run_simulated(2, [](Communicator& c) {
          if (c.rank() == 0)
            (void)c.all_to_allv(Tensor::ones({3}), {1, 2}, {1, 1});
          else
            (void)c.all_to_allv(Tensor::ones({2}), {1, 1}, {3, 1});
        });
      },
      "all_to_allv: the counts disagree between ranks");
  mls::testing::require_error([] { run_simulated(2, [](Communicator& c) { (void)c.all_to_allv(Tensor::ones({3}), {1, 1}, {1, 1}); }); },
                "all_to_allv: the send counts sum to 2 on rank");
  mls::testing::require_error([] { run_simulated(2, [](Communicator& c) { (void)c.all_to_allv(Tensor::ones({2}), {1, 1, 0}, {1, 1}); }); },
                "all_to_allv: 3 send counts and 2 receive counts, expected one per rank (2)");
  mls::testing::require_error([] { run_simulated(2, [](Communicator& c) { (void)c.all_to_allv(Tensor::ones({2}), {3, -1}, {1, 1}); }); },
                "all_to_allv: send_counts[1] = -1 on rank");
  mls::testing::require_error([] { run_simulated(2, [](Communicator& c) { (void)c.all_to_allv(Tensor::ones({2, 1}), {1, 1}, {1, 1}); }); },
                "all_to_allv: the tensor must be 1-D, got shape [2, 1]");
  mls::testing::require_error([] { run_simulated(2, [](Communicator& c) { (void)c.all_to_allv(Tensor::ones({2}), {1, 1}, {1, 1}, Algo::Native); }); },
                "all_to_allv: the sim backend has no native all_to_allv");
}
