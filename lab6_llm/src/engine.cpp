// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6: the serving engine — continuous batching over the paged KV cache.
#include "mls/llm/engine.hpp"

#include <algorithm>

#include "mls/common/error.hpp"

namespace mls::llm {

void EngineOptions::validate() const {
  MLS_CHECK(num_blocks >= 1, "engine: num_blocks = ", num_blocks, ", expected >= 1");
  MLS_CHECK(block_tokens >= 1 && block_tokens <= 4096, "engine: block_tokens = ", block_tokens,
            ", expected 1 <= block_tokens <= 4096");
  MLS_CHECK(max_step_tokens >= 1, "engine: max_step_tokens = ", max_step_tokens, ", expected >= 1");
  MLS_CHECK(max_running >= 1, "engine: max_running = ", max_running, ", expected >= 1");
}

const char* finish_name(FinishReason r) {
  switch (r) {
    case FinishReason::Eos: return "eos";
    case FinishReason::Length: return "length";
    case FinishReason::Stop: return "stop";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::None: break;
  }
  return "";
}

Engine::Engine(const GPTParams& params, const EngineOptions& opt,
               std::function<std::string(std::int32_t)> detok, std::shared_ptr<const DecodeModel> model)
    : params_(params), model_(model ? std::move(model) : std::make_shared<const DecodeModel>(params)),
      opt_((opt.validate(), opt)), detok_(std::move(detok)),
      cache_(params.config(), opt.num_blocks, opt.block_tokens) {
  MLS_CHECK(&model_->params() == &params, "engine: a packed model of other parameters, expected the "
            "DecodeModel of these parameters");
  MLS_CHECK(opt.eos < params.config().vocab_size, "engine: eos = ", opt.eos, ", expected -1 (none) or < vocab_size = ",
            params.config().vocab_size);
}

Engine::Seq& Engine::seq(std::int64_t id) {
  auto it = seqs_.find(id);
  MLS_CHECK(it != seqs_.end(), "engine: no request ", id);
  return it->second;
}

std::int64_t Engine::add(const EngineRequest& req) {
  const GPTConfig& cfg = params_.config();
  const auto n = static_cast<std::int64_t>(req.prompt.size());
  MLS_CHECK(n > 0, "engine: empty prompt, expected at least one token");
  MLS_CHECK(n < cfg.block_size, "engine: a prompt of ", n, " tokens, expected fewer than the context length ",
            cfg.block_size, " (room for at least one new token)");
  for (auto t : req.prompt)
    MLS_CHECK(t >= 0 && t < cfg.vocab_size, "engine: prompt token ", t, ", expected 0 <= token < vocab_size = ",
              cfg.vocab_size);
  MLS_CHECK(req.max_tokens > 0, "engine: max_tokens = ", req.max_tokens, ", expected > 0");
  if (!req.sample.greedy) validate_sample_options(req.sample, cfg.vocab_size);
  MLS_CHECK(req.stop.empty() || detok_, "engine: stop strings need a detokenizer");
  for (const auto& s : req.stop) MLS_CHECK(!s.empty(), "engine: an empty stop string");
  const std::int64_t longest = std::min(cfg.block_size, n + req.max_tokens);
  const std::int64_t blocks = (longest + opt_.block_tokens - 1) / opt_.block_tokens;
  MLS_CHECK(blocks <= opt_.num_blocks, "engine: a request of up to ", longest, " tokens needs ", blocks,
            " KV blocks, the pool has ", opt_.num_blocks);
  const std::int64_t id = next_id_++;
  Seq s;
  s.id = id;
  s.req = req;
  s.tokens = req.prompt;
  s.rng = Rng(req.seed, "engine-sample");
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(id);
  return id;
}

void Engine::release(Seq& s) {
  if (s.kv) cache_.free_sequence(*s.kv);
  s.kv.reset();
  s.computed = 0;
}

void Engine::cancel(std::int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  release(it->second);
  std::erase(running_, id);
  std::erase(waiting_, id);
  seqs_.erase(it);
  cancelled_.push_back(id);
}

void Engine::preempt(std::int64_t id) {
  Seq& s = seq(id);
  release(s);
  std::erase(running_, id);
  waiting_.push_front(id);
  ++stats_.preemptions;
}

void Engine::admit(std::int64_t id) {
  Seq& s = seq(id);
  if (!s.kv) s.kv = cache_.add_sequence();
  if (!opt_.prefix_sharing || s.computed > 0) return;
  const std::int64_t bt = opt_.block_tokens;
  // full blocks only, and at least one token left to compute (its logits give the next token)
  const std::int64_t full = (static_cast<std::int64_t>(s.tokens.size()) - 1) / bt;
  for (std::int64_t i = 0; i < full; ++i) {
    std::vector<std::int32_t> key(s.tokens.begin(), s.tokens.begin() + (i + 1) * bt);
    auto it = prefix_.find(key);
    if (it == prefix_.end()) break;
    const auto [block, gen] = it->second;
    if (cache_.allocator().ref_count(block) == 0 || cache_.generation(block) != gen) {
      prefix_.erase(it);  // freed since (and maybe handed out again)
      break;
    }
    cache_.attach(*s.kv, block);
    s.computed += bt;
    stats_.shared_tokens += bt;
  }
}

void Engine::index_blocks(Seq& s) {
  if (!opt_.prefix_sharing || !s.kv) return;
  const std::int64_t bt = opt_.block_tokens;
  const auto& table = cache_.block_table(*s.kv);
  const std::int64_t full = std::min<std::int64_t>(s.computed / bt, static_cast<std::int64_t>(table.size()));
  for (std::int64_t i = 0; i < full; ++i) {
    std::vector<std::int32_t> key(s.tokens.begin(), s.tokens.begin() + (i + 1) * bt);
    const std::int32_t b = table[static_cast<std::size_t>(i)];
    prefix_[std::move(key)] = {b, cache_.generation(b)};
  }
  if (static_cast<std::int64_t>(prefix_.size()) > 4 * opt_.num_blocks) {  // drop stale entries
    std::erase_if(prefix_, [&](const auto& kv) {
      return cache_.allocator().ref_count(kv.second.first) == 0 ||
             cache_.generation(kv.second.first) != kv.second.second;
    });
  }
}

Engine::Plan Engine::schedule() {
  Plan plan;
  // BEGIN SOLUTION
  std::int64_t budget = opt_.max_step_tokens;
  // 1. the running sequences, oldest first; preempt the newest when the pool runs out
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    const std::int64_t id = running_[i];
    Seq& s = seq(id);
    const std::int64_t n = std::min(s.pending(), budget);
    bool self_preempted = false;
    while (cache_.blocks_needed(*s.kv, n) > cache_.free_blocks()) {
      const std::int64_t victim = running_.back();
      preempt(victim);
      plan.preempted.push_back(victim);
      if (victim == id) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    cache_.append(*s.kv, n);
    plan.chunks.push_back({id, n});
    budget -= n;
    ++i;
  }
  // 2. admit waiting requests in arrival order while the budget, the batch and the pool allow
  while (plan.preempted.empty() && budget > 0 && !waiting_.empty() &&
         static_cast<std::int64_t>(running_.size()) < opt_.max_running) {
    const std::int64_t id = waiting_.front();
    admit(id);
    Seq& s = seq(id);
    const std::int64_t n = std::min(s.pending(), budget);
    if (cache_.blocks_needed(*s.kv, n) > cache_.free_blocks()) {
      release(s);  // gives back the shared blocks it attached; it stays first in line
      break;
    }
    cache_.append(*s.kv, n);
    waiting_.pop_front();
    running_.push_back(id);
    plan.admitted.push_back(id);
    plan.chunks.push_back({id, n});
    budget -= n;
  }
  // END SOLUTION
  return plan;
}

std::vector<EngineEvent> Engine::step() {
  DecodeProfile* prof = profile_;
  const double t0 = prof ? prof->now() : 0;
  double forward_time = 0;
  std::vector<EngineEvent> events;
  for (auto id : cancelled_) events.push_back({id, -1, FinishReason::Cancelled, false});
  cancelled_.clear();
  const Plan plan = schedule();
  const double scheduled = prof ? prof->now() - t0 : 0;
  const GPTConfig& cfg = params_.config();
  std::vector<PagedRow>& rows = rows_;
  std::vector<std::int64_t>& sampled = sampled_;  // ids whose last pending token runs in this step
  rows.clear();
  sampled.clear();
  for (const auto& c : plan.chunks) {
    Seq& s = seq(c.id);
    MLS_CHECK(c.n >= 1 && c.n <= s.pending() && s.kv, "engine: plan of ", c.n, " tokens for request ", c.id,
              " with ", s.pending(), " pending");
    if (!s.counted) stats_.prompt_tokens += static_cast<std::int64_t>(s.req.prompt.size());
    s.counted = true;
    for (std::int64_t j = 0; j < c.n; ++j) {
      const std::int64_t pos = s.computed + j;
      const bool last = pos + 1 == static_cast<std::int64_t>(s.tokens.size());
      rows.push_back({*s.kv, s.tokens[static_cast<std::size_t>(pos)], pos, last});
      if (last) sampled.push_back(c.id);
    }
  }
  std::vector<float>& logits = logits_;
  if (logits.size() < sampled.size() * static_cast<std::size_t>(cfg.vocab_size))
    logits.resize(sampled.size() * static_cast<std::size_t>(cfg.vocab_size));
  const double before = prof ? prof->now() - t0 : 0;
  forward_paged(*model_, scratch_, cache_, rows, logits.data(), prof);
  if (prof) forward_time = prof->now() - t0 - before;
  ++stats_.steps;
  stats_.computed_tokens += static_cast<std::int64_t>(rows.size());
  for (const auto& c : plan.chunks) {
    Seq& s = seq(c.id);
    s.computed += c.n;
    index_blocks(s);
  }
  const double sampling = prof ? prof->now() - t0 : 0;
  for (std::size_t k = 0; k < sampled.size(); ++k) {
    Seq& s = seq(sampled[k]);
    const std::int32_t t =
        sample_token(logits.data() + k * static_cast<std::size_t>(cfg.vocab_size), cfg.vocab_size, s.req.sample, s.rng);
    s.tokens.push_back(t);
    ++s.generated;
    ++stats_.generated_tokens;
    FinishReason fin = FinishReason::None;
    if (t == opt_.eos) {
      fin = FinishReason::Eos;
    } else if (!s.req.stop.empty()) {
      s.text += detok_(t);
      for (const auto& st : s.req.stop)
        if (s.text.find(st) != std::string::npos) fin = FinishReason::Stop;
    }
    if (fin == FinishReason::None &&
        (s.generated >= s.req.max_tokens || static_cast<std::int64_t>(s.tokens.size()) >= cfg.block_size))
      fin = FinishReason::Length;
    events.push_back({s.id, t, fin, s.generated == 1});
    if (fin != FinishReason::None) {
      release(s);
      std::erase(running_, s.id);
      seqs_.erase(s.id);
    }
  }
  if (prof) {
    const double end = prof->now() - t0;
    prof->schedule += scheduled;
    prof->sample += end - sampling;
    prof->other += sampling - scheduled - forward_time;
  }
  return events;
}

EngineStats Engine::stats() const {
  EngineStats st = stats_;
  st.waiting = static_cast<std::int64_t>(waiting_.size());
  st.running = static_cast<std::int64_t>(running_.size());
  st.blocks_total = cache_.num_blocks();
  st.blocks_free = cache_.free_blocks();
  st.blocks_used = st.blocks_total - st.blocks_free;
  return st;
}

}  // namespace mls::llm
