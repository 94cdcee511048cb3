// Lab 6: the serving engine (continuous batching, chunked prefill, preemption, prefix sharing):
// every request gets exactly the tokens of the single-sequence sampler (generate with the KV
// cache), whatever else is in the batch.
#include <catch2/catch.hpp>

#include <map>

#include "mls/llm/engine.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace llm_test;
using mls::testing::require_error;

namespace {

GPTConfig engine_config(std::int64_t V) {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 40;
  c.vocab_size = V;
  return c;
}

struct Outcome {
  std::vector<std::int32_t> tokens;
  FinishReason finish = FinishReason::None;
  int firsts = 0;
};

/// Runs the engine until idle; adds requests[i] at step arrive[i]. Returns each request's tokens.
std::vector<Outcome> run_engine(Engine& e, const std::vector<EngineRequest>& reqs,
                                const std::vector<std::int64_t>& arrive, std::int64_t max_steps = 100000) {
  std::vector<Outcome> out(reqs.size());
  std::map<std::int64_t, std::size_t> index;
  std::size_t next = 0;
  for (std::int64_t step = 0; step < max_steps; ++step) {
    for (std::size_t i = 0; i < reqs.size(); ++i)
      if (arrive[i] == step) index[e.add(reqs[i])] = i, ++next;
    if (next == reqs.size() && e.idle()) break;
    for (const auto& ev : e.step()) {
      Outcome& o = out[index.at(ev.id)];
      if (ev.token >= 0) o.tokens.push_back(ev.token);
      if (ev.first) ++o.firsts;
      if (ev.finish != FinishReason::None) {
        REQUIRE(o.finish == FinishReason::None);  // never answered twice
        o.finish = ev.finish;
      }
    }
  }
  return out;
}

std::vector<EngineRequest> random_requests(Rng& rng, const GPTConfig& cfg, int n, bool greedy,
                                           const std::vector<std::int32_t>& common = {}) {
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < n; ++i) {
    EngineRequest r;
    r.prompt = common;
    const std::int64_t len = rng.randint(1, 18);
    for (std::int64_t j = 0; j < len; ++j) r.prompt.push_back(static_cast<std::int32_t>(rng.randint(0, cfg.vocab_size)));
    r.max_tokens = rng.randint(1, cfg.block_size - static_cast<std::int64_t>(r.prompt.size()) + 1);
    r.sample.greedy = greedy;
    if (!greedy) {
      r.sample.temperature = 0.7 + 0.1 * static_cast<double>(i % 5);
      r.sample.top_k = i % 3 == 0 ? 5 : 0;
      r.sample.top_p = i % 2 == 0 ? 0.9 : 1.0;
    }
    r.seed = 1000 + static_cast<std::uint64_t>(i);
    reqs.push_back(r);
  }
  return reqs;
}

/// The single-sequence sampler, the engine's oracle: generate() with the KV cache and the
/// request's own random stream.
std::vector<std::int32_t> single(const GPTParams& p, const EngineRequest& r) {
  Rng rng(r.seed, "engine-sample");
  return generate(p, r.prompt, r.max_tokens, r.sample, true, rng);
}

}  // namespace

TEST_CASE("engine: greedy and sampled tokens equal the single-sequence sampler's, mixed lengths and arrivals",
          "[lab6][engine]") {
  const GPTConfig cfg = engine_config(11);
  Rng rng(21, "engine-mixed");
  const GPTParams p = random_params(cfg, rng);
  for (const bool greedy : {true, false}) {
    EngineOptions opt;
    opt.num_blocks = 64;
    opt.block_tokens = 4;
    opt.max_step_tokens = 12;  // chunked prefill: prompts of up to 17 tokens take several steps
    Engine e(p, opt);
    const auto reqs = random_requests(rng, cfg, 12, greedy);
    std::vector<std::int64_t> arrive;
    for (std::size_t i = 0; i < reqs.size(); ++i) arrive.push_back(rng.randint(0, 15));
    const auto out = run_engine(e, reqs, arrive);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      mls::testing::observe(std::string(greedy ? "greedy" : "sampled") + " tokens of request " + std::to_string(i),
                            out[i].tokens);
      CHECK(out[i].tokens == single(p, reqs[i]));
      CHECK(out[i].finish == FinishReason::Length);
      CHECK(out[i].firsts == 1);
    }
    const EngineStats st = e.stats();
    CHECK(st.blocks_free == opt.num_blocks);  // every block back in the pool
    CHECK(st.running == 0);
    CHECK(st.waiting == 0);
    mls::testing::observe(std::string(greedy ? "greedy" : "sampled") + ": steps, generated",
                          std::vector<std::int64_t>{st.steps, st.generated_tokens});
  }
}

