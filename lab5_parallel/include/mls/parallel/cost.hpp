#pragma once
/// The α-β-γ cost model of collectives: the closed forms in one place, used by
/// `mls-collectives table`, by Algo::Auto (Communicator::choose) and checked against the
/// simulated clock in the tests.
///
/// A message of m bytes costs α + m·β; reducing k elements costs k·γ. For a collective on
/// n bytes (n/e elements of e bytes) over N ranks, with L = ⌈log2 N⌉, p = 2^⌊log2 N⌋:
///   ring allreduce          2(N−1)·α + 2(N−1)/N·n·β + (N−1)/N·(n/e)·γ
///   recursive doubling      log2 p·(α + n·β + (n/e)·γ)            (+ 2(α + n·β) + (n/e)·γ if N ≠ p)
///   Rabenseifner            2·log2 p·α + 2(p−1)/p·n·β + (p−1)/p·(n/e)·γ   (+ same fold if N ≠ p)
///   binomial broadcast      L·(α + n·β);      linear broadcast  (N−1)·(α + n·β)
///   binomial reduce         L·(α + n·β + (n/e)·γ)
///   ring allgather          (N−1)·α + (N−1)/N·n·β     (n = bytes of the whole result)
///   ring reduce-scatter     (N−1)·α + (N−1)/N·(n·β + (n/e)·γ)   (n = bytes of the whole input)
///   pairwise all-to-all     (N−1)·α + (N−1)/N·n·β     (n = bytes each rank holds)
///   linear gather/scatter   (N−1)·α + (N−1)/N·n·β     (n = bytes of the whole result)
#include <cstdint>
#include <string>
#include <vector>

namespace mls::parallel {

/// The α-β-γ cost model: a message of n bytes costs alpha + n * beta seconds; reducing k
/// elements costs k * gamma seconds. Defaults come from `mls-collectives calibrate` (measured
/// on the development machine); override them with set_cost_model or the tools' flags.
struct CostModel {
  double alpha = 2e-6;     // seconds per message
  double beta = 1e-10;     // seconds per byte
  double gamma = 2.5e-10;  // seconds per reduced element

  /// Reads {"alpha": .., "beta": .., "gamma": ..} (the output of `mls-collectives calibrate`).
  static CostModel load(const std::string& json_path);
  std::string to_json() const;
};

/// One row of the model: what a collective algorithm costs on one rank.
struct CostEstimate {
  std::string collective, algo;
  double seconds = 0;          // modelled time
  std::int64_t messages = 0;   // messages sent by the busiest rank
  double bytes_per_rank = 0;   // bytes sent by the busiest rank
  int steps = 0;               // communication rounds
  bool valid = true;           // false when the algorithm does not apply
};

/// The closed form of `algo` ("ring", "tree", "linear", "recursive_doubling", "rabenseifner",
/// "pairwise") for `collective` ("allreduce", "broadcast", "reduce", "allgather",
/// "reduce_scatter", "all_to_all", "gather", "scatter") on `bytes` bytes of `elem_bytes`-byte
/// elements over `n` ranks.
CostEstimate estimate(const CostModel& m, const std::string& collective, const std::string& algo, int n,
                      std::int64_t bytes, int elem_bytes = 4);
/// The algorithms a collective has (in a fixed order).
std::vector<std::string> algorithms_of(const std::string& collective);
/// The cheapest algorithm of `collective` under `m` (ties: the first in algorithms_of order).
std::string cheapest(const CostModel& m, const std::string& collective, int n, std::int64_t bytes,
                     int elem_bytes = 4);

}  // namespace mls::parallel
