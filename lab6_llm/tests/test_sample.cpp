// Lab 6: sampling and the KV cache.
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "mls/llm/sample.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace llm_test;

TEST_CASE("KV cache: the same logits as recomputing the context, position by position",
          "[lab6][sample][kvcache]") {
  Rng rng(4, "kv-logits");
  for (int trial = 0; trial < 4; ++trial) {
    const GPTConfig cfg = random_config(rng);
    const GPTParams p = random_params(cfg, rng);
    KVCache cache(cfg);
    std::vector<std::int32_t> ctx;
    std::vector<float> logits(cfg.vocab_size);
    for (std::int64_t t = 0; t < cfg.block_size; ++t) {
      ctx.push_back(static_cast<std::int32_t>(rng.randint(0, cfg.vocab_size)));
      forward_cached(p, cache, ctx.back(), logits.data());
      // The oracle: recomputing the whole context, after the cached step.
      MLS_ORACLE(const auto ref = forward_last(p, ctx);)
      observe_rel("logits", logits.data(), LAB6_WANT(ref.data()), cfg.vocab_size, 1e-5);
      MLS_ORACLE_CHECK(CHECK(rel_err(logits.data(), ref.data(), cfg.vocab_size) < 1e-5));
    }
    MLS_CHECK_EQ(cache.size(), cfg.block_size);
    mls::testing::require_error([&] { forward_cached(p, cache, 0, logits.data()); },
                                "KV cache is full");
  }
}

TEST_CASE("prefill: the whole prompt at once (flash and naive attention) fills the cache as "
          "forward_cached token by token",
          "[lab6][sample][prefill]") {
  Rng rng(5, "prefill");
  for (int trial = 0; trial < 3; ++trial) {
    const GPTConfig cfg = random_config(rng);
    const GPTParams p = random_params(cfg, rng);
    const std::int64_t n = 1 + rng.randint(0, cfg.block_size), V = cfg.vocab_size;
    std::vector<std::int32_t> prompt;
    for (std::int64_t t = 0; t < n; ++t) prompt.push_back(static_cast<std::int32_t>(rng.randint(0, V)));
    KVCache step(cfg);  // token by token: the student's forward_cached
    std::vector<float> want(V);
    for (auto t : prompt) forward_cached(p, step, t, want.data());
    for (Attention a : {Attention::Flash, Attention::Naive}) {
      KVCache whole(cfg);
      std::vector<float> got(V);
      prefill(p, whole, prompt, got.data(), a);
      const std::string c = std::string(to_string(a)) + ", trial " + std::to_string(trial);
      MLS_CHECK_EQ(whole.size(), n);
      observe_rel("prefill logits, " + c, got.data(), want.data(), V, 1e-5);
      observe_rel("prefill keys, " + c, whole.k.data(), step.k.data(), static_cast<std::int64_t>(step.k.size()), 1e-5);
      observe_rel("prefill values, " + c, whole.v.data(), step.v.data(), static_cast<std::int64_t>(step.v.size()), 1e-5);
      CHECK(rel_err(got.data(), want.data(), V) < 1e-5);
      CHECK(rel_err(whole.k.data(), step.k.data(), static_cast<std::int64_t>(step.k.size())) < 1e-5);
      CHECK(rel_err(whole.v.data(), step.v.data(), static_cast<std::int64_t>(step.v.size())) < 1e-5);
      mls::testing::require_error([&] { prefill(p, whole, prompt, got.data(), a); },
                                  "prefill: the cache holds " + std::to_string(n) + " positions");
    }
    KVCache empty(cfg);
    std::vector<float> got(V);
    mls::testing::require_error([&] { prefill(p, empty, {}, got.data()); }, "prefill: a prompt of 0 tokens");
    mls::testing::require_error([&] { prefill(p, empty, {static_cast<std::int32_t>(V)}, got.data()); },
                                "prefill: token " + std::to_string(V));
  }
}

