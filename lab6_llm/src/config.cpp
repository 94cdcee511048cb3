#include "mls/llm/config.hpp"

#include <string>

#include "mls/common/error.hpp"

namespace mls::llm {

void GPTConfig::validate() const {
  MLS_CHECK(n_layer > 0 && n_layer <= 1024, "GPTConfig: n_layer = ", n_layer, ", expected 1..1024");
  MLS_CHECK(n_head > 0 && n_head <= 1024, "GPTConfig: n_head = ", n_head, ", expected 1..1024");
  MLS_CHECK(n_embd > 0 && n_embd <= (1 << 16), "GPTConfig: n_embd = ", n_embd, ", expected 1..65536");
  MLS_CHECK(n_embd % n_head == 0, "GPTConfig: n_embd = ", n_embd, " is not divisible by n_head = ", n_head);
  MLS_CHECK(block_size > 0 && block_size <= (1 << 20), "GPTConfig: block_size = ", block_size,
            ", expected 1..1048576");
  MLS_CHECK(vocab_size > 0 && vocab_size <= (1 << 24), "GPTConfig: vocab_size = ", vocab_size,
            ", expected 1..16777216 (set it from the tokenizer)");
}

GPTConfig config_by_name(const std::string& name) {
  GPTConfig c;
  if (name == "nano") {
    c.n_layer = 3, c.n_head = 3, c.n_embd = 48, c.block_size = 32;
  } else if (name == "small") {
    c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.block_size = 64;
  } else {
    fail("config_by_name: unknown config '", name, "', expected one of: nano, small");
  }
  c.vocab_size = 0;
  return c;
}

const std::array<const char*, kNumParamTensors>& param_names() {
  static const std::array<const char*, kNumParamTensors> names = {
      "wte",      "wpe",      "ln1w",  "ln1b", "qkvw", "qkvb",    "attprojw", "attprojb",
      "ln2w",     "ln2b",     "fcw",   "fcb",  "fcprojw", "fcprojb", "lnfw",   "lnfb"};
  return names;
}

std::array<Shape, kNumParamTensors> param_shapes(const GPTConfig& cfg) {
  const std::int64_t V = cfg.vocab_size, T = cfg.block_size, L = cfg.n_layer, C = cfg.n_embd;
  return {Shape{V, C},     Shape{T, C},     Shape{L, C},     Shape{L, C},
          Shape{L, 3 * C, C}, Shape{L, 3 * C}, Shape{L, C, C},  Shape{L, C},
          Shape{L, C},     Shape{L, C},     Shape{L, 4 * C, C}, Shape{L, 4 * C},
          Shape{L, C, 4 * C}, Shape{L, C},  Shape{C},        Shape{C}};
}

std::int64_t num_params(const GPTConfig& cfg) {
  const std::int64_t V = cfg.vocab_size, T = cfg.block_size, L = cfg.n_layer, C = cfg.n_embd;
  return L * (12 * C * C + 13 * C) + V * C + T * C + 2 * C;
}

GPTConfig ModelSpec::make(std::int64_t vocab) const {
  GPTConfig c = config_by_name(config);
  if (n_layer) c.n_layer = n_layer;
  if (n_head) c.n_head = n_head;
  if (n_embd) c.n_embd = n_embd;
  if (block_size) c.block_size = block_size;
  c.vocab_size = vocab;
  c.validate();
  return c;
}

std::string ModelSpec::args() const {
  std::string a = "--config " + config;
  if (n_layer) a += " --n-layer " + std::to_string(n_layer);
  if (n_head) a += " --n-head " + std::to_string(n_head);
  if (n_embd) a += " --n-embd " + std::to_string(n_embd);
  if (block_size) a += " --block-size " + std::to_string(block_size);
  return a;
}

}  // namespace mls::llm
