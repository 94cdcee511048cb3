#pragma once
// Helpers shared by lab 6's tests: random configs, parameters and batches.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mls/common/rng.hpp"
#include "mls/llm/data.hpp"
#include "mls/llm/model.hpp"
#include "mls/llm/remat.hpp"
#include "mls/observe.hpp"

namespace llm_test {

using namespace mls::llm;

inline GPTConfig random_config(mls::Rng& rng) {
  GPTConfig c;
  c.n_layer = rng.randint(1, 3);
  c.n_head = rng.randint(1, 4);
  c.n_embd = c.n_head * rng.randint(2, 7);
  c.block_size = rng.randint(2, 9);
  c.vocab_size = rng.randint(3, 17);
  return c;
}

/// GPT-2 init plus noise on every parameter (so biases and layernorm weights matter too).
inline GPTParams random_params(const GPTConfig& cfg, mls::Rng& rng) {
  GPTParams p = init_params(cfg, rng.next_u64());
  for (auto& x : p.vec()) x += static_cast<float>(rng.normal(0.0, 0.1));
  return p;
}

inline Batch random_batch(const GPTConfig& cfg, std::int64_t B, std::int64_t T, mls::Rng& rng,
                          bool with_mask = true) {
  Batch b;
  b.B = B;
  b.T = T;
  for (std::int64_t i = 0; i < B * T; ++i) {
    b.inputs.push_back(static_cast<std::int32_t>(rng.randint(0, cfg.vocab_size)));
    b.targets.push_back(static_cast<std::int32_t>(rng.randint(0, cfg.vocab_size)));
    b.mask.push_back(with_mask ? (rng.uniform_float() < 0.7f ? 1.f : 0.f) : 1.f);
  }
  b.mask[0] = 1.f;
  return b;
}

/// The sort task: d1..d6 '|' s1..s6 (tokens 0-9 digits, 10 the separator); the loss counts the
/// sorted digits only. inputs = seq[0:12], targets = seq[1:13].
constexpr int kSortN = 6, kSortV = 11, kSortT = 2 * kSortN;
inline Batch sort_batch(std::int64_t B, mls::Rng& rng) {
  Batch b;
  b.B = B;
  b.T = kSortT;
  for (std::int64_t i = 0; i < B; ++i) {
    std::vector<std::int32_t> d(kSortN);
    for (auto& x : d) x = static_cast<std::int32_t>(rng.randint(0, 10));
    std::vector<std::int32_t> s = d;
    std::sort(s.begin(), s.end());
    std::vector<std::int32_t> seq = d;
    seq.push_back(10);
    seq.insert(seq.end(), s.begin(), s.end());
    for (int t = 0; t < kSortT; ++t) {
      b.inputs.push_back(seq[t]);
      b.targets.push_back(seq[t + 1]);
      b.mask.push_back(t >= kSortN ? 1.f : 0.f);
    }
  }
  return b;
}

/// max |a - b| / (max |b| + tiny) over a range.
inline double rel_err(const float* a, const float* b, std::int64_t n) {
  double md = 0, mb = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    md = std::max(md, std::abs(static_cast<double>(a[i]) - b[i]));
    mb = std::max(mb, std::abs(static_cast<double>(b[i])));
  }
  return md / (mb + 1e-12);
}

/// LAB6_WANT(x): an oracle's value where the build has oracles, nullptr in the grading build
/// (where `x` is never computed): the `want` of observe_rel.
#ifdef MLS_GRADED_BUILD
#define LAB6_WANT(...) nullptr
#else
#define LAB6_WANT(...) (__VA_ARGS__)
#endif

/// Records `got` (n floats) with the tolerance that rel_err(got, want, n) < tol accepts, on both
/// sides: absolute, 2 tol max |want|. `want` is an oracle's value (LAB6_WANT): in the grading
/// build it is nullptr and the tolerance 0 (the grader uses the reference build's).
inline void observe_rel(const std::string& label, const float* got, const float* want, std::int64_t n, double tol) {
  if (!mls::testing::observing()) return;
  double mb = 0;
  for (std::int64_t i = 0; want != nullptr && i < n; ++i) mb = std::max(mb, std::abs(static_cast<double>(want[i])));
  if (want == nullptr) tol = 0;
  mls::testing::observe(label, std::vector<float>(got, got + n), {0.0, 2 * tol * (mb + 1e-12)});
}

/// Every recompute plan of n layers (2^(n-1) of them): bit i of the mask set = a segment starts
/// at layer i+1.
inline std::vector<RematPlan> all_plans(std::int64_t n) {
  std::vector<RematPlan> out;
  for (std::int64_t mask = 0; mask < (std::int64_t{1} << (n - 1)); ++mask) {
    RematPlan p{n, {0}};
    for (std::int64_t i = 1; i < n; ++i)
      if (mask >> (i - 1) & 1) p.starts.push_back(i);
    out.push_back(p);
  }
  return out;
}

}  // namespace llm_test
