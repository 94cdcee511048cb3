#pragma once
/// Lab 6: a paged KV cache (as vLLM's PagedAttention): keys and values in fixed-size blocks of
/// `block_tokens` positions taken from one pool, a block table per sequence, reference counts so
/// that sequences share the blocks of a common prefix, copy-on-write when they diverge.
///
/// The contiguous KVCache (sample.hpp) reserves block_size positions per sequence up front; a
/// server with many sequences of unknown lengths wastes most of that. Here a sequence holds
/// ceil(length / block_tokens) blocks, at most block_tokens - 1 positions wasted, and a block goes
/// back to the pool the moment its last sequence is done.
///
///   pool:  v  (num_blocks, L, block_tokens, C)   a position's values side by side
///          k  (num_blocks, L, C, block_tokens)   keys transposed inside a block: channel c of
///                                                the block's positions side by side
///   table: block_table(seq)[i] = the pool block holding positions i*bt .. i*bt + bt - 1
///
/// Position p of a sequence lives in block table[p / bt] at offset p % bt (slot()). The keys are
/// stored channel-major so that decode attention's scores run over 16 positions of a block in the
/// vector lanes (each lane its own dot product over the head's channels, in order), where a
/// position-major block would leave one scalar dot product per position and head.
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "mls/llm/model.hpp"
#include "mls/llm/rowgemm.hpp"

namespace mls::llm {

/// Returned by BlockAllocator::allocate when the pool is empty: the scheduler's signal to wait
/// or preempt (never an exception: running out of blocks is normal under load).
constexpr std::int32_t kNoBlock = -1;

/// The pool's bookkeeping: a free list and a reference count per block.
class BlockAllocator {
 public:
  /// num_blocks >= 1 (an mls::Error otherwise). Every block free, ref_count 0.
  explicit BlockAllocator(std::int64_t num_blocks);
  std::int64_t num_blocks() const { return static_cast<std::int64_t>(ref_.size()); }
  std::int64_t num_free() const { return static_cast<std::int64_t>(free_.size()); }
  std::int32_t ref_count(std::int32_t block) const;

  /// Takes a free block (reference count 1), or returns kNoBlock when none is free.
  /// The free list is a stack: a fresh allocator hands out 0, 1, 2, ... in order, and a block
  /// released to 0 references is the next one handed out (LIFO: its memory is still in cache).
  /// Hint: free_ holds the free blocks with the next one to hand out at the back.
  std::int32_t allocate();
  /// One more sequence uses `block` (prefix sharing): reference count + 1. An mls::Error when the
  /// block is out of range or free.
  void retain(std::int32_t block);
  /// One sequence fewer uses `block`: reference count - 1; at 0 the block goes back on the free
  /// list. Returns true when it was freed. An mls::Error when out of range or already free (a
  /// double free must never corrupt the free list).
  bool release(std::int32_t block);

 private:
  std::vector<std::int32_t> free_;  // free blocks, next to hand out at the back
  std::vector<std::int32_t> ref_;   // (num_blocks) sequences using each block; 0 = free
};

/// Where position `pos` of a sequence lives: pool block and offset inside it.
struct KVSlot {
  std::int32_t block = kNoBlock;
  std::int64_t offset = 0;
};

/// Block-table lookup: position `pos` of the sequence whose table is `table`, with `block_tokens`
/// positions per block, is in table[pos / block_tokens] at offset pos % block_tokens. An
/// mls::Error naming pos when pos < 0 or beyond the table's blocks.
KVSlot block_table_lookup(std::span<const std::int32_t> table, std::int64_t block_tokens, std::int64_t pos);

/// The paged cache of one model: a pool of blocks and the sequences' block tables.
class PagedKVCache {
 public:
  using SeqId = std::int64_t;
  /// num_blocks blocks of block_tokens positions for `cfg` (validated; both counts >= 1).
  PagedKVCache(const GPTConfig& cfg, std::int64_t num_blocks, std::int64_t block_tokens = 16);
  const GPTConfig& config() const { return cfg_; }
  std::int64_t block_tokens() const { return bt_; }
  std::int64_t num_blocks() const { return alloc_.num_blocks(); }
  std::int64_t free_blocks() const { return alloc_.num_free(); }
  const BlockAllocator& allocator() const { return alloc_; }
  /// Bytes of the pool (keys and values): 2 * num_blocks * L * block_tokens * C * 4.
  std::int64_t pool_bytes() const;

