// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6: sampling and the KV cache.
#include "mls/llm/sample.hpp"
#include "mls/llm/kv_cache.hpp"
#include "mls/llm/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>

#include "mls/common/error.hpp"
#include "mls/kernels/fused.hpp"
#include "lab6_clones.hpp"

namespace mls::llm {

void validate_sample_options(const SampleOptions& opt, std::int64_t V) {
  MLS_CHECK(std::isfinite(opt.temperature) && opt.temperature > 0,
            "sample: temperature = ", opt.temperature,
            ", expected > 0 (use greedy decoding for argmax)");
  MLS_CHECK(opt.top_k >= 0 && opt.top_k <= V, "sample: top_k = ", opt.top_k,
            ", expected 0 (off) or 1 <= top_k <= vocab_size = ", V);
  MLS_CHECK(opt.top_p > 0 && opt.top_p <= 1, "sample: top_p = ", opt.top_p,
            ", expected 0 < top_p <= 1");
}

std::int32_t sample_token(const float* logits, std::int64_t V, const SampleOptions& opt, Rng& rng) {
  // BEGIN SOLUTION
  MLS_CHECK(V > 0, "sample: vocab_size = ", V, ", expected > 0");
  if (opt.greedy) {
    return static_cast<std::int32_t>(std::max_element(logits, logits + V) - logits);
  }
  validate_sample_options(opt, V);
  // softmax(logits / temperature) in double
  double maxv = -INFINITY;
  for (std::int64_t i = 0; i < V; ++i) maxv = std::max(maxv, static_cast<double>(logits[i]));
  std::vector<double> p(static_cast<std::size_t>(V));
  double sum = 0;
  for (std::int64_t i = 0; i < V; ++i) sum += p[i] = std::exp((logits[i] - maxv) / opt.temperature);
  for (auto& x : p) x /= sum;
  // most likely first; ties by id
  std::vector<std::int32_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return p[a] > p[b]; });
  std::size_t keep = opt.top_k > 0 ? static_cast<std::size_t>(opt.top_k) : order.size();
  if (opt.top_p < 1.0) {
    double cum = 0;
    std::size_t n = 0;
    while (n < keep) {
      cum += p[order[n++]];
      if (cum >= opt.top_p) break;
    }
    keep = n;
  }
  double kept = 0;
  for (std::size_t i = 0; i < keep; ++i) kept += p[order[i]];
  const double u = rng.uniform_double() * kept;
  double cum = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    cum += p[order[i]];
    if (u < cum) return order[i];
  }
  return order[keep - 1];
  // END SOLUTION
}

KVCache::KVCache(const GPTConfig& cfg) : cfg_(cfg) {
  cfg.validate();
  const auto n = static_cast<std::size_t>(cfg.n_layer * cfg.block_size * cfg.n_embd);
  k.assign(n, 0.f);
  v.assign(n, 0.f);
}