TEST_CASE("engine: a tiny pool forces preemption (recompute) and the tokens stay the same",
          "[lab6][engine][preempt]") {
  const GPTConfig cfg = engine_config(9);
  Rng rng(22, "engine-preempt");
  const GPTParams p = random_params(cfg, rng);
  EngineOptions opt;
  opt.num_blocks = 20;  // 40 positions in blocks of 2: the longest request, a few at a time
  opt.block_tokens = 2;
  opt.max_step_tokens = 64;
  Engine e(p, opt);
  auto reqs = random_requests(rng, cfg, 10, true);
  for (auto& r : reqs) r.max_tokens = std::min<std::int64_t>(20, cfg.block_size - static_cast<std::int64_t>(r.prompt.size()));
  const auto out = run_engine(e, reqs, std::vector<std::int64_t>(reqs.size(), 0));
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    mls::testing::observe("tokens of request " + std::to_string(i) + " under preemption", out[i].tokens);
    CHECK(out[i].tokens == single(p, reqs[i]));
  }
  const EngineStats st = e.stats();
  mls::testing::observe("preemptions > 0", st.preemptions > 0);
  CHECK(st.preemptions > 0);
  CHECK(st.blocks_free == opt.num_blocks);
  CHECK(st.computed_tokens > st.prompt_tokens + st.generated_tokens - static_cast<std::int64_t>(reqs.size()));
}

TEST_CASE("engine: the scheduler runs decodes first, admits in order within the budget, preempts the newest",
          "[lab6][engine][preempt]") {
  const GPTConfig cfg = engine_config(7);
  Rng rng(23, "engine-plan");
  const GPTParams p = random_params(cfg, rng);
  EngineOptions opt;
  opt.num_blocks = 10;  // 40 positions: each request alone, not the three together
  opt.block_tokens = 4;
  opt.max_step_tokens = 10;
  opt.prefix_sharing = false;
  Engine e(p, opt);
  EngineRequest a, b, c;
  a.prompt = std::vector<std::int32_t>(7, 1);
  b.prompt = std::vector<std::int32_t>(6, 2);
  c.prompt = std::vector<std::int32_t>(3, 3);
  a.max_tokens = b.max_tokens = c.max_tokens = 20;
  a.sample.greedy = b.sample.greedy = c.sample.greedy = true;
  const auto ia = e.add(a), ib = e.add(b);
  e.add(c);
  // the first plan: a's 7 prompt tokens, then b's first 3 (the budget of 10); c waits
  const auto plan = e.schedule();
  std::vector<std::int64_t> trace;  // (id, n) of each chunk, then -1, the admitted ids
  for (const auto& ch : plan.chunks) trace.insert(trace.end(), {ch.id, ch.n});
  trace.push_back(-1);
  trace.insert(trace.end(), plan.admitted.begin(), plan.admitted.end());
  mls::testing::observe("the first plan: (id, n)..., -1, admitted...", trace);
  CHECK(trace == std::vector<std::int64_t>{ia, 7, ib, 3, -1, ia, ib});
  CHECK(plan.preempted.empty());
  CHECK(e.stats().blocks_used == 3);  // ceil(7/4) + ceil(3/4)
  // now drive by step(): the pool of 10 blocks (40 positions) cannot hold a, b and c grown to 23-27
  Engine e2(p, opt);
  const std::vector<EngineRequest> reqs{a, b, c};
  const auto out = run_engine(e2, reqs, {0, 0, 0});
  std::vector<std::int64_t> lens;
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(out[i].tokens == single(p, reqs[i]));
    lens.push_back(static_cast<std::int64_t>(out[i].tokens.size()));
  }
  mls::testing::observe("tokens per request (a, b, c)", lens);
  CHECK(e2.stats().preemptions > 0);
  CHECK(e2.stats().blocks_free == 10);
}