  /// A new, empty sequence (no blocks).
  SeqId add_sequence();
  /// A new sequence sharing every block of `parent` (reference counts + 1), the same length: the
  /// prefix costs no memory. The first append into a shared, partly filled last block copies it
  /// (copy-on-write), so the two never see each other's later tokens.
  SeqId fork(SeqId parent);
  /// Releases the sequence's blocks and forgets it.
  void free_sequence(SeqId seq);
  bool has_sequence(SeqId seq) const { return seqs_.count(seq) != 0; }
  std::int64_t num_sequences() const { return static_cast<std::int64_t>(seqs_.size()); }
  std::int64_t length(SeqId seq) const;
  const std::vector<std::int32_t>& block_table(SeqId seq) const;

  /// Blocks that append(seq, n) would take from the pool (new blocks, plus one for a copy-on-write
  /// of a shared, partly filled last block).
  std::int64_t blocks_needed(SeqId seq, std::int64_t n) const;
  /// Makes room for n more positions (length += n): new blocks from the pool, copy-on-write of a
  /// shared last block. Returns false and changes nothing when the pool has too few free blocks.
  bool append(SeqId seq, std::int64_t n);
  /// Appends `block`, a full block of another sequence's positions (the same tokens at the same
  /// positions), to a sequence whose length is a multiple of block_tokens: reference count + 1,
  /// length += block_tokens (prefix sharing between requests with a common prompt).
  void attach(SeqId seq, std::int32_t block);
  /// How many times `block` was handed out by the pool: a stale reference to a block that was
  /// freed and handed out again (the engine's prefix index) sees a different number.
  std::uint64_t generation(std::int32_t block) const { return gen_.at(static_cast<std::size_t>(block)); }

  /// Position pos (< length) of the sequence: block_table_lookup on its table.
  KVSlot slot(SeqId seq, std::int64_t pos) const;
  /// Keys of position pos of layer l (through slot()): channel c at key(...)[c * block_tokens()]
  /// (keys are channel-major in a block); values: C floats side by side.
  float* key(SeqId seq, std::int64_t l, std::int64_t pos);
  float* value(SeqId seq, std::int64_t l, std::int64_t pos);
  const float* key(SeqId seq, std::int64_t l, std::int64_t pos) const;
  const float* value(SeqId seq, std::int64_t l, std::int64_t pos) const;
  /// Keys / values of layer l at a slot (from block_table_lookup on block_table(seq)); the keys'
  /// channel stride is block_tokens(), the values' 1.
  const float* key_at(const KVSlot& s, std::int64_t l) const { return k_.data() + offset(s, l, true); }
  const float* value_at(const KVSlot& s, std::int64_t l) const { return v_.data() + offset(s, l, false); }
  float* key_at(const KVSlot& s, std::int64_t l) { return k_.data() + offset(s, l, true); }
  float* value_at(const KVSlot& s, std::int64_t l) { return v_.data() + offset(s, l, false); }

 private:
  struct Seq {
    std::vector<std::int32_t> table;
    std::int64_t len = 0;
  };
  Seq& seq_ref(SeqId seq, const char* op);
  const Seq& seq_ref(SeqId seq, const char* op) const;
  std::int64_t offset(const KVSlot& s, std::int64_t l, bool key) const;  // float offset in k_ / v_
  std::int32_t take_block();

