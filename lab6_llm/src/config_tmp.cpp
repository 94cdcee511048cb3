// TEMPORARY (lab6core): minimal GPTConfig helpers until the data helper's config.cpp lands.
// Deleted on merge.
#include "mls/common/error.hpp"
#include "mls/llm/config.hpp"

namespace mls::llm {

void GPTConfig::validate() const {
  MLS_CHECK(n_layer > 0, "GPTConfig: n_layer = ", n_layer, ", expected > 0");
  MLS_CHECK(n_head > 0, "GPTConfig: n_head = ", n_head, ", expected > 0");
  MLS_CHECK(n_embd > 0 && n_embd % n_head == 0, "GPTConfig: n_embd = ", n_embd,
            ", expected > 0 and divisible by n_head = ", n_head);
  MLS_CHECK(block_size > 0, "GPTConfig: block_size = ", block_size, ", expected > 0");
  MLS_CHECK(vocab_size > 0, "GPTConfig: vocab_size = ", vocab_size, ", expected > 0");
}

GPTConfig config_by_name(const std::string& name) {
  if (name == "nano") return GPTConfig{3, 3, 48, 32, 0};
  if (name == "small") return GPTConfig{4, 4, 128, 64, 0};
  fail("config_by_name: unknown config '", name, "' (known: nano, small)");
}

const std::array<const char*, kNumParamTensors>& param_names() {
  static const std::array<const char*, kNumParamTensors> n = {
      "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
      "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
  return n;
}

std::array<Shape, kNumParamTensors> param_shapes(const GPTConfig& c) {
  const auto L = c.n_layer, C = c.n_embd;
  return {Shape{c.vocab_size, C}, Shape{c.block_size, C}, Shape{L, C}, Shape{L, C},
          Shape{L, 3 * C, C}, Shape{L, 3 * C}, Shape{L, C, C}, Shape{L, C},
          Shape{L, C}, Shape{L, C}, Shape{L, 4 * C, C}, Shape{L, 4 * C},
          Shape{L, C, 4 * C}, Shape{L, C}, Shape{C}, Shape{C}};
}

std::int64_t num_params(const GPTConfig& c) {
  const auto L = c.n_layer, C = c.n_embd;
  return L * (12 * C * C + 13 * C) + c.vocab_size * C + c.block_size * C + 2 * C;
}

}  // namespace mls::llm
