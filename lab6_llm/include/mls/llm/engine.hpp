#pragma once
/// Lab 6: a serving engine with iteration-level scheduling (continuous batching, as Orca and vLLM).
///
/// Requests come and go at any step. Each step() is one forward pass (forward_paged) over:
///   - one decode token of every running sequence that has its prompt computed, and
///   - chunks of prompts still to compute (chunked prefill),
/// at most `max_step_tokens` tokens in all. A sequence is a list of tokens (prompt, then what it
/// generated) of which the first `computed` have keys and values in the paged cache; it has
/// `pending = tokens - computed` tokens to run (1 when decoding). When a step computes a
/// sequence's last pending token, the row's logits give its next token.
///
/// The policy (schedule(), the student's): running sequences first, oldest first; each needs the
/// blocks for its chunk, and when the pool runs out the NEWEST running sequence is preempted
/// (its blocks freed; it goes back to the front of the queue and recomputes its tokens later:
/// recompute, not swap). Then waiting requests are admitted in arrival order while the token
/// budget, max_running and free blocks allow (first come, first served: no request jumps the
/// queue). Prompts whose first full blocks equal those of a sequence in the cache share them
/// (prefix sharing) and skip their computation.
///
/// Greedy decoding through the engine gives exactly the tokens of generate() with the KV cache,
/// whatever else is in the batch: every row computes exactly what forward_cached computes.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mls/common/rng.hpp"
#include "mls/llm/kv_cache.hpp"
#include "mls/llm/sample.hpp"

namespace mls::llm {

struct EngineOptions {
  std::int64_t num_blocks = 256;       // KV cache pool
  std::int64_t block_tokens = 16;      // positions per block
  std::int64_t max_step_tokens = 256;  // token budget of one step (decode + prefill chunks)
  std::int64_t max_running = 64;       // sequences in the batch at most
  std::int32_t eos = -1;               // end-of-sequence token (-1: none)
  bool prefix_sharing = true;          // share full prompt blocks between requests
  /// Throws mls::Error naming the option when a value is out of range.
  void validate() const;
};

struct EngineRequest {
  std::vector<std::int32_t> prompt;  // non-empty, ids < vocab_size, shorter than block_size
  std::int64_t max_tokens = 16;      // > 0; also ends at the context length (block_size)
  SampleOptions sample;              // greedy, or temperature / top_k / top_p
  std::uint64_t seed = 0;            // the request's own random stream
  std::vector<std::string> stop;     // stop strings (need EngineOptions' detokenizer)
};

enum class FinishReason { None, Eos, Length, Stop, Cancelled };
/// "eos" / "length" / "stop" / "cancelled" ("" for None).
const char* finish_name(FinishReason r);

/// What a step produced for a request: a new token (token >= 0) and/or its end.
struct EngineEvent {
  std::int64_t id = 0;
  std::int32_t token = -1;  // -1: none (cancelled)
  FinishReason finish = FinishReason::None;
  bool first = false;       // its first token (time to first token)
};

struct EngineStats {
  std::int64_t waiting = 0, running = 0;
  std::int64_t blocks_used = 0, blocks_free = 0, blocks_total = 0;
  std::int64_t preemptions = 0;
  std::int64_t steps = 0;
  std::int64_t prompt_tokens = 0;       // prompt tokens of admitted requests
  std::int64_t computed_tokens = 0;     // rows run through the model (prefill, decode, recompute)
  std::int64_t generated_tokens = 0;
  std::int64_t shared_tokens = 0;       // prompt tokens served by prefix sharing
};

class Engine {
 public:
  /// detok(token) -> text, needed for stop strings (may be empty otherwise). model: the weights
  /// of `params` already packed (engines may share one); null: the engine packs its own.
  Engine(const GPTParams& params, const EngineOptions& opt,
         std::function<std::string(std::int32_t)> detok = {},
         std::shared_ptr<const DecodeModel> model = nullptr);
  /// Queues a request and returns its id. mls::Error (naming the field and value) for an empty
  /// prompt, a token out of range, a prompt of block_size tokens or more, max_tokens <= 0, bad
  /// sample options, stop strings without a detokenizer, or a request whose longest sequence needs
  /// more blocks than the pool has.
  std::int64_t add(const EngineRequest& req);
  /// Ends a request now (its blocks go back to the pool); the next step() reports it Cancelled.
  /// Unknown or finished ids are ignored (a client may cancel after the end).
  void cancel(std::int64_t id);
  /// One iteration: schedule, one batched forward, sample. Returns the step's events.
  std::vector<EngineEvent> step();
  bool idle() const { return waiting_.empty() && running_.empty() && cancelled_.empty(); }
  EngineStats stats() const;
  const PagedKVCache& cache() const { return cache_; }
  /// Adds every step's stage times to *profile from now on (null: stop); mls-serving-bench --profile.
  void set_profile(DecodeProfile* profile) { profile_ = profile; }
  const EngineOptions& options() const { return opt_; }