TEST_CASE("engine: prompts with a common prefix share its blocks and get the same tokens",
          "[lab6][engine][prefix]") {
  const GPTConfig cfg = engine_config(13);
  Rng rng(24, "engine-prefix");
  const GPTParams p = random_params(cfg, rng);
  std::vector<std::int32_t> common;
  for (int i = 0; i < 13; ++i) common.push_back(static_cast<std::int32_t>(rng.randint(0, 13)));
  auto reqs = random_requests(rng, cfg, 8, true, common);
  for (auto& r : reqs) {
    r.prompt.resize(std::min<std::size_t>(r.prompt.size(), 20));
    r.max_tokens = std::min<std::int64_t>(r.max_tokens, cfg.block_size - static_cast<std::int64_t>(r.prompt.size()));
  }
  EngineOptions opt;
  opt.num_blocks = 80;
  opt.block_tokens = 4;
  opt.max_step_tokens = 32;
  Engine e(p, opt);
  std::vector<std::int64_t> arrive{0, 3, 3, 4, 6, 8, 9, 9};
  const auto out = run_engine(e, reqs, arrive);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    mls::testing::observe("tokens of request " + std::to_string(i) + " with a shared prefix", out[i].tokens);
    CHECK(out[i].tokens == single(p, reqs[i]));
  }
  const EngineStats st = e.stats();
  mls::testing::observe("prompt tokens served by shared blocks", st.shared_tokens);
  CHECK(st.shared_tokens >= 7 * 12);  // 3 full blocks of the 13 common tokens, for the 7 later requests
  CHECK(st.blocks_free == opt.num_blocks);
}

TEST_CASE("engine: EOS, stop strings and cancellation end a request, bad requests are errors",
          "[lab6][engine]") {
  const GPTConfig cfg = engine_config(5);
  Rng rng(25, "engine-finish");
  const GPTParams p = random_params(cfg, rng);
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 30;
  r.sample.greedy = true;
  const auto ref = single(p, r);
  // EOS: the first token of the reference that is not the first one generated
  EngineOptions opt;
  opt.num_blocks = 32;
  opt.block_tokens = 4;
  opt.eos = ref[3];
  {
    Engine e(p, opt);
    const auto out = run_engine(e, {r}, {0});
    const auto at = std::find(ref.begin(), ref.end(), opt.eos) - ref.begin();
    mls::testing::observe("tokens up to EOS", out[0].tokens);
    CHECK(out[0].tokens == std::vector<std::int32_t>(ref.begin(), ref.begin() + at + 1));
    CHECK(out[0].finish == FinishReason::Eos);
  }
  // stop string: letters a.. for the tokens; stop at the text of tokens 4..5 of the reference
  opt.eos = -1;
  const auto detok = [](std::int32_t t) { return std::string(1, static_cast<char>('a' + t)); };
  {
    Engine e(p, opt, detok);
    EngineRequest rs = r;
    rs.stop = {detok(ref[4]) + detok(ref[5]), "zzz"};
    const auto out = run_engine(e, {rs}, {0});
    mls::testing::observe("tokens up to the stop string", out[0].tokens);
    CHECK(out[0].finish == FinishReason::Stop);
    CHECK(out[0].tokens.size() <= 6);
    CHECK(std::equal(out[0].tokens.begin(), out[0].tokens.end(), ref.begin()));
  }
  // cancellation mid-generation frees the blocks at once
  {
    Engine e(p, opt);
    const auto id = e.add(r);
    std::vector<std::int32_t> got;
    for (int s = 0; s < 5; ++s)
      for (const auto& ev : e.step()) got.push_back(ev.token);
    CHECK(e.stats().blocks_free < opt.num_blocks);
    e.cancel(id);
    CHECK(e.stats().blocks_free == opt.num_blocks);
    const auto evs = e.step();
    REQUIRE(evs.size() == 1);
    CHECK(evs[0].finish == FinishReason::Cancelled);
    CHECK(e.idle());
    e.cancel(id);  // again: ignored
    mls::testing::observe("tokens before the cancel", got);
    CHECK(got == std::vector<std::int32_t>(ref.begin(), ref.begin() + 5));
  }
  Engine e(p, opt);
  EngineRequest bad = r;
  bad.prompt = {};
  require_error([&] { e.add(bad); }, "empty prompt");
  bad.prompt = {1, 5};
  require_error([&] { e.add(bad); }, "prompt token 5");
  bad.prompt = std::vector<std::int32_t>(40, 1);
  require_error([&] { e.add(bad); }, "a prompt of 40 tokens");
  bad.prompt = {1};
  bad.max_tokens = 0;
  require_error([&] { e.add(bad); }, "max_tokens = 0");
  bad.max_tokens = 5;
  bad.stop = {"x"};
  require_error([&] { e.add(bad); }, "stop strings need a detokenizer");
  bad.stop = {};
  bad.sample.greedy = false;
  bad.sample.temperature = -1;
  require_error([&] { e.add(bad); }, "temperature = -1");
  EngineOptions small = opt;
  small.num_blocks = 2;
  Engine e2(p, small);
  r.max_tokens = 30;
  require_error([&] { e2.add(r); }, "needs 9 KV blocks, the pool has 2");
  small.max_step_tokens = 0;
  require_error([&] { Engine(p, small); }, "max_step_tokens = 0");
}
