#pragma once
/// Lab 6: the GPT configuration and its parameter layout — the one owner of "which parameters
/// exist, in which order, with which shapes". The order is llm.c's (so `gpt2_*.bin` files map
/// onto it one to one); every layer's tensors are stacked over the L layers:
///
///   wte [V, C]  wpe [T, C]  ln1w [L, C]  ln1b [L, C]  qkvw [L, 3C, C]  qkvb [L, 3C]
///   attprojw [L, C, C]  attprojb [L, C]  ln2w [L, C]  ln2b [L, C]  fcw [L, 4C, C]  fcb [L, 4C]
///   fcprojw [L, C, 4C]  fcprojb [L, C]  lnfw [C]  lnfb [C]
///
/// (weights are [out, in], as llm.c and PyTorch's nn.Linear store them; the LM head is tied to wte.)
/// Parameter count = L(12C² + 13C) + V·C + T·C + 2C.
///
/// Mixture of experts (moe.hpp; moe_experts = E > 0): block l is an MoE block when
/// (l + 1) % moe_every == 0 (Lm = L / moe_every of them). Its MLP is E experts, each a dense MLP
/// of the same shapes, behind a linear router. The four MLP tensors then stack only the Ld = L - Lm
/// dense blocks (fcw [Ld, 4C, C], ...), and five MoE tensors follow lnfb in the flat buffer:
///
///   moe_router [Lm, E, C]  moe_fcw [Lm, E, 4C, C]  moe_fcb [Lm, E, 4C]
///   moe_fcprojw [Lm, E, C, 4C]  moe_fcprojb [Lm, E, C]
///
/// A dense config (E = 0) has Ld = L and no MoE tensors: its layout is unchanged.
///
/// Expert parallelism (moe_ep.hpp) shards the experts: a config with moe_shards = P > 1 is rank
/// moe_shard's part of the model, whose four expert tensors hold only its El = E / P experts
/// [moe_shard·El, (moe_shard+1)·El) of each MoE block (moe_fcw [Lm, El, 4C, C], ...); the router
/// stays whole (moe_router [Lm, E, C]). Parameters, gradients and AdamW moments laid out by it are
/// that rank's only; such a buffer runs only with an expert-parallel dispatch, and checkpoints
/// hold the whole model (unsharded(cfg); ep_run.cpp gathers and scatters).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mls/common/shape.hpp"

namespace mls::llm {

struct GPTConfig {
  std::int64_t n_layer = 3;     // L
  std::int64_t n_head = 3;      // H
  std::int64_t n_embd = 48;     // C (divisible by n_head)
  std::int64_t block_size = 32; // T: the longest context
  std::int64_t vocab_size = 0;  // V: from the tokenizer
  // Mixture of experts (moe.hpp); moe_experts = 0 is the dense model (the other fields unused).
  std::int64_t moe_experts = 0;   // E
  std::int64_t moe_top_k = 1;     // K: experts per token (1 Switch, 2 GShard), 1..E
  std::int64_t moe_every = 1;     // every N-th block is MoE: blocks l with (l + 1) % N == 0
  double capacity_factor = 1.25;  // F > 0: capacity per expert = ceil(F · K · tokens / E)
  double moe_aux_coef = 0.01;     // load-balancing loss coefficient (>= 0)
  double moe_z_coef = 0.0;        // router z-loss coefficient (>= 0)
  // Expert shards (see above): this layout holds shard moe_shard of moe_shards (1: every expert).
  std::int64_t moe_shards = 1;    // P: divides moe_experts (1 for a dense config)
  std::int64_t moe_shard = 0;     // 0..P-1

