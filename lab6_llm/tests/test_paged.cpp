// Lab 6: the paged KV cache (block allocator, block-table lookup, prefix sharing) and the batched
// forward through it, against the contiguous cache (forward_cached), bit for bit.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <string>

#include "mls/common/parallel.hpp"
#include "mls/llm/kv_cache.hpp"
#include "mls/llm/sample.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace llm_test;
using mls::testing::require_error;

namespace {

/// A config with room for longer sequences than random_config's.
GPTConfig paged_config(Rng& rng) {
  GPTConfig c = random_config(rng);
  c.block_size = rng.randint(12, 41);
  return c;
}

/// Logits of every position of `tokens` through forward_cached (the contiguous cache): (n, V).
std::vector<float> contiguous_logits(const GPTParams& p, const std::vector<std::int32_t>& tokens) {
  const std::int64_t V = p.config().vocab_size;
  KVCache cache(p.config());
  std::vector<float> out(tokens.size() * static_cast<std::size_t>(V));
  for (std::size_t i = 0; i < tokens.size(); ++i) forward_cached(p, cache, tokens[i], out.data() + i * V);
  return out;
}

}  // namespace

TEST_CASE("block allocator: blocks in order, LIFO reuse, reference counts, kNoBlock when empty",
          "[lab6][paged][allocator]") {
  BlockAllocator a(4);
  std::vector<std::int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(a.allocate());
  got.push_back(a.allocate());  // empty: the signal, not an exception
  mls::testing::observe("allocate() x5 on 4 blocks", got);
  CHECK(got == std::vector<std::int32_t>{0, 1, 2, 3, kNoBlock});
  CHECK(a.num_free() == 0);
  a.retain(2);
  mls::testing::observe("ref_count(2) after retain", static_cast<std::int64_t>(a.ref_count(2)));
  CHECK(a.ref_count(2) == 2);
  const bool freed1 = a.release(2), freed2 = a.release(2);
  mls::testing::observe("release(2) twice: freed?", std::vector<int>{freed1, freed2});
  CHECK(!freed1);
  CHECK(freed2);
  CHECK(a.release(0));
  std::vector<std::int32_t> again{a.allocate(), a.allocate(), a.allocate()};
  mls::testing::observe("allocate() x3 after releasing 2 then 0", again);
  CHECK(again == std::vector<std::int32_t>{0, 2, kNoBlock});  // the last freed first
  // a random workload against an independent model of the pool
  Rng rng(11, "allocator");
  BlockAllocator b(9);
  std::vector<std::int32_t> ref(9, 0), stack;
  for (int i = 8; i >= 0; --i) stack.push_back(i);
  std::vector<std::int32_t> trace;
  for (int step = 0; step < 400; ++step) {
    const auto op = rng.randint(0, 3);
    if (op == 0) {
      const std::int32_t want = stack.empty() ? kNoBlock : stack.back();
      if (!stack.empty()) {
        stack.pop_back();
        ref[static_cast<std::size_t>(want)] = 1;
      }
      const std::int32_t blk = b.allocate();
      trace.push_back(blk);
      REQUIRE(blk == want);
    } else {
      std::vector<std::int32_t> live;
      for (std::int32_t k = 0; k < 9; ++k)
        if (ref[static_cast<std::size_t>(k)] > 0) live.push_back(k);
      if (live.empty()) continue;
      const std::int32_t k = live[static_cast<std::size_t>(rng.randint(0, static_cast<std::int64_t>(live.size())))];
      if (op == 1) {
        b.retain(k);
        ++ref[static_cast<std::size_t>(k)];
      } else {
        const bool f = b.release(k);
        if (--ref[static_cast<std::size_t>(k)] == 0) stack.push_back(k);
        REQUIRE(f == (ref[static_cast<std::size_t>(k)] == 0));
      }
    }
    REQUIRE(b.num_free() == static_cast<std::int64_t>(stack.size()));
  }
  mls::testing::observe("random allocate/retain/release: the blocks handed out", trace);
}

TEST_CASE("block allocator: double free, retain of a free block and bad blocks are errors",
          "[lab6][paged][allocator]") {
  BlockAllocator a(3);
  const std::int32_t b = a.allocate();
  CHECK(a.release(b));
  require_error([&] { a.release(b); }, "already free");
  require_error([&] { a.retain(b); }, "is free");
  require_error([&] { a.release(7); }, "block 7");
  require_error([&] { a.retain(-1); }, "block -1");
  CHECK(a.num_free() == 3);  // the failed calls changed nothing
  std::vector<std::int32_t> order{a.allocate(), a.allocate(), a.allocate()};
  mls::testing::observe("allocate() x3 after the failed calls", order);
  CHECK(order == std::vector<std::int32_t>{0, 1, 2});
  require_error([] { BlockAllocator(0); }, "num_blocks = 0");
  GPTConfig cfg = config_by_name("nano");
  cfg.vocab_size = 5;
  require_error([&] { PagedKVCache(cfg, 4, 0); }, "block_tokens = 0");
}