  GPTConfig cfg_;
  std::int64_t bt_;
  BlockAllocator alloc_;
  std::vector<float> k_, v_;     // (num_blocks, L, C, bt), (num_blocks, L, bt, C)
  std::vector<std::uint64_t> gen_;  // (num_blocks) times handed out
  std::map<SeqId, Seq> seqs_;
  SeqId next_id_ = 0;
};

/// One token of one sequence in a batched forward pass.
struct PagedRow {
  PagedKVCache::SeqId seq = 0;
  std::int32_t token = 0;
  std::int64_t pos = 0;        // its position: < cache.length(seq) (append first)
  bool want_logits = false;    // write the next-token logits of this row
};

/// Where forward_paged and Engine::step spend their time (seconds summed over the steps), when
/// asked (forward_paged's profile, Engine::set_profile): mls-serving-bench --profile prints it.
struct DecodeProfile {
  double embed = 0;      // token + position embeddings
  double layernorm = 0;  // ln1, ln2 of every layer, and ln_f
  double qkv = 0;        // the q|k|v GEMM of every layer
  double kv_write = 0;   // keys and values into the paged cache
  double attention = 0;  // every row's attention over its sequence's cached positions
  double attproj = 0;    // the attention projection GEMM (and the residual add, its epilogue)
  double mlp = 0;        // fc GEMM, fcproj GEMM (and the residual add, its epilogue)
  double gelu = 0;       // fc's bias and GELU (lab 4's bias_gelu_forward)
  double head = 0;       // the LM head GEMM (rows that want logits)
  double schedule = 0;   // Engine::schedule (admission, preemption, block allocation)
  double sample = 0;     // sample_token for every finished row, stop strings, finishing
  double other = 0;      // the rest of Engine::step (building rows, prefix index, events)
  std::int64_t steps = 0, rows = 0;
  std::int64_t logit_rows = 0;   // rows that went through the LM head (want_logits)
  std::int64_t team_steps = 0;  // steps whose stages the threads shared as a team (threads > 1)
  bool cpu_time = false;  // time with the process's CPU clock (a busy machine, one thread), else wall
  /// Seconds on the chosen clock (from an arbitrary origin).
  double now() const;
  double total() const {
    return embed + layernorm + qkv + kv_write + attention + attproj + mlp + gelu + head + schedule + sample +
           other;
  }
};

/// A model ready for forward_paged: its matmul weights packed once for the decode GEMM
/// (rowgemm.hpp: q|k|v, projection, fc, fcproj of every layer and the tied LM head wte). Read
/// only once built, so engines may share one (std::shared_ptr<const DecodeModel>). It refers to
/// `params`: keep them alive and unchanged (pack again after an update). Dense models only (an
/// mls::Error for a config with MoE blocks).
class DecodeModel {
 public:
  explicit DecodeModel(const GPTParams& params);
  const GPTParams& params() const { return *params_; }
  const PackedMatrix& qkvw(std::int64_t l) const { return qkvw_.at(static_cast<std::size_t>(l)); }
  const PackedMatrix& attprojw(std::int64_t l) const { return attprojw_.at(static_cast<std::size_t>(l)); }
  const PackedMatrix& fcw(std::int64_t l) const { return fcw_.at(static_cast<std::size_t>(l)); }
  const PackedMatrix& fcprojw(std::int64_t l) const { return fcprojw_.at(static_cast<std::size_t>(l)); }
  const PackedMatrix& wte() const { return wte_; }
  /// Every packed matrix (for a PackedScope: forward_cached then skips packing them).
  std::vector<const PackedMatrix*> matrices() const;

 private:
  const GPTParams* params_;
  std::vector<PackedMatrix> qkvw_, attprojw_, fcw_, fcprojw_;  // (L) each
  PackedMatrix wte_;                                           // the LM head (V, C)
};

/// The buffers of forward_paged, kept from step to step (no allocation per token once the
/// largest batch was seen): (N, C) residual stream and its layernorm, (N, 3C) q|k|v, (N, C)
/// attention output, (N, 4C) MLP hidden before and after GELU, (N) layernorm statistics, (rows
/// with logits, C) the final layernorm. (The projections add into the residual stream in their
/// GEMMs' epilogue: RowGemmOut::AddTo.)
struct DecodeScratch {
  std::vector<float> x, ln, qkv, y, fch, fchg, mean, rstd, last;
  // the step's bookkeeping: each row's block table and slot
  std::vector<const std::vector<std::int32_t>*> tables;
  std::vector<KVSlot> slots;
};

/// One forward pass over rows of several sequences (decode tokens and prefill chunks together):
/// every row's keys and values go into the cache at its position, then each row attends to its
/// sequence's positions 0..pos through the block table. Every matmul is one GEMM per layer over
/// all rows (matmul_packed_forward: a prompt chunk of n tokens is an (n, C) x (C, 3C) product,
/// and the weights are read once per step for the whole batch). Rows of one sequence come in
/// increasing positions. logits: (rows with want_logits, V), in row order. Each row's numbers are
/// exactly forward_cached's for the same sequence, token by token (the same operations in the same
/// order: the decode GEMM's sums run over c in order for every row), whatever the other rows are.
/// Threads: with more than one (intra_op_threads()), a step with enough work (2^19 multiply-adds:
/// one token of `small` already) runs as a team, one parallel region a step: each thread computes
/// a T-th of every GEMM's output columns (matmul_packed_part: it streams a T-th of the weights;
/// the k/v writes of its own q|k|v columns follow in the same stage) and a T-th of the rows of the
/// row-wise stages (embedding, layernorms, attention balanced by positions, GELU), with a barrier
/// between the stages; otherwise one thread, whose GEMMs and attention split over the pool
/// themselves where they have the work. Either way every row's numbers are the same.
/// profile: non-null, the stage times are added to it (a team: its first thread's wall-clock
/// times, barrier waits included, so the stages add up to the step's time).
void forward_paged(const DecodeModel& model, DecodeScratch& scratch, PagedKVCache& cache,
                   std::span<const PagedRow> rows, float* logits, DecodeProfile* profile = nullptr);
/// The same, packing the weights for this one call (tests, one-off passes).
void forward_paged(const GPTParams& params, PagedKVCache& cache, std::span<const PagedRow> rows,
                   float* logits);

}  // namespace mls::llm
