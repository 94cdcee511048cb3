#pragma once
/// Lab 6: generation — sampling with temperature, top-k and top-p, and a KV cache.
///
/// Without a cache, every new token recomputes the whole context: O(T²) work per token for the
/// attention scores plus O(T·N) for the matmuls. With a cache, the keys and values of the past
/// positions are kept per layer, and one new token costs one row of every matmul plus one
/// attention row over the cached keys: O(N + T·C·L) per token.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mls/common/rng.hpp"
#include "mls/llm/model.hpp"

namespace mls::llm {

struct SampleOptions {
  double temperature = 1.0;  // > 0; logits are divided by it
  std::int64_t top_k = 0;    // 0: off; else keep the k most likely tokens (1 <= k <= V)
  double top_p = 1.0;        // (0, 1]: keep the smallest set of tokens with probability >= top_p
  bool greedy = false;       // argmax (ignores the three above)
};

/// Throws mls::Error naming the option and its value when temperature <= 0 (or not finite),
/// top_k < 0 or top_k > V, or top_p outside (0, 1].
void validate_sample_options(const SampleOptions& opt, std::int64_t V);

/// Picks the next token from logits (V): greedy argmax (lowest id on ties), or a draw from
/// softmax(logits / temperature) restricted to the top-k and then the top-p nucleus (ties in
/// probability ordered by id), with one uniform draw from `rng`.
/// Hint: validate_sample_options first; softmax in double; sort ids by probability (stable);
/// keep k, then the shortest prefix whose sum >= top_p; u = rng.uniform_double() * kept mass.
std::int32_t sample_token(const float* logits, std::int64_t V, const SampleOptions& opt, Rng& rng);

/// Keys and values of the positions seen so far, per layer.
class KVCache {
 public:
  explicit KVCache(const GPTConfig& cfg);
  std::int64_t size() const { return len_; }
  std::int64_t capacity() const { return cfg_.block_size; }
  void clear() { len_ = 0; }
  const GPTConfig& config() const { return cfg_; }

  std::vector<float> k;  // (L, T, C): the keys of position t of layer l, heads side by side
  std::vector<float> v;  // (L, T, C)

 private:
  friend void forward_cached(const GPTParams&, KVCache&, std::int32_t, float*);
  friend void prefill(const GPTParams&, KVCache&, const std::vector<std::int32_t>&, float*, Attention);
  GPTConfig cfg_;
  std::int64_t len_ = 0;
};

/// Runs one token at position cache.size() through the model, appends its keys and values to the
/// cache and writes the next-token logits (V). Throws mls::Error when the cache is full
/// (size == block_size) or the token is out of range.
/// Hint: the same layers as block_forward with N = 1 row (layernorm_forward, matmul_forward,
/// gelu_forward, residual_forward); after the qkv matmul copy k and v into the cache at row
/// `size()`, then each head attends over cache rows 0..size() (scores, kernels::softmax_forward,
/// weighted sum of values). Position embedding: wpe row size().
void forward_cached(const GPTParams& params, KVCache& cache, std::int32_t token, float* logits);

/// Prefill: runs a whole prompt (1..block_size tokens) through the model at once into an empty
/// cache (gpt_forward on (1, n) with the `attention` kernel: the tiled one never forms the n × n
/// scores), keeps every layer's keys and values in the cache and writes the logits (V) after the
/// last prompt token. The same cache, up to float rounding, as forward_cached token by token.
/// Throws mls::Error for a non-empty cache, an empty or too long prompt, or ids out of range.
void prefill(const GPTParams& params, KVCache& cache, const std::vector<std::int32_t>& prompt,
             float* logits, Attention attention = Attention::Flash);

/// Next-token logits (V) after `context`, recomputing the whole context (its last block_size
/// tokens) with gpt_forward (and the `attention` kernel).
std::vector<float> forward_last(const GPTParams& params, const std::vector<std::int32_t>& context,
                                Attention attention = Attention::Flash);

/// What generate will do when prompt + max_new tokens exceed the context length, to say before it
/// starts (mls-gpt sample prints it first, on stderr): how many new tokens the KV cache serves and
/// how many slide the window; "" when everything fits.
std::string generation_note(const GPTConfig& cfg, std::int64_t prompt_tokens, std::int64_t max_new, bool use_cache);

/// Generates `max_new` tokens after `prompt` (non-empty), calling on_token for each as it comes.
/// Each token sees at most the last block_size tokens (the model's context length): past it the
/// context slides. With the cache the prompt must fit in block_size (an mls::Error says so
/// otherwise); the cache serves the positions up to block_size, and past them every token
/// recomputes the window (forward_last: a shifted window moves every position, so no cached key
/// stays valid). With or without the cache: the same tokens.
std::vector<std::int32_t> generate(const GPTParams& params, const std::vector<std::int32_t>& prompt,
                                   std::int64_t max_new, const SampleOptions& opt, bool use_cache,
                                   Rng& rng,
                                   const std::function<void(std::int32_t)>& on_token = {});

}  // namespace mls::llm