TEST_CASE("block-table lookup: block pos / bt at offset pos % bt, out of range is an error",
          "[lab6][paged][lookup]") {
  Rng rng(12, "lookup");
  std::vector<std::int64_t> seen;
  for (int trial = 0; trial < 50; ++trial) {
    const std::int64_t bt = rng.randint(1, 9), nb = rng.randint(1, 6);
    std::vector<std::int32_t> table;
    for (std::int64_t i = 0; i < nb; ++i) table.push_back(static_cast<std::int32_t>(rng.randint(0, 100)));
    // independent reference: walk the positions block by block
    std::int64_t pos = 0;
    for (std::int64_t i = 0; i < nb; ++i)
      for (std::int64_t o = 0; o < bt; ++o, ++pos) {
        const KVSlot s = block_table_lookup(table, bt, pos);
        seen.push_back(s.block);
        seen.push_back(s.offset);
        REQUIRE(s.block == table[static_cast<std::size_t>(i)]);
        REQUIRE(s.offset == o);
      }
    require_error([&] { block_table_lookup(table, bt, nb * bt); }, "position " + std::to_string(nb * bt));
    require_error([&] { block_table_lookup(table, bt, -1); }, "position -1");
  }
  mls::testing::observe("lookups (block, offset) of 50 random tables", seen);
}

namespace {

/// Several sequences of random tokens through the paged cache in random chunks, all in one batch
/// per step, against forward_cached token by token: every logit equal, bit for bit.
/// Returns the steps whose stages several threads shared as a team.
/// bt: positions per block (0: 1 to 5 at random).
std::int64_t check_paged_equals_cached(const GPTConfig& cfg, Rng& rng, const std::string& what, std::int64_t bt = 0) {
  const GPTParams p = random_params(cfg, rng);
  const DecodeModel model(p);
  DecodeScratch scratch;
  DecodeProfile profile;
  const std::int64_t V = cfg.vocab_size;
  if (bt == 0) bt = rng.randint(1, 6);
  PagedKVCache cache(cfg, 200, bt);
  const int S = static_cast<int>(rng.randint(2, 6));
  std::vector<std::vector<std::int32_t>> toks(static_cast<std::size_t>(S));
  std::vector<PagedKVCache::SeqId> ids;
  std::vector<std::vector<float>> got(static_cast<std::size_t>(S));
  for (auto& t : toks) {
    const std::int64_t n = rng.randint(1, cfg.block_size + 1);
    for (std::int64_t i = 0; i < n; ++i) t.push_back(static_cast<std::int32_t>(rng.randint(0, V)));
    ids.push_back(cache.add_sequence());
  }
  // steps: each sequence runs a random chunk of its remaining tokens, all in one batch
  std::vector<std::int64_t> done(static_cast<std::size_t>(S), 0);
  for (bool left = true; left;) {
    left = false;
    std::vector<PagedRow> rows;
    for (int s = 0; s < S; ++s) {
      const auto n = static_cast<std::int64_t>(toks[static_cast<std::size_t>(s)].size());
      auto& d = done[static_cast<std::size_t>(s)];
      if (d == n) continue;
      const std::int64_t c = rng.randint(0, std::min<std::int64_t>(n - d, 5) + 1);
      REQUIRE(cache.append(ids[static_cast<std::size_t>(s)], c));
      for (std::int64_t j = 0; j < c; ++j, ++d)
        rows.push_back({ids[static_cast<std::size_t>(s)], toks[static_cast<std::size_t>(s)][static_cast<std::size_t>(d)], d, true});
      left = left || d < n;
    }
    std::vector<float> logits(rows.size() * static_cast<std::size_t>(V));
    forward_paged(model, scratch, cache, rows, logits.data(), &profile);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto s = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), rows[r].seq) - ids.begin());
      got[s].insert(got[s].end(), logits.begin() + static_cast<std::ptrdiff_t>(r * V),
                    logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * V));
    }
  }
  for (int s = 0; s < S; ++s) {
    const auto want = contiguous_logits(p, toks[static_cast<std::size_t>(s)]);
    mls::testing::observe("paged logits, " + what + " sequence " + std::to_string(s), got[static_cast<std::size_t>(s)]);
    REQUIRE(got[static_cast<std::size_t>(s)].size() == want.size());
    CHECK(std::memcmp(got[static_cast<std::size_t>(s)].data(), want.data(), want.size() * sizeof(float)) == 0);
    const auto nb = static_cast<std::int64_t>(cache.block_table(ids[static_cast<std::size_t>(s)]).size());
    CHECK(nb == (static_cast<std::int64_t>(toks[static_cast<std::size_t>(s)].size()) + bt - 1) / bt);
  }
  for (auto id : ids) cache.free_sequence(id);
  CHECK(cache.free_blocks() == 200);
  return profile.team_steps;
}

}  // namespace