// (compiled as forward_paged's attention is, MLS_LAB6_CLONES: the same bits)
MLS_LAB6_CLONES void forward_cached(const GPTParams& params, KVCache& cache, std::int32_t token, float* logits) {
  // BEGIN SOLUTION
  const GPTConfig& cfg = params.config();
  MLS_CHECK(cache.config() == cfg, "forward_cached: a cache of another config");
  const std::int64_t L = cfg.n_layer, C = cfg.n_embd, H = cfg.n_head, V = cfg.vocab_size,
                     T = cfg.block_size, hs = C / H, pos = cache.len_;
  MLS_CHECK(pos < T, "forward_cached: the KV cache is full (", pos, " positions = block_size ", T,
            ")");
  MLS_CHECK(token >= 0 && token < V, "forward_cached: token ", token,
            ", expected 0 <= token < vocab_size = ", V);
  const ParamPtrs p = param_views(const_cast<float*>(params.data()), cfg);
  std::vector<float> x(C), ln(C), qkv(3 * C), y(C), proj(C), fch(4 * C), fchg(4 * C), att(pos + 1);
  float mean = 0, rstd = 0;
  encoder_forward(x.data(), &token, p.wte, p.wpe + pos * C, 1, 1, C);
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  for (std::int64_t l = 0; l < L; ++l) {
    layernorm_forward(ln.data(), &mean, &rstd, x.data(), p.ln1w + l * C, p.ln1b + l * C, 1, C);
    matmul_forward(qkv.data(), ln.data(), p.qkvw + l * 3 * C * C, p.qkvb + l * 3 * C, 1, C, 3 * C);
    float* kc = cache.k.data() + l * T * C;
    float* vc = cache.v.data() + l * T * C;
    std::copy(qkv.begin() + C, qkv.begin() + 2 * C, kc + pos * C);
    std::copy(qkv.begin() + 2 * C, qkv.end(), vc + pos * C);
    for (std::int64_t h = 0; h < H; ++h) {  // one attention row per head over the cached keys
      const float* q = qkv.data() + h * hs;
      for (std::int64_t t2 = 0; t2 <= pos; ++t2) {
        const float* kk = kc + t2 * C + h * hs;
        float dot = 0.f;
        for (std::int64_t j = 0; j < hs; ++j) dot += q[j] * kk[j];
        att[t2] = dot * scale;
      }
      kernels::softmax_forward(att.data(), att.data(), 1, pos + 1);
      float* o = y.data() + h * hs;
      for (std::int64_t j = 0; j < hs; ++j) o[j] = 0.f;
      for (std::int64_t t2 = 0; t2 <= pos; ++t2) {
        const float a = att[t2];
        const float* vv = vc + t2 * C + h * hs;
        for (std::int64_t j = 0; j < hs; ++j) o[j] += a * vv[j];
      }
    }
    matmul_forward(proj.data(), y.data(), p.attprojw + l * C * C, p.attprojb + l * C, 1, C, C);
    residual_forward(x.data(), x.data(), proj.data(), C);
    layernorm_forward(ln.data(), &mean, &rstd, x.data(), p.ln2w + l * C, p.ln2b + l * C, 1, C);
    if (is_moe_block(cfg, l)) {  // MoE (moe.hpp): one token fills no expert, nothing is dropped
      moe_token_forward(cfg, shift_layers(p, cfg, l), ln.data(), proj.data());
    } else {
      const std::int64_t d = l - moe_blocks_before(cfg, l);  // the MLP tensors stack dense blocks
      matmul_forward(fch.data(), ln.data(), p.fcw + d * 4 * C * C, p.fcb + d * 4 * C, 1, C, 4 * C);
      gelu_forward(fchg.data(), fch.data(), 4 * C);
      matmul_forward(proj.data(), fchg.data(), p.fcprojw + d * C * 4 * C, p.fcprojb + d * C, 1,
                     4 * C, C);
    }
    residual_forward(x.data(), x.data(), proj.data(), C);
  }
  layernorm_forward(ln.data(), &mean, &rstd, x.data(), p.lnfw, p.lnfb, 1, C);
  matmul_forward(logits, ln.data(), p.wte, nullptr, 1, C, V);
  cache.len_ = pos + 1;
  // END SOLUTION
}

void prefill(const GPTParams& params, KVCache& cache, const std::vector<std::int32_t>& prompt,
             float* logits, Attention attention) {
  const GPTConfig& cfg = params.config();
  const std::int64_t n = static_cast<std::int64_t>(prompt.size()), L = cfg.n_layer,
                     C = cfg.n_embd, T = cfg.block_size, V = cfg.vocab_size;
  MLS_CHECK(cache.config() == cfg, "prefill: a cache of another config");
  MLS_CHECK(cache.size() == 0, "prefill: the cache holds ", cache.size(),
            " positions, expected an empty cache");
  MLS_CHECK(n >= 1 && n <= T, "prefill: a prompt of ", n, " tokens, expected 1..block_size = ", T);
  for (auto t : prompt)
    MLS_CHECK(t >= 0 && t < V, "prefill: token ", t, ", expected 0 <= token < vocab_size = ", V);
  GPTActivations acts(cfg, 1, n, attention);
  gpt_forward(params, acts, prompt.data(), nullptr, nullptr, 1, n);
  for (std::int64_t l = 0; l < L; ++l) {
    for (std::int64_t t = 0; t < n; ++t) {
      const float* qkv = acts.qkv + (l * n + t) * 3 * C;  // (L, 1, n, 3C)
      std::copy(qkv + C, qkv + 2 * C, cache.k.data() + (l * T + t) * C);
      std::copy(qkv + 2 * C, qkv + 3 * C, cache.v.data() + (l * T + t) * C);
    }
  }
  cache.len_ = n;
  std::copy(acts.logits + (n - 1) * V, acts.logits + n * V, logits);
}

