// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6: the paged KV cache — block allocator, block tables, prefix sharing, the batched forward.
#include "mls/llm/kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>

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

/// Rows [r0, r1) of a step through every layer and the head (forward_paged's body). Their
/// sequences' rows are all among them (attention reads the keys the same layer wrote), so groups
/// of whole sequences can run this side by side. Called on one group, its GEMMs and attention use
/// the pool (nested inside a group's task, they run on its thread).
void forward_rows(const DecodeModel& model, PagedKVCache& cache, std::span<const PagedRow> all_rows,
                  std::int64_t r0, std::int64_t r1, const std::vector<std::int32_t>* const* all_tables,
                  const KVSlot* all_slots, const RowBuffers& b, DecodeProfile* prof) {
  const GPTParams& params = model.params();
  const GPTConfig& cfg = params.config();
  const std::int64_t L = cfg.n_layer, C = cfg.n_embd, H = cfg.n_head, hs = C / H, N = r1 - r0,
                     bt = cache.block_tokens();
  const std::span<const PagedRow> rows = all_rows.subspan(static_cast<std::size_t>(r0), static_cast<std::size_t>(N));
  const std::vector<std::int32_t>* const* row_table = all_tables + r0;
  const KVSlot* row_slot = all_slots + r0;
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
  for (std::int64_t r = 0; r < N; ++r) {
    const PagedRow& row = rows[static_cast<std::size_t>(r)];
    encoder_forward(x + r * C, &row.token, p.wte, p.wpe + row.pos * C, 1, 1, C);
  }
  lap(&DecodeProfile::embed);
  // Every row computes exactly what one token at a time does: layernorm normalises row by row,
  // GELU is elementwise, the GEMMs sum over c in order (rowgemm.hpp).
  const auto ln_rows = [&](const float* w, const float* bias) {
    kernels::layernorm_forward(ln, mean, rstd, x, w, bias, N, C, 1e-5f);  // row by row inside
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
    matmul_packed_forward(qkv, ln, model.qkvw(l), p.qkvb + l * 3 * C, N, &model.attprojw(l));
    lap(&DecodeProfile::qkv);
    for (std::int64_t r = 0; r < N; ++r) {  // every row's k, v into the cache first
      const float* src = qkv + r * 3 * C;
      float* kd = cache.key_at(row_slot[r], l);  // channel-major: channel c at kd[c * bt]
      for (std::int64_t c = 0; c < C; ++c) kd[c * bt] = src[C + c];
      std::memcpy(cache.value_at(row_slot[r], l), src + 2 * C, sizeof(float) * sz(C));
    }
    lap(&DecodeProfile::kv_write);
    // then each (row, head) attends over its sequence's positions 0..pos, through the block table
    parallel_for(0, N, attention_grain, [&](std::int64_t a0, std::int64_t a1) {
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
    lap(&DecodeProfile::attention);
    // x += y W^T + b: the residual add in the GEMM's epilogue (forward_cached's proj, then
    // residual_forward(x, x, proj): the same two additions per element)
    matmul_packed_forward(x, y, model.attprojw(l), p.attprojb + l * C, N, &model.fcw(l), RowGemmOut::AddTo);
    lap(&DecodeProfile::attproj);
    ln_rows(p.ln2w + l * C, p.ln2b + l * C);
    // fc without its bias, then lab 4's bias + GELU in one pass over all rows (gelu(acc + b):
    // forward_cached's fc output acc + b, then its GELU)
    matmul_packed_forward(fch, ln, model.fcw(l), nullptr, N, &model.fcprojw(l));
    lap(&DecodeProfile::mlp);
    kernels::bias_gelu_forward(fchg, fch, p.fcb + l * 4 * C, N, 4 * C);
    lap(&DecodeProfile::gelu);
    matmul_packed_forward(x, fchg, model.fcprojw(l), p.fcprojb + l * C, N,
                          l + 1 < L ? &model.qkvw(l + 1) : &model.wte(), RowGemmOut::AddTo);
    lap(&DecodeProfile::mlp);
  }
  // the head, only for the rows that want logits
  std::int64_t k = 0;
  for (std::int64_t r = 0; r < N; ++r) {
    if (!rows[static_cast<std::size_t>(r)].want_logits) continue;
    kernels::layernorm_forward(b.lastx + k * C, mean, rstd, x + r * C, p.lnfw, p.lnfb, 1, C, 1e-5f);
    ++k;
  }
  lap(&DecodeProfile::layernorm);
  if (nlog > 0) matmul_packed_forward(b.logits, b.lastx, model.wte(), nullptr, nlog);
  lap(&DecodeProfile::head);
}

/// Splits a step's rows into at most `groups` contiguous groups of whole sequences, of about
/// equal work (a row's GEMMs, 12·L·C² multiply-adds, plus its attention, 2·L·C·(pos + 1)): the
/// first row of each group and N at the end. One group (no split) when a sequence's rows are not
/// contiguous, when the step is too small to share, or when one group would keep most of the
/// work anyway (a long prompt chunk: its GEMMs then split over the pool instead).
/// cut: the result; runs, cost: scratch (all kept by the caller from step to step).
void split_sequences(std::span<const PagedRow> rows, const GPTConfig& cfg, int groups, std::vector<std::int64_t>& cut,
                     std::vector<PagedKVCache::SeqId>& runs, std::vector<double>& cost) {
  const auto N = static_cast<std::int64_t>(rows.size());
  const std::int64_t L = cfg.n_layer, C = cfg.n_embd;
  const auto one = [&] { cut.assign({0, N}); };
  if (groups < 2 || N < 2) return one();
  runs.clear();  // the sequence of each run of rows
  cost.resize(static_cast<std::size_t>(N));
  double total = 0;
  for (std::int64_t r = 0; r < N; ++r) {
    const PagedRow& row = rows[static_cast<std::size_t>(r)];
    if (r == 0 || rows[static_cast<std::size_t>(r - 1)].seq != row.seq) runs.push_back(row.seq);
    cost[static_cast<std::size_t>(r)] =
        static_cast<double>(12 * L * C * C) + 2.0 * static_cast<double>(L * C * (row.pos + 1));
    total += cost[static_cast<std::size_t>(r)];
  }
  if (runs.size() < 2 || total < static_cast<double>(std::int64_t{1} << 20)) return one();
  std::sort(runs.begin(), runs.end());
  if (std::adjacent_find(runs.begin(), runs.end()) != runs.end()) return one();  // a sequence's rows apart
  groups = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(groups), runs.size()));
  cut.assign({0});
  double acc = 0, biggest = 0, group_start = 0;
  for (std::int64_t r = 0; r < N; ++r) {
    acc += cost[static_cast<std::size_t>(r)];
    const bool boundary = r + 1 < N && rows[static_cast<std::size_t>(r + 1)].seq != rows[static_cast<std::size_t>(r)].seq;
    const auto g = static_cast<double>(cut.size());
    if (boundary && static_cast<int>(cut.size()) < groups && acc >= total * g / groups) {
      biggest = std::max(biggest, acc - group_start);
      group_start = acc;
      cut.push_back(r + 1);
    }
  }
  biggest = std::max(biggest, total - group_start);
  cut.push_back(N);
  if (cut.size() < 3 || biggest > 0.75 * total) return one();
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
  // The batch's sequences in groups, one per thread, each group's rows through the whole model
  // on its own (one wake-up of the pool per step, not one per GEMM and attention: a small
  // model's GEMMs at batch 32 are too short to split well); one group: the GEMMs and attention
  // split over the pool themselves. Every row's numbers are the same either way.
  std::vector<std::int64_t>& cut = scratch.cut;
  split_sequences(rows, cfg, intra_op_threads(), cut, scratch.runs, scratch.cost);
  const auto G = static_cast<std::int64_t>(cut.size()) - 1;
  std::vector<std::int64_t>& first_logit = scratch.first_logit;  // want_logits rows before each group
  first_logit.assign(static_cast<std::size_t>(G), 0);
  for (std::int64_t g = 1; g < G; ++g) {
    std::int64_t n = 0;
    for (std::int64_t r = cut[static_cast<std::size_t>(g - 1)]; r < cut[static_cast<std::size_t>(g)]; ++r)
      n += rows[static_cast<std::size_t>(r)].want_logits ? 1 : 0;
    first_logit[static_cast<std::size_t>(g)] = first_logit[static_cast<std::size_t>(g - 1)] + n;
  }
  const auto buffers = [&](std::int64_t g) {
    const std::int64_t r0 = cut[static_cast<std::size_t>(g)], k0 = first_logit[static_cast<std::size_t>(g)];
    return RowBuffers{all.x + r0 * C,        all.ln + r0 * C,      all.qkv + r0 * 3 * C,  all.y + r0 * C,
                      all.fch + r0 * 4 * C,  all.fchg + r0 * 4 * C, all.mean + r0,        all.rstd + r0,
                      all.lastx + k0 * C,    logits ? logits + k0 * V : nullptr};
  };
  const std::vector<const std::vector<std::int32_t>*>& row_tables = tables;
  const std::vector<KVSlot>& row_slots = slots;
  if (G == 1) {
    forward_rows(model, cache, rows, 0, N, row_tables.data(), row_slots.data(), all, profile);
  } else {
    // each group's stage times apart, added up after (thread time: the groups run side by side)
    std::vector<DecodeProfile>& part = scratch.part;
    part.assign(static_cast<std::size_t>(G), DecodeProfile{});
    for (auto& pp : part) pp.cpu_time = profile && profile->cpu_time;
    parallel_for(0, G, 1, [&](std::int64_t g0, std::int64_t g1) {
      for (std::int64_t g = g0; g < g1; ++g)
        forward_rows(model, cache, rows, cut[static_cast<std::size_t>(g)], cut[static_cast<std::size_t>(g + 1)],
                     row_tables.data(), row_slots.data(), buffers(g), profile ? &part[static_cast<std::size_t>(g)] : nullptr);
    });
    if (profile)
      for (const auto& pp : part)
        for (double DecodeProfile::*f : {&DecodeProfile::embed, &DecodeProfile::layernorm, &DecodeProfile::qkv,
                                         &DecodeProfile::kv_write, &DecodeProfile::attention, &DecodeProfile::attproj,
                                         &DecodeProfile::mlp, &DecodeProfile::gelu, &DecodeProfile::head})
          profile->*f += pp.*f;
  }
  if (profile) {
    ++profile->steps;
    profile->rows += N;
    profile->logit_rows += nlog;
    profile->group_steps += G > 1 ? 1 : 0;
  }
}

}  // namespace mls::llm