  /// Throws mls::Error naming the field when a value is out of range (C % H != 0, <= 0, ...).
  void validate() const;
  bool operator==(const GPTConfig&) const = default;
};

/// True when the config has MoE blocks (moe_experts > 0).
inline bool is_moe(const GPTConfig& c) { return c.moe_experts > 0; }
/// Block l is an MoE block: is_moe and (l + 1) % moe_every == 0.
bool is_moe_block(const GPTConfig& cfg, std::int64_t l);
/// MoE blocks among blocks [0, l): l / moe_every (0 for a dense config).
std::int64_t moe_blocks_before(const GPTConfig& cfg, std::int64_t l);
/// Experts this layout holds per MoE block: E / moe_shards (0 for a dense config).
inline std::int64_t moe_local_experts(const GPTConfig& c) { return c.moe_experts / c.moe_shards; }
/// The config of rank `shard`'s part of the model with its experts sharded over `shards` ranks
/// (an mls::Error naming the values when E % shards != 0 or shard is out of range).
GPTConfig sharded(const GPTConfig& cfg, std::int64_t shards, std::int64_t shard);
/// The whole model's config (moe_shards = 1, moe_shard = 0).
GPTConfig unsharded(GPTConfig cfg);
/// Lm (MoE blocks) and Ld = L - Lm (dense blocks).
std::int64_t num_moe_blocks(const GPTConfig& cfg);
inline std::int64_t num_dense_blocks(const GPTConfig& c) { return c.n_layer - num_moe_blocks(c); }
/// Expert capacity for `tokens` routed tokens: ceil(F · K · tokens / E), at least 1.
std::int64_t moe_capacity(const GPTConfig& cfg, std::int64_t tokens);

/// Named configs: "nano" (3 layers, 3 heads, 48 dims, block 32), "small" (4, 4, 128, block 64).
/// vocab_size is left 0 (set from the tokenizer). Unknown names are an mls::Error listing the known ones.
GPTConfig config_by_name(const std::string& name);

/// A named config and its overrides (mls-gpt's --config, --n-layer, --n-head, --n-embd,
/// --block-size; 0 keeps the config's value): a run's model before its vocabulary is known.
struct ModelSpec {
  std::string config = "nano";
  std::int64_t n_layer = 0, n_head = 0, n_embd = 0, block_size = 0;
  // --moe-experts, --moe-top-k, --moe-every, --capacity-factor, --moe-aux-coef, --moe-z-coef
  std::int64_t moe_experts = 0, moe_top_k = 1, moe_every = 1;
  double capacity_factor = 1.25, moe_aux_coef = 0.01, moe_z_coef = 0.0;
  /// config_by_name(config) with the overrides and `vocab`, validated.
  GPTConfig make(std::int64_t vocab) const;
  /// The flags that name this model again (for a printed command line): "--config nano ...".
  std::string args() const;
};

constexpr int kNumParamTensors = 16;
/// The 16 tensors' indices in that order. The per-layer tensors are kLn1w .. kFcprojb.
enum ParamTensor : int {
  kWte, kWpe, kLn1w, kLn1b, kQkvw, kQkvb, kAttprojw, kAttprojb,
  kLn2w, kLn2b, kFcw, kFcb, kFcprojw, kFcprojb, kLnfw, kLnfb
};
static_assert(kLnfb + 1 == kNumParamTensors);
/// Names in llm.c order: "wte", "wpe", "ln1w", ... "lnfb".
const std::array<const char*, kNumParamTensors>& param_names();
/// Shapes of the 16 tensors for `cfg`, in the order above.
std::array<Shape, kNumParamTensors> param_shapes(const GPTConfig& cfg);
/// Total parameter count (the closed form above plus the MoE tensors; equal to the sum of the
/// shapes' sizes, of the 16 and of the MoE tensors).
std::int64_t num_params(const GPTConfig& cfg);

/// The MoE tensors after lnfb (see above), in that order; their sizes are 0 for a dense config.
constexpr int kNumMoeTensors = 5;
enum MoeTensor : int { kMoeRouter, kMoeFcw, kMoeFcb, kMoeFcprojw, kMoeFcprojb };
/// "moe_router", "moe_fcw", "moe_fcb", "moe_fcprojw", "moe_fcprojb".
const std::array<const char*, kNumMoeTensors>& moe_param_names();
std::array<Shape, kNumMoeTensors> moe_param_shapes(const GPTConfig& cfg);
/// Parameters one token uses: every parameter but the experts a token is not routed to (K of E
/// experts per MoE block). Equal to num_params for a dense config.
std::int64_t num_active_params(const GPTConfig& cfg);

}  // namespace mls::llm