std::vector<float> forward_last(const GPTParams& params, const std::vector<std::int32_t>& context,
                                Attention attention) {
  const GPTConfig& cfg = params.config();
  MLS_CHECK(!context.empty(), "forward_last: empty context");
  const std::int64_t n = static_cast<std::int64_t>(context.size());
  const std::int64_t T = std::min(n, cfg.block_size);
  GPTActivations acts(cfg, 1, T, attention);
  gpt_forward(params, acts, context.data() + (n - T), nullptr, nullptr, 1, T);
  const float* last = acts.logits + (T - 1) * cfg.vocab_size;
  return std::vector<float>(last, last + cfg.vocab_size);
}

std::string generation_note(const GPTConfig& cfg, std::int64_t prompt_tokens, std::int64_t max_new, bool use_cache) {
  const std::int64_t T = cfg.block_size, room = std::max<std::int64_t>(0, T - prompt_tokens);
  if (prompt_tokens + max_new <= T || max_new <= 0) return "";
  std::ostringstream os;
  os << "the model's context length (block size) is " << T << " tokens and the prompt has " << prompt_tokens << ": ";
  if (use_cache && room > 0)
    os << "the KV cache serves the first " << room << " of the " << max_new << " new tokens; the other "
       << max_new - room << " slide the context over the last " << T
       << " tokens, recomputing it for each (slower: as without the cache, the same tokens)";
  else
    os << (room > 0 ? "after the first " + std::to_string(room) + " of the " + std::to_string(max_new) + " new tokens, " : "")
       << "each new token sees only the last " << T << " tokens (a sliding window)";
  return os.str();
}

std::vector<std::int32_t> generate(const GPTParams& params, const std::vector<std::int32_t>& prompt,
                                   std::int64_t max_new, const SampleOptions& opt, bool use_cache,
                                   Rng& rng, const std::function<void(std::int32_t)>& on_token) {
  const GPTConfig& cfg = params.config();
  const std::int64_t V = cfg.vocab_size, n = static_cast<std::int64_t>(prompt.size());
  if (!opt.greedy) validate_sample_options(opt, V);
  MLS_CHECK(n > 0, "generate: empty prompt, expected at least one token");
  MLS_CHECK(max_new >= 0, "generate: max_new = ", max_new, ", expected >= 0");
  if (use_cache)
    MLS_CHECK(n <= cfg.block_size, "generate: a prompt of ", n,
              " tokens is longer than the block size ", cfg.block_size,
              " (the KV cache holds block_size positions; shorten the prompt or generate without the cache)");
  std::vector<std::int32_t> out;
  if (max_new == 0) return out;
  std::vector<std::int32_t> ctx = prompt;
  std::vector<float> logits(static_cast<std::size_t>(V));
  std::optional<KVCache> cache;
  // forward_cached's matmuls find the weights packed once here (the same bits as packing them on
  // the fly: only faster); dense models only
  std::optional<DecodeModel> packed;
  std::optional<PackedScope> scope;
  if (use_cache && !is_moe(cfg)) {
    packed.emplace(params);
    scope.emplace(packed->matrices());
  }
  if (use_cache) {
    cache.emplace(cfg);
    prefill(params, *cache, prompt, logits.data());  // the whole prompt at once
  } else {
    logits = forward_last(params, ctx);
  }
  for (std::int64_t i = 0; i < max_new; ++i) {
    const std::int32_t t = sample_token(logits.data(), V, opt, rng);
    out.push_back(t);
    ctx.push_back(t);
    if (on_token) on_token(t);
    if (i + 1 == max_new) break;
    // The cache serves positions 0..block_size-1. Past them the window slides: every position
    // shifts (absolute position embeddings), so no cached key stays valid and the last
    // block_size tokens are recomputed, as without the cache.
    if (cache && cache->size() < cfg.block_size)
      forward_cached(params, *cache, t, logits.data());
    else
      logits = forward_last(params, ctx);
  }
  return out;
}

}  // namespace mls::llm
