// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6: the paged KV cache — block allocator, block tables, prefix sharing, the batched forward.
#include "mls/llm/kv_cache.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <thread>

#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"
#include "mls/kernels/fused.hpp"
#include "lab6_clones.hpp"

namespace mls::llm {

// ---- the allocator ------------------------------------------------------------------------------

BlockAllocator::BlockAllocator(std::int64_t num_blocks) {
  MLS_CHECK(num_blocks >= 1 && num_blocks <= (std::int64_t{1} << 30), "BlockAllocator: num_blocks = ",
            num_blocks, ", expected 1 <= num_blocks <= 2^30");
  ref_.assign(static_cast<std::size_t>(num_blocks), 0);
  free_.resize(static_cast<std::size_t>(num_blocks));
  // next to hand out at the back: 0 first
  for (std::int64_t i = 0; i < num_blocks; ++i)
    free_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(num_blocks - 1 - i);
}

std::int32_t BlockAllocator::ref_count(std::int32_t block) const {
  MLS_CHECK(block >= 0 && block < num_blocks(), "BlockAllocator::ref_count: block ", block,
            ", expected 0 <= block < num_blocks = ", num_blocks());
  return ref_[static_cast<std::size_t>(block)];
}

std::int32_t BlockAllocator::allocate() {
  // BEGIN SOLUTION
  if (free_.empty()) return kNoBlock;
  const std::int32_t b = free_.back();
  free_.pop_back();
  ref_[static_cast<std::size_t>(b)] = 1;
  return b;
  // END SOLUTION
}

void BlockAllocator::retain(std::int32_t block) {
  // BEGIN SOLUTION
  MLS_CHECK(block >= 0 && block < num_blocks(), "BlockAllocator::retain: block ", block,
            ", expected 0 <= block < num_blocks = ", num_blocks());
  MLS_CHECK(ref_[static_cast<std::size_t>(block)] > 0, "BlockAllocator::retain: block ", block,
            " is free, expected an allocated block");
  ++ref_[static_cast<std::size_t>(block)];
  // END SOLUTION
}

bool BlockAllocator::release(std::int32_t block) {
  // BEGIN SOLUTION
  MLS_CHECK(block >= 0 && block < num_blocks(), "BlockAllocator::release: block ", block,
            ", expected 0 <= block < num_blocks = ", num_blocks());
  std::int32_t& r = ref_[static_cast<std::size_t>(block)];
  MLS_CHECK(r > 0, "BlockAllocator::release: block ", block,
            " is already free (a double free), expected an allocated block");
  if (--r > 0) return false;
  free_.push_back(block);
  return true;
  // END SOLUTION
}

KVSlot block_table_lookup(std::span<const std::int32_t> table, std::int64_t block_tokens, std::int64_t pos) {
  // BEGIN SOLUTION
  MLS_CHECK(block_tokens >= 1, "block_table_lookup: block_tokens = ", block_tokens, ", expected >= 1");
  const auto nblocks = static_cast<std::int64_t>(table.size());
  MLS_CHECK(pos >= 0 && pos < nblocks * block_tokens, "block_table_lookup: position ", pos,
            ", expected 0 <= pos < ", nblocks * block_tokens, " (", nblocks, " blocks of ",
            block_tokens, " positions)");
  return KVSlot{table[static_cast<std::size_t>(pos / block_tokens)], pos % block_tokens};
  // END SOLUTION
}

// ---- the cache ----------------------------------------------------------------------------------

PagedKVCache::PagedKVCache(const GPTConfig& cfg, std::int64_t num_blocks, std::int64_t block_tokens)
    : cfg_(cfg), bt_(block_tokens), alloc_(num_blocks) {
  cfg.validate();
  MLS_CHECK(block_tokens >= 1 && block_tokens <= 4096, "PagedKVCache: block_tokens = ", block_tokens,
            ", expected 1 <= block_tokens <= 4096");
  const std::int64_t floats = num_blocks * cfg.n_layer * block_tokens * cfg.n_embd;
  MLS_CHECK(floats <= (std::int64_t{1} << 34), "PagedKVCache: ", num_blocks, " blocks of ", block_tokens,
            " positions need ", 8 * floats, " bytes, expected at most 2^37");
  k_.assign(static_cast<std::size_t>(floats), 0.f);
  v_.assign(static_cast<std::size_t>(floats), 0.f);
  gen_.assign(static_cast<std::size_t>(num_blocks), 0);
}

std::int64_t PagedKVCache::pool_bytes() const {
  return 2 * static_cast<std::int64_t>(k_.size()) * static_cast<std::int64_t>(sizeof(float));
}

PagedKVCache::Seq& PagedKVCache::seq_ref(SeqId seq, const char* op) {
  auto it = seqs_.find(seq);
  MLS_CHECK(it != seqs_.end(), "PagedKVCache::", op, ": no sequence ", seq);
  return it->second;
}
const PagedKVCache::Seq& PagedKVCache::seq_ref(SeqId seq, const char* op) const {
  return const_cast<PagedKVCache*>(this)->seq_ref(seq, op);
}

std::int32_t PagedKVCache::take_block() {
  const std::int32_t b = alloc_.allocate();
  if (b != kNoBlock) ++gen_[static_cast<std::size_t>(b)];
  return b;
}

PagedKVCache::SeqId PagedKVCache::add_sequence() {
  seqs_.emplace(next_id_, Seq{});
  return next_id_++;
}

PagedKVCache::SeqId PagedKVCache::fork(SeqId parent) {
  const Seq p = seq_ref(parent, "fork");
  for (auto b : p.table) alloc_.retain(b);
  seqs_.emplace(next_id_, p);
  return next_id_++;
}

void PagedKVCache::free_sequence(SeqId seq) {
  Seq& s = seq_ref(seq, "free_sequence");
  for (auto b : s.table) alloc_.release(b);
  seqs_.erase(seq);
}

std::int64_t PagedKVCache::length(SeqId seq) const { return seq_ref(seq, "length").len; }

const std::vector<std::int32_t>& PagedKVCache::block_table(SeqId seq) const {
  return seq_ref(seq, "block_table").table;
}

std::int64_t PagedKVCache::blocks_needed(SeqId seq, std::int64_t n) const {
  const Seq& s = seq_ref(seq, "blocks_needed");
  MLS_CHECK(n >= 0, "PagedKVCache::blocks_needed: n = ", n, ", expected >= 0");
  const std::int64_t have = static_cast<std::int64_t>(s.table.size());
  const std::int64_t need = (s.len + n + bt_ - 1) / bt_;
  const bool cow = n > 0 && s.len % bt_ != 0 && alloc_.ref_count(s.table.back()) > 1;
  return std::max<std::int64_t>(0, need - have) + (cow ? 1 : 0);
}

bool PagedKVCache::append(SeqId seq, std::int64_t n) {
  MLS_CHECK(n >= 0, "PagedKVCache::append: n = ", n, ", expected >= 0");
  Seq& s = seq_ref(seq, "append");
  if (blocks_needed(seq, n) > alloc_.num_free()) return false;
  if (n > 0 && s.len % bt_ != 0 && alloc_.ref_count(s.table.back()) > 1) {
    // copy-on-write: the last block is shared and partly filled; this sequence's next positions
    // go into it, so it gets its own copy first (the whole block: its keys are channel-major)
    const std::int32_t old = s.table.back(), fresh = take_block();
    const std::int64_t C = cfg_.n_embd;
    for (std::int64_t l = 0; l < cfg_.n_layer; ++l) {
      const std::int64_t from = offset({old, 0}, l, false), to = offset({fresh, 0}, l, false);
      std::memcpy(k_.data() + to, k_.data() + from, sizeof(float) * static_cast<std::size_t>(bt_ * C));
      std::memcpy(v_.data() + to, v_.data() + from, sizeof(float) * static_cast<std::size_t>(bt_ * C));
    }
    alloc_.release(old);
    s.table.back() = fresh;
  }
  const std::int64_t need = (s.len + n + bt_ - 1) / bt_;
  while (static_cast<std::int64_t>(s.table.size()) < need) s.table.push_back(take_block());
  s.len += n;
  return true;
}

void PagedKVCache::attach(SeqId seq, std::int32_t block) {
  Seq& s = seq_ref(seq, "attach");
  MLS_CHECK(s.len % bt_ == 0 && static_cast<std::int64_t>(s.table.size()) * bt_ == s.len,
            "PagedKVCache::attach: sequence ", seq, " has length ", s.len,
            ", expected a multiple of block_tokens = ", bt_, " (only full blocks are shared)");
  alloc_.retain(block);
  s.table.push_back(block);
  s.len += bt_;
}

KVSlot PagedKVCache::slot(SeqId seq, std::int64_t pos) const {
  const Seq& s = seq_ref(seq, "slot");
  MLS_CHECK(pos >= 0 && pos < s.len, "PagedKVCache::slot: position ", pos, " of sequence ", seq,
            ", expected 0 <= pos < length = ", s.len);
  return block_table_lookup(s.table, bt_, pos);
}

std::int64_t PagedKVCache::offset(const KVSlot& s, std::int64_t l, bool key) const {
  MLS_CHECK(s.block >= 0 && s.block < num_blocks() && s.offset >= 0 && s.offset < bt_,
            "PagedKVCache: slot (block ", s.block, ", offset ", s.offset, ") outside the pool of ",
            num_blocks(), " blocks of ", bt_);
  // layer l of a block: bt * C floats, keys (C, bt), values (bt, C)
  const std::int64_t base = (static_cast<std::int64_t>(s.block) * cfg_.n_layer + l) * bt_ * cfg_.n_embd;
  return base + (key ? s.offset : s.offset * cfg_.n_embd);
}

float* PagedKVCache::key(SeqId seq, std::int64_t l, std::int64_t pos) {
  return k_.data() + offset(slot(seq, pos), l, true);
}
float* PagedKVCache::value(SeqId seq, std::int64_t l, std::int64_t pos) {
  return v_.data() + offset(slot(seq, pos), l, false);
}
const float* PagedKVCache::key(SeqId seq, std::int64_t l, std::int64_t pos) const {
  return k_.data() + offset(slot(seq, pos), l, true);
}
const float* PagedKVCache::value(SeqId seq, std::int64_t l, std::int64_t pos) const {
  return v_.data() + offset(slot(seq, pos), l, false);
}

// ---- the batched forward pass ---------------------------------------------------------------------

namespace {

using v16 = float __attribute__((vector_size(64)));  // 16 lanes of a row's output

/// o[c0 .. c0 + 16K) = sum over t2 of a(head of the lane, t2) * v[t2], each lane's sum in t2
/// order (o += a * v, one multiply-add a position, from 0): forward_cached's arithmetic per lane,
/// with K vector accumulators held in registers over all positions (not a load and a store of o
/// per position and head, which chained every position's add to the previous store). Each group
/// of 16 lanes lies in one head (hs % 16 == 0): a = att[h * n + t2] for that head h.
template <int K>
[[gnu::always_inline]] inline void attend_out(float* o, const float* att, const float* const* vp,
                                              std::int64_t n, std::int64_t hs, std::int64_t c0) {
  const float* a[K];
  v16 acc[K];
  for (int k = 0; k < K; ++k) {
    a[k] = att + (c0 + 16 * k) / hs * n;
    acc[k] = v16{};
  }
  for (std::int64_t t2 = 0; t2 < n; ++t2) {
    const float* v = vp[t2] + c0;
    for (int k = 0; k < K; ++k) {
      v16 vv;
      std::memcpy(&vv, v + 16 * k, sizeof(v16));
      acc[k] += a[k][t2] * vv;
    }
  }
  for (int k = 0; k < K; ++k) std::memcpy(o + c0 + 16 * k, &acc[k], sizeof(v16));
}

/// The weighted sum of G heads of VH vectors each (hs = 16 VH), from head h0: o[h][lanes] = sum
/// over t2 of a(h, t2) * v[t2][h][lanes], in t2 order from 0 (o = 0; o += a * v, each product
/// rounded then added: forward_cached's loop lane by lane), G * VH <= 8 vectors in registers over
/// all positions. One broadcast of a(h, t2) per head and position, the heads' weights rows at a
/// fixed stride n.
template <int G, int VH>
[[gnu::always_inline]] inline void attend_heads(float* o, const float* att, const float* const* vp,
                                                std::int64_t n, std::int64_t h0) {
  constexpr std::int64_t hs = 16 * VH;
  v16 acc[G][VH];
  for (int h = 0; h < G; ++h)
    for (int k = 0; k < VH; ++k) acc[h][k] = v16{};
  const float* a = att + h0 * n;
  for (std::int64_t t2 = 0; t2 < n; ++t2) {
    const float* v = vp[t2] + h0 * hs;
    for (int h = 0; h < G; ++h) {
      const float w = a[h * n + t2];
      for (int k = 0; k < VH; ++k) {
        v16 vv;
        std::memcpy(&vv, v + h * hs + 16 * k, sizeof(v16));
        acc[h][k] += w * vv;
      }
    }
  }
  for (int h = 0; h < G; ++h)
    for (int k = 0; k < VH; ++k) std::memcpy(o + (h0 + h) * hs + 16 * k, &acc[h][k], sizeof(v16));
}

/// Every head's weighted sum for hs = 16 VH: heads 8 / VH at a time.
template <int VH>
[[gnu::always_inline]] inline void attend_all_heads(float* o, const float* att, const float* const* vp,
                                                    std::int64_t n, std::int64_t H) {
  constexpr int kG = 8 / VH;
  std::int64_t h = 0;
  for (; h + kG <= H; h += kG) attend_heads<kG, VH>(o, att, vp, n, h);
  switch (H - h) {
    case 1: if constexpr (kG > 1) attend_heads<1, VH>(o, att, vp, n, h); break;
    case 2: if constexpr (kG > 2) attend_heads<2, VH>(o, att, vp, n, h); break;
    case 3: if constexpr (kG > 3) attend_heads<3, VH>(o, att, vp, n, h); break;
    case 4: if constexpr (kG > 4) attend_heads<4, VH>(o, att, vp, n, h); break;
    case 5: if constexpr (kG > 5) attend_heads<5, VH>(o, att, vp, n, h); break;
    case 6: if constexpr (kG > 6) attend_heads<6, VH>(o, att, vp, n, h); break;
    case 7: if constexpr (kG > 7) attend_heads<7, VH>(o, att, vp, n, h); break;
    default: break;
  }
}

/// 16 positions of a block (a chunk): their keys, channel-major, at k (channel c at k[c * bt]);
/// their scores go to att[h * n + t .. + m) for head h (lanes past m are not stored).
struct ScoreChunk {
  const float* k;
  std::int64_t t, m;
};

/// The scores of U heads (from h0) over M chunks, U * M independent vectors of 16 positions:
/// each lane its own position's dot product, acc += q[j] * k[j] for j in order from 0 (each
/// product rounded, then added: this file is compiled without contraction, as forward_cached's),
/// then times scale: forward_cached's `dot += q[j] * kk[j]` and `dot * scale`, lane by lane, so
/// the same bits. Lanes past a chunk's m read other positions of its block and are not stored.
template <int U, int M>
[[gnu::always_inline]] inline void score_heads(float* att, const float* q, const ScoreChunk* ch, std::int64_t h0,
                                               std::int64_t n, std::int64_t hs, std::int64_t bt, float scale) {
  v16 acc[M][U];
  for (int c = 0; c < M; ++c)
    for (int i = 0; i < U; ++i) acc[c][i] = v16{};
  const float* qh = q + h0 * hs;
  const float* kh[M];
  for (int c = 0; c < M; ++c) kh[c] = ch[c].k + h0 * hs * bt;
  for (std::int64_t j = 0; j < hs; ++j)
    for (int i = 0; i < U; ++i) {
      const float qv = qh[i * hs + j];
      for (int c = 0; c < M; ++c) {
        v16 kv;
        std::memcpy(&kv, kh[c] + (i * hs + j) * bt, sizeof(v16));
        acc[c][i] += qv * kv;
      }
    }
  for (int c = 0; c < M; ++c)
    for (int i = 0; i < U; ++i) {
      const v16 sc = acc[c][i] * scale;
      std::memcpy(att + (h0 + i) * n + ch[c].t, &sc, sizeof(float) * static_cast<std::size_t>(ch[c].m));
    }
}

/// Every head's scores over M chunks: heads U at a time, U * M <= 8 vectors of multiply-adds in
/// flight (a chain's adds wait on each other, independent chains fill the FP pipes).
template <int M>
[[gnu::always_inline]] inline void score_chunks(float* att, const float* q, const ScoreChunk* ch, std::int64_t n,
                                                std::int64_t H, std::int64_t hs, std::int64_t bt, float scale) {
  constexpr int kMax = 8 / M;
  std::int64_t h = 0;
  for (; h + kMax <= H; h += kMax) score_heads<kMax, M>(att, q, ch, h, n, hs, bt, scale);
  switch (H - h) {
    case 1: return score_heads<1, M>(att, q, ch, h, n, hs, bt, scale);
    case 2: return score_heads<2, M>(att, q, ch, h, n, hs, bt, scale);
    case 3: return score_heads<3, M>(att, q, ch, h, n, hs, bt, scale);
    case 4: if constexpr (kMax > 4) return score_heads<4, M>(att, q, ch, h, n, hs, bt, scale); break;
    case 5: if constexpr (kMax > 5) return score_heads<5, M>(att, q, ch, h, n, hs, bt, scale); break;
    case 6: if constexpr (kMax > 6) return score_heads<6, M>(att, q, ch, h, n, hs, bt, scale); break;
    case 7: if constexpr (kMax > 7) return score_heads<7, M>(att, q, ch, h, n, hs, bt, scale); break;
    default: break;
  }
}

/// One attention row of every head: query q (C = H heads of hs) against n cached positions in
/// blocks of bt (block b's keys, channel-major (C, bt), at kb[b]; position t2's values, all heads
/// side by side, at vp[t2]), into o (C). att: scratch (H, n). Per (head, position) the very
/// operations of forward_cached, in the same order: the same dot loop over j, the scale, the
/// softmax of the row, then per output lane o += a * v position after position, so the same bits.
/// The scores run over 16 positions of a block in the vector lanes, two such chunks and up to
/// four heads at a time (the last positions of a block of bt % 16 != 0, one at a time); the
/// weighted sum keeps up to 128 lanes of o in registers while the positions stream past
/// (attend_out) where hs is a multiple of 16.
MLS_LAB6_CLONES void attend_row(float* o, const float* q, const float* const* kb, const float* const* vp,
                                std::int64_t n, std::int64_t bt, std::int64_t H, std::int64_t hs, float scale,
                                float* att) {
  ScoreChunk pair[2];
  int np = 0;
  for (std::int64_t t0 = 0, b = 0; t0 < n; t0 += bt, ++b) {
    const std::int64_t cnt = std::min(bt, n - t0);
    for (std::int64_t i0 = 0; i0 < cnt; i0 += 16) {
      const std::int64_t m = std::min<std::int64_t>(16, cnt - i0);
      if (i0 + 16 <= bt) {  // 16 positions of the block in the lanes
        pair[np++] = ScoreChunk{kb[b] + i0, t0 + i0, m};
        if (np == 2) {
          score_chunks<2>(att, q, pair, n, H, hs, bt, scale);
          np = 0;
        }
        continue;
      }
      for (std::int64_t i = i0; i < i0 + m; ++i)  // the block's last positions, one at a time
        for (std::int64_t h = 0; h < H; ++h) {
          const float* qh = q + h * hs;
          const float* kk = kb[b] + h * hs * bt + i;
          float dot = 0.f;
          for (std::int64_t j = 0; j < hs; ++j) dot += qh[j] * kk[j * bt];
          att[h * n + t0 + i] = dot * scale;
        }
    }
  }
  if (np == 1) score_chunks<1>(att, q, pair, n, H, hs, bt, scale);
  // every head's softmax in one call: (H, n) rows, each the bits of forward_cached's (1, n) call
  // (lab 4's row softmax does not depend on a row's neighbours nor on its address)
  kernels::softmax_forward(att, att, H, n);
  const std::int64_t C = H * hs;
  std::int64_t c0 = 0;
  switch (hs) {  // the common head sizes: whole heads in registers, one broadcast per head
    case 16: return attend_all_heads<1>(o, att, vp, n, H);
    case 32: return attend_all_heads<2>(o, att, vp, n, H);
    case 64: return attend_all_heads<4>(o, att, vp, n, H);
    case 128: return attend_all_heads<8>(o, att, vp, n, H);
    default: break;
  }
  if (hs % 16 == 0) {
    for (; c0 + 128 <= C; c0 += 128) attend_out<8>(o, att, vp, n, hs, c0);
    for (; c0 + 64 <= C; c0 += 64) attend_out<4>(o, att, vp, n, hs, c0);
    for (; c0 < C; c0 += 16) attend_out<1>(o, att, vp, n, hs, c0);
  }
  if (c0 == C) return;
  // other head sizes: forward_cached's loop itself (o in memory; a loop over t2 with the lanes
  // inner, never a sum over t2 that the compiler's reassociation may reorder)
  for (std::int64_t j = 0; j < C; ++j) o[j] = 0.f;
  for (std::int64_t t2 = 0; t2 < n; ++t2) {
    const float* vrow = vp[t2];
    for (std::int64_t h = 0; h < H; ++h) {
      const float a = att[h * n + t2];
      const float* vv = vrow + h * hs;
      float* oh = o + h * hs;
      for (std::int64_t j = 0; j < hs; ++j) oh[j] += a * vv[j];
    }
  }
}

}  // namespace

double DecodeProfile::now() const {
  timespec ts{};
  clock_gettime(cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

DecodeModel::DecodeModel(const GPTParams& params) : params_(&params) {
  const GPTConfig& cfg = params.config();
  MLS_CHECK(!is_moe(cfg), "DecodeModel: a model with MoE blocks, expected a dense model (the paged forward "
            "runs dense MLPs only)");
  const std::int64_t L = cfg.n_layer, C = cfg.n_embd;
  const ParamPtrs p = param_views(const_cast<float*>(params.data()), cfg);
  for (std::int64_t l = 0; l < L; ++l) {
    qkvw_.push_back(pack_matrix(p.qkvw + l * 3 * C * C, 3 * C, C));
    attprojw_.push_back(pack_matrix(p.attprojw + l * C * C, C, C));
    fcw_.push_back(pack_matrix(p.fcw + l * 4 * C * C, 4 * C, C));
    fcprojw_.push_back(pack_matrix(p.fcprojw + l * C * 4 * C, C, 4 * C));
  }
  wte_ = pack_matrix(p.wte, cfg.vocab_size, C);
}

std::vector<const PackedMatrix*> DecodeModel::matrices() const {
  std::vector<const PackedMatrix*> m;
  for (const auto* v : {&qkvw_, &attprojw_, &fcw_, &fcprojw_})
    for (const auto& x : *v) m.push_back(&x);
  m.push_back(&wte_);
  return m;
}

void forward_paged(const GPTParams& params, PagedKVCache& cache, std::span<const PagedRow> rows,
                   float* logits) {
  const DecodeModel model(params);
  DecodeScratch scratch;
  forward_paged(model, scratch, cache, rows, logits);
}

namespace {

/// forward_paged's buffers for rows [r0, r1) of a step: slices of DecodeScratch's (N, ...) arrays,
/// and of the logits rows (lastx, logits: the want_logits rows among them).
struct RowBuffers {
  float *x, *ln, *qkv, *y, *fch, *fchg, *mean, *rstd, *lastx, *logits;
};

/// Who runs forward_rows: member t of a team of T threads that share every stage of one set of
/// rows (T > 1: each GEMM's output columns split T ways, matmul_packed_part, so each thread streams
/// a T-th of the weights; the row-wise stages split by rows; a barrier between the stages), or one
/// thread (T = 1: the GEMMs and the attention split over the pool themselves).
struct Team {
  int t = 0, T = 1;
  TeamBarrier* barrier = nullptr;  // common's: a member that failed breaks it
  void sync() const {
    if (T > 1) MLS_CHECK(barrier->wait(), "forward_paged: another thread of the step failed");
  }
};

/// A step's rows through every layer and the head (forward_paged's body): on one thread (its
/// GEMMs and attention split over the pool), or called by every member of a team, each doing its
/// share of every stage (Team).
void forward_rows(const DecodeModel& model, PagedKVCache& cache, std::span<const PagedRow> rows,
                  const std::vector<std::int32_t>* const* row_table, const KVSlot* row_slot, const RowBuffers& b,
                  DecodeProfile* prof, const Team& team = {}) {
  const GPTParams& params = model.params();
  const GPTConfig& cfg = params.config();
  const std::int64_t L = cfg.n_layer, C = cfg.n_embd, H = cfg.n_head, hs = C / H,
                     N = static_cast<std::int64_t>(rows.size()), bt = cache.block_tokens();
  double last = prof ? prof->now() : 0;
  const auto lap = [&](double DecodeProfile::*stage) {
    if (!prof) return;
    const double now = prof->now();
    prof->*stage += now - last;
    last = now;
  };
  std::int64_t maxpos = 0, nlog = 0;
  for (const PagedRow& row : rows) {
    maxpos = std::max(maxpos, row.pos);
    nlog += row.want_logits ? 1 : 0;
  }
  const ParamPtrs p = param_views(const_cast<float*>(params.data()), cfg);
  const auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  float *x = b.x, *ln = b.ln, *qkv = b.qkv, *y = b.y, *fch = b.fch, *fchg = b.fchg, *mean = b.mean,
        *rstd = b.rstd;
  // this thread's rows of the row-wise stages: [m0, m1) (all of them but in a team); its rows of
  // the attention: [a0, a1), of about equal work (positions attended, plus a row's fixed cost)
  const std::int64_t m0 = N * team.t / team.T, m1 = N * (team.t + 1) / team.T;
  std::int64_t a0 = m0, a1 = m1;
  if (team.T > 1) {
    std::int64_t total = 0, acc = 0;
    for (const PagedRow& row : rows) total += row.pos + 1 + 16;
    a0 = a1 = N;
    for (std::int64_t r = 0; r < N; ++r) {
      if (a0 == N && acc * team.T >= total * team.t) a0 = r;
      if (a1 == N && acc * team.T >= total * (team.t + 1)) a1 = r;
      acc += rows[static_cast<std::size_t>(r)].pos + 1 + 16;
    }
    if (team.t + 1 == team.T) a1 = N;
  }
  // a GEMM over all N rows: on the pool, or this member's part of its output columns
  const auto gemm = [&](float* out, const float* in, const PackedMatrix& w, const float* bias,
                        const PackedMatrix* then, RowGemmOut mode) {
    if (team.T == 1) return matmul_packed_forward(out, in, w, bias, N, then, mode);
    matmul_packed_part(out, in, w, bias, N, team.t, team.T, then, mode);
  };
  for (std::int64_t r = m0; r < m1; ++r) {
    const PagedRow& row = rows[static_cast<std::size_t>(r)];
    encoder_forward(x + r * C, &row.token, p.wte, p.wpe + row.pos * C, 1, 1, C);
  }
  lap(&DecodeProfile::embed);
  // Every row computes exactly what one token at a time does: layernorm normalises row by row,
  // GELU is elementwise, the GEMMs sum over c in order (rowgemm.hpp).
  const auto ln_rows = [&](const float* w, const float* bias) {
    kernels::layernorm_forward(ln + m0 * C, mean + m0, rstd + m0, x + m0 * C, w, bias, m1 - m0, C,
                               1e-5f);  // row by row inside
    team.sync();
    lap(&DecodeProfile::layernorm);
  };
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  // rows per attention chunk: about 2^18 cached floats of work each (~10 us: waking a thread and
  // waiting for it is not free, least of all on a busy machine)
  std::int64_t cached = 0;
  for (const PagedRow& row : rows) cached += (row.pos + 1) * C;
  const std::int64_t attention_grain =
      std::max<std::int64_t>(1, (std::int64_t{1} << 18) * N / std::max<std::int64_t>(1, cached));
  for (std::int64_t l = 0; l < L; ++l) {
    ln_rows(p.ln1w + l * C, p.ln1b + l * C);
    gemm(qkv, ln, model.qkvw(l), p.qkvb + l * 3 * C, &model.attprojw(l), RowGemmOut::Store);
    lap(&DecodeProfile::qkv);
    // every row's k, v into the cache first (a team member: the channels of its own columns)
    const auto [o0, o1] = part_columns(model.qkvw(l), team.t, team.T);
    const std::int64_t k0 = std::clamp(o0 - C, std::int64_t{0}, C), k1 = std::clamp(o1 - C, std::int64_t{0}, C),
                       v0 = std::clamp(o0 - 2 * C, std::int64_t{0}, C), v1 = std::clamp(o1 - 2 * C, std::int64_t{0}, C);
    for (std::int64_t r = 0; r < N; ++r) {
      const float* src = qkv + r * 3 * C;
      float* kd = cache.key_at(row_slot[r], l);  // channel-major: channel c at kd[c * bt]
      for (std::int64_t c = k0; c < k1; ++c) kd[c * bt] = src[C + c];
      if (v0 < v1) std::memcpy(cache.value_at(row_slot[r], l) + v0, src + 2 * C + v0, sizeof(float) * sz(v1 - v0));
    }
    team.sync();
    lap(&DecodeProfile::kv_write);
    // then each (row, head) attends over its sequence's positions 0..pos, through the block table
    // (in a team, nested in its parallel region: this member's rows on its own thread)
    parallel_for(a0, a1, attention_grain, [&](std::int64_t a0, std::int64_t a1) {
      thread_local std::vector<const float*> kb, vp;
      thread_local std::vector<float> att;
      kb.resize(sz(maxpos / bt + 1));
      vp.resize(sz(maxpos + 1));
      att.resize(sz(H * (maxpos + 1)));
      const PagedKVCache& cc = cache;
      for (std::int64_t r = a0; r < a1; ++r) {
        const PagedRow& row = rows[static_cast<std::size_t>(r)];
        const std::vector<std::int32_t>& table = *row_table[r];
        for (std::int64_t t0 = 0; t0 <= row.pos; t0 += bt) {  // a block at a time
          const KVSlot s{table[sz(t0 / bt)], 0};
          kb[sz(t0 / bt)] = cc.key_at(s, l);
          const float* vb = cc.value_at(s, l);
          for (std::int64_t t2 = t0; t2 <= std::min(row.pos, t0 + bt - 1); ++t2) vp[sz(t2)] = vb + (t2 - t0) * C;
        }
        attend_row(y + r * C, qkv + r * 3 * C, kb.data(), vp.data(), row.pos + 1, bt, H, hs, scale, att.data());
      }
    });
    team.sync();
    lap(&DecodeProfile::attention);
    // x += y W^T + b: the residual add in the GEMM's epilogue (forward_cached's proj, then
    // residual_forward(x, x, proj): the same two additions per element)
    gemm(x, y, model.attprojw(l), p.attprojb + l * C, &model.fcw(l), RowGemmOut::AddTo);
    team.sync();
    lap(&DecodeProfile::attproj);
    ln_rows(p.ln2w + l * C, p.ln2b + l * C);
    // fc without its bias, then lab 4's bias + GELU in one pass over the rows (gelu(acc + b):
    // forward_cached's fc output acc + b, then its GELU)
    gemm(fch, ln, model.fcw(l), nullptr, &model.fcprojw(l), RowGemmOut::Store);
    team.sync();  // (GELU on a member's own columns, row by row, would save this barrier: measured
                  // slower, a call a row)
    lap(&DecodeProfile::mlp);
    kernels::bias_gelu_forward(fchg + m0 * 4 * C, fch + m0 * 4 * C, p.fcb + l * 4 * C, m1 - m0, 4 * C);
    team.sync();
    lap(&DecodeProfile::gelu);
    gemm(x, fchg, model.fcprojw(l), p.fcprojb + l * C, l + 1 < L ? &model.qkvw(l + 1) : &model.wte(),
         RowGemmOut::AddTo);
    team.sync();
    lap(&DecodeProfile::mlp);
  }
  // the head, only for the rows that want logits (this member's rows; k: their index among them)
  std::int64_t k = 0;
  for (std::int64_t r = 0; r < m0; ++r) k += rows[static_cast<std::size_t>(r)].want_logits ? 1 : 0;
  for (std::int64_t r = m0; r < m1; ++r) {
    if (!rows[static_cast<std::size_t>(r)].want_logits) continue;
    kernels::layernorm_forward(b.lastx + k * C, mean + r, rstd + r, x + r * C, p.lnfw, p.lnfb, 1, C, 1e-5f);
    ++k;
  }
  team.sync();
  lap(&DecodeProfile::layernorm);
  if (nlog > 0) {
    if (team.T == 1) matmul_packed_forward(b.logits, b.lastx, model.wte(), nullptr, nlog);
    else matmul_packed_part(b.logits, b.lastx, model.wte(), nullptr, nlog, team.t, team.T);
  }
  lap(&DecodeProfile::head);
}

/// Whether a step has the work to share the threads (a team): more than one thread, and 2^19
/// multiply-adds at least (a row's GEMMs, 12·L·C², plus its attention, 2·L·C·(pos + 1)). One
/// token alone qualifies where its model is big enough (`small`: 0.79 M): its GEMVs stream the
/// weights, and half the weights each is worth the barriers (one at a time's decode tokens ran
/// about 1.35x faster at 2 threads as a team than on one thread, busy machine, 2026-11-28).
bool share_threads(std::span<const PagedRow> rows, const GPTConfig& cfg, int threads) {
  if (threads < 2) return false;
  const std::int64_t L = cfg.n_layer, C = cfg.n_embd;
  double total = 0;
  for (const PagedRow& row : rows)
    total += static_cast<double>(12 * L * C * C) + 2.0 * static_cast<double>(L * C * (row.pos + 1));
  return total >= static_cast<double>(std::int64_t{1} << 19);
}

}  // namespace

void forward_paged(const DecodeModel& model, DecodeScratch& scratch, PagedKVCache& cache,
                   std::span<const PagedRow> rows, float* logits, DecodeProfile* profile) {
  const GPTParams& params = model.params();
  const GPTConfig& cfg = params.config();
  MLS_CHECK(cache.config() == cfg, "forward_paged: a cache of another config");
  const std::int64_t C = cfg.n_embd, V = cfg.vocab_size, N = static_cast<std::int64_t>(rows.size());
  if (N == 0) return;
  std::int64_t nlog = 0;
  // each row's block table and the slot its keys and values go to (looked up once per step)
  std::vector<const std::vector<std::int32_t>*>& tables = scratch.tables;
  std::vector<KVSlot>& slots = scratch.slots;
  tables.resize(static_cast<std::size_t>(N));
  slots.resize(static_cast<std::size_t>(N));
  for (std::int64_t r = 0; r < N; ++r) {
    const PagedRow& row = rows[static_cast<std::size_t>(r)];
    MLS_CHECK(row.token >= 0 && row.token < V, "forward_paged: row ", r, " token ", row.token,
              ", expected 0 <= token < vocab_size = ", V);
    MLS_CHECK(row.pos >= 0 && row.pos < cfg.block_size && row.pos < cache.length(row.seq),
              "forward_paged: row ", r, " position ", row.pos, " of sequence ", row.seq,
              ", expected 0 <= pos < min(block_size = ", cfg.block_size, ", length = ",
              cache.length(row.seq), ") (append before the forward)");
    nlog += row.want_logits ? 1 : 0;
    tables[static_cast<std::size_t>(r)] = &cache.block_table(row.seq);
    slots[static_cast<std::size_t>(r)] = cache.slot(row.seq, row.pos);
  }
  const auto fit = [&](std::vector<float>& v, std::int64_t n) {
    if (v.size() < static_cast<std::size_t>(n)) v.resize(static_cast<std::size_t>(n));
    return v.data();
  };
  const RowBuffers all{fit(scratch.x, N * C),        fit(scratch.ln, N * C),   fit(scratch.qkv, N * 3 * C),
                       fit(scratch.y, N * C),        fit(scratch.fch, N * 4 * C), fit(scratch.fchg, N * 4 * C),
                       fit(scratch.mean, N),         fit(scratch.rstd, N),
                       fit(scratch.last, std::max<std::int64_t>(1, nlog) * C), logits};
  // With several threads, a team: one parallel region a step, each thread computing a share of
  // every stage (a T-th of each GEMM's output columns, streaming only that share of the weights;
  // a T-th of the rows of the row-wise stages), a barrier between the stages. Otherwise one
  // thread, whose GEMMs and attention split over the pool themselves where they have the work.
  // Every row's numbers are the same either way.
  const int threads = intra_op_threads();
  const bool team = share_threads(rows, cfg, threads);
  if (team) {
    TeamBarrier barrier(threads);
    parallel_for(0, threads, 1, [&](std::int64_t t0, std::int64_t t1) {
      if (t1 - t0 != 1)  // nested in another parallel region: every member's share on this thread
        return forward_rows(model, cache, rows, tables.data(), slots.data(), all, profile);
      try {
        forward_rows(model, cache, rows, tables.data(), slots.data(), all, t0 == 0 ? profile : nullptr,
                     Team{static_cast<int>(t0), threads, &barrier});
      } catch (...) {
        barrier.breaks();
        throw;
      }
    });
  } else {
    forward_rows(model, cache, rows, tables.data(), slots.data(), all, profile);
  }
  if (profile) {
    ++profile->steps;
    profile->rows += N;
    profile->logit_rows += nlog;
    profile->team_steps += team ? 1 : 0;
  }
}

}  // namespace mls::llm
