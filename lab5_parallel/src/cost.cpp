// The α-β-γ closed forms (see cost.hpp): one place, used by the table, Algo::Auto and the tests.
#include "mls/parallel/cost.hpp"

#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mls/common/error.hpp"

namespace mls::parallel {

CostModel CostModel::load(const std::string& json_path) {
  std::ifstream f(json_path);
  MLS_CHECK(f.good(), "CostModel::load: cannot open '", json_path, "'");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    fail("CostModel::load: '", json_path, "' is not JSON: ", e.what());
  }
  CostModel m;
  for (auto [key, field] : {std::pair{"alpha", &m.alpha}, std::pair{"beta", &m.beta}, std::pair{"gamma", &m.gamma}}) {
    MLS_CHECK(j.contains(key) && j[key].is_number(), "CostModel::load: '", json_path, "' has no number '", key, "'");
    *field = j[key].get<double>();
    MLS_CHECK(*field >= 0, "CostModel::load: ", key, " must be >= 0, got ", *field);
  }
  return m;
}

std::string CostModel::to_json() const {
  nlohmann::json j = {{"alpha", alpha}, {"beta", beta}, {"gamma", gamma}};
  return j.dump(2);
}

std::vector<std::string> algorithms_of(const std::string& c) {
  if (c == "allreduce") return {"ring", "recursive_doubling", "rabenseifner"};
  if (c == "broadcast") return {"tree", "linear"};
  if (c == "reduce") return {"tree"};
  if (c == "allgather" || c == "reduce_scatter") return {"ring"};
  if (c == "all_to_all") return {"pairwise"};
  if (c == "gather" || c == "scatter") return {"linear"};
  fail("cost: unknown collective '", c,
       "', expected allreduce, broadcast, reduce, allgather, reduce_scatter, all_to_all, gather or scatter");
}

CostEstimate estimate(const CostModel& m, const std::string& c, const std::string& algo, int n, std::int64_t bytes,
                      int elem_bytes) {
  MLS_CHECK(n >= 1, "cost: the number of ranks must be >= 1, got ", n);
  MLS_CHECK(bytes >= 0, "cost: bytes must be >= 0, got ", bytes);
  MLS_CHECK(elem_bytes >= 1, "cost: elem_bytes must be >= 1, got ", elem_bytes);
  bool known = false;
  for (const auto& a : algorithms_of(c)) known = known || a == algo;
  MLS_CHECK(known, "cost: ", c, " has no algorithm '", algo, "'");
  CostEstimate e;
  e.collective = c;
  e.algo = algo;
  const double N = n, B = static_cast<double>(bytes), E = B / elem_bytes;
  const int L = n > 1 ? std::bit_width(static_cast<unsigned>(n - 1)) : 0;  // ⌈log2 N⌉
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int lp = std::bit_width(static_cast<unsigned>(p)) - 1;  // log2 p
  const bool fold = p != n;
  auto msg = [&](double b) { return m.alpha + b * m.beta; };
  if (n == 1) return e;  // nothing moves
  if (c == "allreduce" && algo == "ring") {
    e.steps = 2 * (n - 1);
    e.messages = e.steps;
    e.bytes_per_rank = 2 * (N - 1) / N * B;
    e.seconds = 2 * (N - 1) * m.alpha + 2 * (N - 1) / N * B * m.beta + (N - 1) / N * E * m.gamma;
  } else if (c == "allreduce" && (algo == "recursive_doubling" || algo == "rabenseifner")) {
    if (algo == "recursive_doubling") {
      e.steps = lp;
      e.bytes_per_rank = lp * B;
      e.seconds = lp * (msg(B) + E * m.gamma);
    } else {
      e.steps = 2 * lp;
      e.bytes_per_rank = 2 * (p - 1.0) / p * B;
      e.seconds = 2 * lp * m.alpha + 2 * (p - 1.0) / p * B * m.beta + (p - 1.0) / p * E * m.gamma;
    }
    if (fold) {
      e.steps += 2;
      e.bytes_per_rank += B;  // an odd rank of the fold receives once and sends once
      e.seconds += 2 * msg(B) + E * m.gamma;
    }
    e.messages = e.steps;
  } else if (c == "broadcast" && algo == "tree") {
    e.steps = L;
    e.messages = L;
    e.bytes_per_rank = L * B;
    e.seconds = L * msg(B);
  } else if (c == "broadcast" && algo == "linear") {
    e.steps = n - 1;
    e.messages = n - 1;
    e.bytes_per_rank = (N - 1) * B;
    e.seconds = (N - 1) * msg(B);
  } else if (c == "reduce") {
    e.steps = L;
    e.messages = 1;
    e.bytes_per_rank = B;
    e.seconds = L * (msg(B) + E * m.gamma);
  } else if (c == "allgather" || c == "all_to_all" || c == "gather" || c == "scatter") {
    e.steps = n - 1;
    e.messages = n - 1;
    e.bytes_per_rank = (N - 1) / N * B;
    e.seconds = (N - 1) * m.alpha + (N - 1) / N * B * m.beta;
  } else if (c == "reduce_scatter") {
    e.steps = n - 1;
    e.messages = n - 1;
    e.bytes_per_rank = (N - 1) / N * B;
    e.seconds = (N - 1) * m.alpha + (N - 1) / N * (B * m.beta + E * m.gamma);
  }
  return e;
}

std::string cheapest(const CostModel& m, const std::string& c, int n, std::int64_t bytes, int elem_bytes) {
  std::string best;
  double t = std::numeric_limits<double>::infinity();
  for (const auto& a : algorithms_of(c)) {
    CostEstimate e = estimate(m, c, a, n, bytes, elem_bytes);
    if (e.valid && e.seconds < t) {
      t = e.seconds;
      best = a;
    }
  }
  return best;
}

}  // namespace mls::parallel