TEST_CASE("KV cache: generation yields exactly the tokens of full recomputation",
          "[lab6][sample][kvcache]") {
  GPTConfig cfg = config_by_name("nano");
  cfg.vocab_size = 13;
  Rng rng(6, "kv-generate");
  const GPTParams p = random_params(cfg, rng);
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  std::vector<SampleOptions> opts(4);
  opts[0].greedy = true;
  opts[1].temperature = 0.8;
  opts[2].top_k = 5;
  opts[3].top_p = 0.9;
  opts[3].temperature = 1.3;
  for (const auto& o : opts) {
    Rng r1(42, "sample"), r2(42, "sample");
    std::vector<std::int32_t> streamed;
    const auto a =
        generate(p, prompt, 25, o, true, r1, [&](std::int32_t t) { streamed.push_back(t); });
    const auto b = generate(p, prompt, 25, o, false, r2);
    // sampled tokens depend on how the rng is used: greedy ones do not
    if (o.greedy) mls::testing::observe("generate(greedy, KV cache), 25 tokens after {1, 2, 3}", a);
    CHECK(a.size() == 25);
    CHECK(a == b);
    CHECK(streamed == a);
  }
}

TEST_CASE("sample_token: greedy, top-k, top-p and temperature follow their definitions",
          "[lab6][sample][sample]") {
  const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f),
                                     std::log(0.4f)};
  Rng rng(8, "sample-token");
  SampleOptions g;
  g.greedy = true;
  MLS_OBSERVE(sample_token(logits.data(), 4, g, rng));
  MLS_CHECK_EQ(sample_token(logits.data(), 4, g, rng), 3);
  auto freq = [&](SampleOptions o, int n) {
    std::map<int, double> f;
    for (int i = 0; i < n; ++i) f[sample_token(logits.data(), 4, o, rng)] += 1.0 / n;
    return f;
  };
  SampleOptions plain;
  auto f = freq(plain, 20000);
  mls::testing::observe("frequencies", std::vector<double>{f[0], f[1], f[2], f[3]}, {0.0, 0.03});  // within the margin on both sides
  MLS_ORACLE_CHECK(CHECK(f[0] == Approx(0.1).margin(0.015)); CHECK(f[3] == Approx(0.4).margin(0.015)));
  SampleOptions k2;
  k2.top_k = 2;  // {3: 0.4, 2: 0.3} renormalised
  f = freq(k2, 20000);
  mls::testing::observe("top-k frequencies", std::vector<double>{f[0], f[1], f[2], f[3]}, {0.0, 0.03});
  mls::testing::observe("top-k never samples", std::vector<double>{f[0], f[1]});  // exactly 0
  MLS_ORACLE_CHECK(CHECK(f[0] == 0.0); CHECK(f[1] == 0.0); CHECK(f[3] == Approx(4.0 / 7).margin(0.015)));
  SampleOptions p5;
  p5.top_p = 0.65;  // 0.4 + 0.3 >= 0.65: {3, 2}
  f = freq(p5, 20000);
  mls::testing::observe("top-p frequencies", std::vector<double>{f[0], f[1], f[2], f[3]}, {0.0, 0.03});
  mls::testing::observe("top-p never samples", f[1]);  // exactly 0
  MLS_ORACLE_CHECK(CHECK(f[1] == 0.0); CHECK(f[2] == Approx(3.0 / 7).margin(0.015)));
  SampleOptions cold;
  cold.temperature = 0.05;  // nearly argmax
  f = freq(cold, 2000);
  mls::testing::observe("cold frequency of the argmax", f[3], {0.0, 0.01});  // each build in (0.99, 1]
  MLS_ORACLE_CHECK(CHECK(f[3] > 0.99));
  SampleOptions k1;
  k1.top_k = 1;
  f = freq(k1, 100);
  MLS_OBSERVE(f[3], {2.4e-5, 0.0});
  MLS_ORACLE_CHECK(CHECK(f[3] == Approx(1.0)));
}

