#include "mls/llm/config.hpp"

#include <cmath>
#include <algorithm>
#include <sstream>
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
  MLS_CHECK(moe_experts >= 0 && moe_experts <= 1024, "GPTConfig: moe_experts = ", moe_experts,
            ", expected 0 (dense) or 1..1024");
  MLS_CHECK(moe_shards >= 1 && (moe_experts == 0 ? moe_shards == 1 : moe_experts % moe_shards == 0) &&
                moe_shard >= 0 && moe_shard < moe_shards,
            "GPTConfig: moe_shards = ", moe_shards, ", moe_shard = ", moe_shard, " with moe_experts = ",
            moe_experts, ", expected shards dividing the experts (1 for a dense config) and 0 <= shard < shards");
  if (moe_experts == 0) return;
  MLS_CHECK(moe_top_k >= 1 && moe_top_k <= moe_experts, "GPTConfig: moe_top_k = ", moe_top_k,
            ", expected 1..moe_experts = ", moe_experts);
  MLS_CHECK(moe_every >= 1 && moe_every <= n_layer, "GPTConfig: moe_every = ", moe_every,
            ", expected 1..n_layer = ", n_layer, " (every N-th block is MoE)");
  MLS_CHECK(std::isfinite(capacity_factor) && capacity_factor > 0, "GPTConfig: capacity_factor = ",
            capacity_factor, ", expected a finite value > 0");
  MLS_CHECK(std::isfinite(moe_aux_coef) && moe_aux_coef >= 0, "GPTConfig: moe_aux_coef = ",
            moe_aux_coef, ", expected a finite value >= 0");
  MLS_CHECK(std::isfinite(moe_z_coef) && moe_z_coef >= 0, "GPTConfig: moe_z_coef = ", moe_z_coef,
            ", expected a finite value >= 0");
}

GPTConfig sharded(const GPTConfig& cfg, std::int64_t shards, std::int64_t shard) {
  MLS_CHECK(is_moe(cfg) && shards >= 1 && cfg.moe_experts % shards == 0 && shard >= 0 && shard < shards,
            "sharded: moe_experts = ", cfg.moe_experts, " over ", shards, " shards (shard ", shard,
            "), expected an MoE config with experts divisible by shards >= 1 and 0 <= shard < shards");
  MLS_CHECK(cfg.moe_shards == 1, "sharded: the config is already shard ", cfg.moe_shard, " of ", cfg.moe_shards);
  GPTConfig c = cfg;
  c.moe_shards = shards;
  c.moe_shard = shard;
  c.validate();
  return c;
}

GPTConfig unsharded(GPTConfig cfg) {
  cfg.moe_shards = 1;
  cfg.moe_shard = 0;
  return cfg;
}

bool is_moe_block(const GPTConfig& cfg, std::int64_t l) {
  return is_moe(cfg) && (l + 1) % cfg.moe_every == 0;
}

std::int64_t moe_blocks_before(const GPTConfig& cfg, std::int64_t l) {
  return is_moe(cfg) ? l / cfg.moe_every : 0;
}

std::int64_t num_moe_blocks(const GPTConfig& cfg) { return moe_blocks_before(cfg, cfg.n_layer); }

std::int64_t moe_capacity(const GPTConfig& cfg, std::int64_t tokens) {
  MLS_CHECK(is_moe(cfg), "moe_capacity: a dense config (moe_experts = 0)");
  const double c = std::ceil(cfg.capacity_factor * static_cast<double>(cfg.moe_top_k) *
                             static_cast<double>(tokens) / static_cast<double>(cfg.moe_experts));
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(c));
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
  const std::int64_t Ld = num_dense_blocks(cfg);  // the MLP tensors stack the dense blocks only
  return {Shape{V, C},     Shape{T, C},     Shape{L, C},     Shape{L, C},
          Shape{L, 3 * C, C}, Shape{L, 3 * C}, Shape{L, C, C},  Shape{L, C},
          Shape{L, C},     Shape{L, C},     Shape{Ld, 4 * C, C}, Shape{Ld, 4 * C},
          Shape{Ld, C, 4 * C}, Shape{Ld, C},  Shape{C},        Shape{C}};
}

const std::array<const char*, kNumMoeTensors>& moe_param_names() {
  static const std::array<const char*, kNumMoeTensors> names = {
      "moe_router", "moe_fcw", "moe_fcb", "moe_fcprojw", "moe_fcprojb"};
  return names;
}

std::array<Shape, kNumMoeTensors> moe_param_shapes(const GPTConfig& cfg) {
  const std::int64_t Lm = num_moe_blocks(cfg), E = cfg.moe_experts, C = cfg.n_embd;
  const std::int64_t El = moe_local_experts(cfg);  // the experts this layout holds (E unsharded)
  return {Shape{Lm, E, C}, Shape{Lm, El, 4 * C, C}, Shape{Lm, El, 4 * C}, Shape{Lm, El, C, 4 * C},
          Shape{Lm, El, C}};
}

std::int64_t num_params(const GPTConfig& cfg) {
  const std::int64_t V = cfg.vocab_size, T = cfg.block_size, L = cfg.n_layer, C = cfg.n_embd;
  const std::int64_t Ld = num_dense_blocks(cfg), Lm = num_moe_blocks(cfg), E = cfg.moe_experts;
  const std::int64_t mlp = 8 * C * C + 5 * C;  // fcw, fcb, fcprojw, fcprojb of one MLP
  return L * (4 * C * C + 8 * C) + Ld * mlp + Lm * (moe_local_experts(cfg) * mlp + E * C) + V * C + T * C +
         2 * C;
}

std::int64_t num_active_params(const GPTConfig& cfg) {
  const std::int64_t C = cfg.n_embd, Lm = num_moe_blocks(cfg), E = cfg.moe_experts;
  const std::int64_t mlp = 8 * C * C + 5 * C;
  return num_params(unsharded(cfg)) - Lm * (E - cfg.moe_top_k) * mlp;
}

GPTConfig ModelSpec::make(std::int64_t vocab) const {
  GPTConfig c = config_by_name(config);
  if (n_layer) c.n_layer = n_layer;
  if (n_head) c.n_head = n_head;
  if (n_embd) c.n_embd = n_embd;
  if (block_size) c.block_size = block_size;
  c.moe_experts = moe_experts;
  c.moe_top_k = moe_top_k;
  c.moe_every = moe_every;
  c.capacity_factor = capacity_factor;
  c.moe_aux_coef = moe_aux_coef;
  c.moe_z_coef = moe_z_coef;
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
  if (moe_experts) {
    std::ostringstream o;
    o << " --moe-experts " << moe_experts << " --moe-top-k " << moe_top_k << " --moe-every "
      << moe_every << " --capacity-factor " << capacity_factor << " --moe-aux-coef " << moe_aux_coef
      << " --moe-z-coef " << moe_z_coef;
    a += o.str();
  }
  return a;
}

}  // namespace mls::llm