TEST_CASE("paged KV cache: several sequences in one batch give forward_cached's logits bit for bit",
          "[lab6][paged][forward]") {
  Rng rng(13, "paged-forward");
  for (int trial = 0; trial < 6; ++trial) (void)check_paged_equals_cached(paged_config(rng), rng, "trial " + std::to_string(trial));
}

TEST_CASE("paged KV cache: head sizes of whole vectors (16, 32, 48) and 1-3 threads give forward_cached's logits "
          "bit for bit", "[lab6][paged][forward]") {
  Rng rng(16, "paged-forward-vectors");
  struct Shape {
    std::int64_t H, hs;
  };
  // C = 128 and 256 (groups of 8 vectors), 192 (8 + 4), 48 and 80 (one vector at a time), 160 (8 + 2);
  // at 2 and 3 threads the wider ones have the work to share each step as a team
  std::int64_t teamed = 0;
  for (const Shape sh : {Shape{4, 32}, {8, 32}, {4, 48}, {3, 16}, {5, 16}, {5, 32}}) {
    for (int threads : {1, 2, 3}) {
      ThreadCountGuard guard(threads);
      GPTConfig cfg = paged_config(rng);
      cfg.n_head = sh.H;
      cfg.n_embd = sh.H * sh.hs;
      cfg.n_layer = 2;
      cfg.block_size = rng.randint(12, 41);
      const std::int64_t g = check_paged_equals_cached(
          cfg, rng, "H=" + std::to_string(sh.H) + " hs=" + std::to_string(sh.hs) + " " + std::to_string(threads) + " thread(s)");
      if (threads == 1) CHECK(g == 0);
      teamed += g;
    }
  }
  CHECK(teamed > 0);
}

TEST_CASE("paged KV cache: blocks of 16 to 40 positions (scores of 16 positions in the vector lanes, a block's "
          "last few one at a time) give forward_cached's logits bit for bit", "[lab6][paged][forward]") {
  Rng rng(17, "paged-forward-blocks");
  // bt 16 and 32: whole vectors of positions (a sequence's last block partly filled); 24, 40, 17: a
  // vector and a tail of 8 / 8 / 1 positions one at a time; head sizes of whole vectors and not
  for (const std::int64_t bt : {16, 32, 24, 40, 17}) {
    for (int threads : {1, 2}) {
      ThreadCountGuard guard(threads);
      GPTConfig cfg = paged_config(rng);
      cfg.n_head = rng.randint(1, 9);
      cfg.n_embd = cfg.n_head * (rng.randint(0, 2) == 0 ? 16 * rng.randint(1, 3) : rng.randint(2, 13));
      cfg.n_layer = 2;
      cfg.block_size = rng.randint(bt + 1, 2 * bt + 20);
      (void)check_paged_equals_cached(cfg, rng,
                                      "bt=" + std::to_string(bt) + " H=" + std::to_string(cfg.n_head) + " C=" +
                                          std::to_string(cfg.n_embd) + " " + std::to_string(threads) + " thread(s)",
                                      bt);
    }
  }
}