  /// A step's plan: which sequences run how many of their pending tokens, in running order.
  struct Chunk {
    std::int64_t id;
    std::int64_t n;
  };
  struct Plan {
    std::vector<Chunk> chunks;
    std::vector<std::int64_t> preempted;  // ids preempted by this plan
    std::vector<std::int64_t> admitted;   // ids moved from waiting to running
  };
  /// THE SCHEDULER (student): decides this step's chunks and makes room for them in the cache.
  /// 1. Running sequences (running_, oldest first) while budget remains: n = min(pending, budget);
  ///    while the cache cannot append n positions (cache_.blocks_needed(seq, n) > free blocks),
  ///    preempt the newest running sequence (preempt(); if that is this one, stop step 1);
  ///    then cache_.append(seq, n), plan the chunk, budget -= n.
  /// 2. Waiting requests (waiting_, front first) while budget remains and running_ has room:
  ///    admit() it (prefix sharing), n = min(pending, budget); if the cache cannot append n,
  ///    stop (FCFS: later requests wait too); else append, plan, move it to the back of running_.
  ///    Never admit in a step that preempted (the pool is short).
  Plan schedule();

 private:
  struct Seq {
    std::int64_t id = 0;
    EngineRequest req;
    std::vector<std::int32_t> tokens;  // prompt then generated
    std::int64_t computed = 0;         // tokens with keys and values in the cache
    std::int64_t generated = 0;
    std::optional<PagedKVCache::SeqId> kv;  // while it holds cache blocks
    Rng rng;
    std::string text;                  // the generated text (for stop strings)
    bool counted = false;              // its prompt counted in the stats (once, even if preempted)
    std::int64_t pending() const { return static_cast<std::int64_t>(tokens.size()) - computed; }
  };
  Seq& seq(std::int64_t id);
  /// Frees the sequence's blocks, computed = 0, back to the front of waiting_ (recompute later).
  void preempt(std::int64_t id);
  /// Gives a waiting sequence its cache sequence, sharing the full prompt blocks that the prefix
  /// index has (computed advances over them).
  void admit(std::int64_t id);
  void release(Seq& s);
  void index_blocks(Seq& s);

  const GPTParams& params_;
  std::shared_ptr<const DecodeModel> model_;  // the weights packed for forward_paged
  DecodeScratch scratch_;                     // its buffers, reused from step to step
  std::vector<PagedRow> rows_;                // a step's rows, its sampled ids and their logits:
  std::vector<std::int64_t> sampled_;         // kept from step to step (no allocation per step
  std::vector<float> logits_;                 // once the largest batch was seen)
  DecodeProfile* profile_ = nullptr;
  EngineOptions opt_;
  std::function<std::string(std::int32_t)> detok_;
  PagedKVCache cache_;
  std::map<std::int64_t, Seq> seqs_;
  std::deque<std::int64_t> waiting_;
  std::vector<std::int64_t> running_;  // admission order, oldest first
  std::vector<std::int64_t> cancelled_;
  std::int64_t next_id_ = 0;
  // prefix index: the tokens of positions 0 .. (i+1)*bt -> (block, generation)
  std::map<std::vector<std::int32_t>, std::pair<std::int32_t, std::uint64_t>> prefix_;
  EngineStats stats_;
};

}  // namespace mls::llm
