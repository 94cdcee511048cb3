#pragma once
// The ZeRO run every lab 6 ZeRO test starts from (simulated ranks, MPI processes, NCCL).
#include <cstdint>

#include "mls/llm/zero.hpp"

namespace llm_test {

/// `nano` with an odd vocabulary V (37: units that no N > 1 divides; 48: every unit divides by 2
/// and 4), B = 2, T = 8, lr 3e-3, `steps` steps at ZeRO `stage` in precision `p`.
inline mls::llm::ZeroRunOptions zero_run_options(int stage, mls::llm::Precision p, std::int64_t steps = 10,
                                                 std::int64_t V = 37) {
  mls::llm::ZeroRunOptions o;
  o.cfg = mls::llm::config_by_name("nano");
  o.cfg.vocab_size = V;
  o.zero.stage = stage;
  o.zero.precision = p;
  o.batch = 2;
  o.context = 8;
  o.steps = steps;
  o.lr = 3e-3;
  return o;
}

}  // namespace llm_test
