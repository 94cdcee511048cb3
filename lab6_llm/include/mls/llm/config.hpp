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

  /// Throws mls::Error naming the field when a value is out of range (C % H != 0, <= 0, ...).
  void validate() const;
  bool operator==(const GPTConfig&) const = default;
};

/// Named configs: "nano" (3 layers, 3 heads, 48 dims, block 32), "small" (4, 4, 128, block 64).
/// vocab_size is left 0 (set from the tokenizer). Unknown names are an mls::Error listing the known ones.
GPTConfig config_by_name(const std::string& name);

/// A named config and its overrides (mls-gpt's --config, --n-layer, --n-head, --n-embd,
/// --block-size; 0 keeps the config's value): a run's model before its vocabulary is known.
struct ModelSpec {
  std::string config = "nano";
  std::int64_t n_layer = 0, n_head = 0, n_embd = 0, block_size = 0;
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
/// Total parameter count (the closed form above; equal to the sum of the shapes' sizes).
std::int64_t num_params(const GPTConfig& cfg);

}  // namespace mls::llm