TEST_CASE("KV cache: past the block size the context slides, the same tokens as recomputation, said up front",
          "[lab6][sample][kvcache]") {
  GPTConfig cfg = config_by_name("nano");
  cfg.vocab_size = 13;
  cfg.block_size = 8;
  Rng rng(7, "kv-slide");
  const GPTParams p = random_params(cfg, rng);
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  SampleOptions greedy, drawn;
  greedy.greedy = true;
  drawn.temperature = 0.9;
  for (const auto& o : {greedy, drawn}) {
    Rng r1(3, "sample"), r2(3, "sample");
    std::vector<std::int32_t> streamed;
    // 3 + 20 tokens > block size 8: the cache serves 5 new tokens, the other 15 slide the window
    const auto a = generate(p, prompt, 20, o, true, r1, [&](std::int32_t t) { streamed.push_back(t); });
    const auto b = generate(p, prompt, 20, o, false, r2);
    if (o.greedy) mls::testing::observe("generate(greedy, KV cache), 20 tokens after {1, 2, 3}, block size 8", a);
    MLS_CHECK_EQ(a.size(), 20u);
    CHECK(a == b);
    CHECK(streamed == a);
  }
  // The window past the block size is the last block_size tokens: the token after a context of
  // 9 is the token forward_last gives on its last 8.
  std::vector<std::int32_t> ctx = prompt;
  const auto out = generate(p, prompt, 7, greedy, true, rng);
  ctx.insert(ctx.end(), out.begin(), out.begin() + 6);  // 9 tokens
  const std::vector<float> last = forward_last(p, std::vector<std::int32_t>(ctx.end() - 8, ctx.end()));
  MLS_CHECK_EQ(out[6], sample_token(last.data(), cfg.vocab_size, greedy, rng));
  // Said before sampling: how many tokens the cache serves, how many slide.
  MLS_OBSERVE(generation_note(cfg, 3, 20, true));
  MLS_OBSERVE(generation_note(cfg, 3, 20, false));
  MLS_ORACLE_CHECK(
      CHECK(generation_note(cfg, 3, 5, true) == "");
      CHECK(generation_note(cfg, 3, 20, true) ==
            "the model's context length (block size) is 8 tokens and the prompt has 3: the KV cache serves the first 5 "
            "of the 20 new tokens; the other 15 slide the context over the last 8 tokens, recomputing it for each "
            "(slower: as without the cache, the same tokens)");
      CHECK(generation_note(cfg, 3, 20, false) ==
            "the model's context length (block size) is 8 tokens and the prompt has 3: after the first 5 of the 20 new "
            "tokens, each new token sees only the last 8 tokens (a sliding window)");
      CHECK(generation_note(cfg, 9, 2, false) ==
            "the model's context length (block size) is 8 tokens and the prompt has 9: each new token sees only the "
            "last 8 tokens (a sliding window)"));
}

TEST_CASE("errors: bad sampling options and a prompt longer than the block size",
          "[lab6][sample][errors]") {
  GPTConfig cfg{1, 1, 4, 8, 5};
  const GPTParams p = init_params(cfg, 0);
  Rng rng(0);
  const std::vector<float> logits(5, 0.f);
  SampleOptions o;
  o.temperature = 0;
  mls::testing::require_error([&] { sample_token(logits.data(), 5, o, rng); }, "temperature = 0");
  o.temperature = -1;
  mls::testing::require_error([&] { sample_token(logits.data(), 5, o, rng); }, "temperature = -1");
  o = {};
  o.top_k = 6;
  mls::testing::require_error([&] { sample_token(logits.data(), 5, o, rng); }, "top_k = 6");
  o.top_k = -1;
  mls::testing::require_error([&] { sample_token(logits.data(), 5, o, rng); }, "top_k = -1");
  o = {};
  o.top_p = 0;
  mls::testing::require_error([&] { sample_token(logits.data(), 5, o, rng); }, "top_p = 0");
  o.top_p = 1.5;
  mls::testing::require_error([&] { generate(p, {1}, 3, o, true, rng); }, "top_p = 1.5");
  const std::vector<std::int32_t> long_prompt(9, 1);
  mls::testing::require_error([&] { generate(p, long_prompt, 1, {}, true, rng); },
                              "longer than the block size 8");
  mls::testing::require_error([&] { generate(p, {}, 1, {}, false, rng); }, "empty prompt");
  const auto slid = generate(p, long_prompt, 3, {}, false, rng);
  MLS_CHECK_EQ(slid.size(), 3u);  // the context slides without a cache
}
