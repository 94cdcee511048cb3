#pragma once
// Lab 6, ZeRO: what zero_partition.cpp and zero.cpp (the engine) share. Not installed.
#include <cstdint>

#include "mls/llm/config.hpp"

namespace mls::llm::zero_detail {

/// Per-layer size of tensor k (kLn1w..kFcprojb) of config.hpp's layout; whole size for the others.
inline std::int64_t tensor_size(const GPTConfig& cfg, int k) {
  const auto shapes = param_shapes(cfg);
  std::int64_t n = 1;
  for (auto d : shapes[static_cast<std::size_t>(k)]) n *= d;
  return n;
}

}  // namespace mls::llm::zero_detail