TEST_CASE("paged KV cache: forks share the prefix's blocks, copy on write when they diverge",
          "[lab6][paged][forward]") {
  Rng rng(14, "paged-fork");
  for (int trial = 0; trial < 5; ++trial) {
    const GPTConfig cfg = paged_config(rng);
    const GPTParams p = random_params(cfg, rng);
    const std::int64_t V = cfg.vocab_size, bt = rng.randint(2, 6);
    PagedKVCache cache(cfg, 64, bt);
    const std::int64_t n0 = rng.randint(1, cfg.block_size - 2);
    std::vector<std::int32_t> prefix;
    for (std::int64_t i = 0; i < n0; ++i) prefix.push_back(static_cast<std::int32_t>(rng.randint(0, V)));
    const auto parent = cache.add_sequence();
    REQUIRE(cache.append(parent, n0));
    std::vector<PagedRow> rows;
    for (std::int64_t i = 0; i < n0; ++i) rows.push_back({parent, prefix[static_cast<std::size_t>(i)], i, false});
    forward_paged(p, cache, rows, nullptr);
    const std::int64_t used = cache.num_blocks() - cache.free_blocks();
    const auto child = cache.fork(parent);
    CHECK(cache.num_blocks() - cache.free_blocks() == used);  // the fork costs nothing
    CHECK(cache.block_table(child) == cache.block_table(parent));
    // the two continue with different tokens, in one batch; a partly filled shared block is copied
    const bool partial = n0 % bt != 0;
    CHECK(cache.blocks_needed(child, 1) == 1);  // a copy (partly filled) or a new block (full)
    std::vector<std::int32_t> ta = prefix, tb = prefix;
    const std::int64_t more = rng.randint(1, cfg.block_size - n0 + 1);
    for (std::int64_t i = 0; i < more; ++i) {
      ta.push_back(static_cast<std::int32_t>(rng.randint(0, V)));
      tb.push_back(static_cast<std::int32_t>((ta.back() + 1) % V));
    }
    REQUIRE(cache.append(parent, more));
    REQUIRE(cache.append(child, more));
    CHECK((cache.block_table(child).front() == cache.block_table(parent).front() ||
           (n0 < bt && partial)));  // the full prefix blocks stay shared
    rows.clear();
    for (std::int64_t i = n0; i < n0 + more; ++i) {
      rows.push_back({parent, ta[static_cast<std::size_t>(i)], i, true});
      rows.push_back({child, tb[static_cast<std::size_t>(i)], i, true});
    }
    std::vector<float> logits(rows.size() * static_cast<std::size_t>(V));
    forward_paged(p, cache, rows, logits.data());
    const auto wa = contiguous_logits(p, ta), wb = contiguous_logits(p, tb);
    std::vector<float> ga, gb;
    for (std::int64_t i = 0; i < more; ++i) {
      const float* la = logits.data() + 2 * i * V;
      ga.insert(ga.end(), la, la + V);
      gb.insert(gb.end(), la + V, la + 2 * V);
    }
    mls::testing::observe("fork: parent's logits, trial " + std::to_string(trial), ga);
    mls::testing::observe("fork: child's logits, trial " + std::to_string(trial), gb);
    CHECK(std::memcmp(ga.data(), wa.data() + n0 * V, ga.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(gb.data(), wb.data() + n0 * V, gb.size() * sizeof(float)) == 0);
    // shared full blocks: reference count 2
    for (std::int64_t b = 0; b < n0 / bt; ++b)
      CHECK(cache.allocator().ref_count(cache.block_table(child)[static_cast<std::size_t>(b)]) == 2);
    cache.free_sequence(parent);
    cache.free_sequence(child);
    CHECK(cache.free_blocks() == 64);
  }
}

TEST_CASE("paged KV cache: out of blocks, append says no and changes nothing, bad positions are errors",
          "[lab6][paged][forward]") {
  GPTConfig cfg = config_by_name("nano");
  cfg.vocab_size = 7;
  Rng rng(15, "paged-full");
  const GPTParams p = random_params(cfg, rng);
  PagedKVCache cache(cfg, 3, 4);
  const auto a = cache.add_sequence(), b = cache.add_sequence();
  REQUIRE(cache.append(a, 9));  // 3 blocks
  CHECK(cache.free_blocks() == 0);
  CHECK(cache.blocks_needed(b, 1) == 1);
  CHECK_FALSE(cache.append(b, 1));
  CHECK(cache.length(b) == 0);
  CHECK(cache.append(a, 3));  // fits in the last block
  CHECK_FALSE(cache.append(a, 1));
  mls::testing::observe("block table after filling the pool", cache.block_table(a));
  CHECK(cache.length(a) == 12);
  std::vector<PagedRow> rows{{a, 1, 12, true}};
  std::vector<float> logits(7);
  require_error([&] { forward_paged(p, cache, rows, logits.data()); }, "position 12");
  rows[0] = {a, 9, 0, true};
  require_error([&] { forward_paged(p, cache, rows, logits.data()); }, "token 9");
  require_error([&] { (void)cache.slot(a, 12); }, "position 12");
  require_error([&] { (void)cache.length(42); }, "no sequence 42");
  cache.free_sequence(a);
  CHECK(cache.free_blocks() == 3);
  CHECK(cache.append(b, 12));
  mls::testing::observe("block table of b after a was freed", cache.block_table(b));
}
