// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
#include "mls/llm/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <queue>
#include <unordered_map>

#include "mls/common/error.hpp"

namespace mls::llm {

// ---- UTF-8 -------------------------------------------------------------------------------------

namespace {

std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

}  // namespace

char32_t utf8_decode_at(std::string_view s, std::size_t pos, int& len, const char* op) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) {
    len = 1;
    return b0;
  }
  int n = 0;
  char32_t cp = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    fail(op, ": invalid UTF-8: byte ", hex_byte(b0), " at byte offset ", pos, " cannot start a character");
  }
  if (pos + static_cast<std::size_t>(n) > s.size())
    fail(op, ": invalid UTF-8: the ", n, "-byte character starting with ", hex_byte(b0), " at byte offset ", pos,
         " is truncated (the input ends after ", s.size() - pos, " bytes)");
  for (int k = 1; k < n; ++k) {
    const unsigned char b = byte(pos + k);
    if ((b & 0xC0) != 0x80)
      fail(op, ": invalid UTF-8: byte ", hex_byte(b), " at byte offset ", pos + k,
           " is not a continuation byte (of the character starting at byte offset ", pos, ")");
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min) fail(op, ": invalid UTF-8: overlong encoding at byte offset ", pos);
  if (cp >= 0xD800 && cp <= 0xDFFF) fail(op, ": invalid UTF-8: surrogate code point at byte offset ", pos);
  if (cp > 0x10FFFF) fail(op, ": invalid UTF-8: code point above U+10FFFF at byte offset ", pos);
  len = n;
  return cp;
}

void utf8_validate(std::string_view s, const char* op) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    utf8_decode_at(s, i, len, op);
    i += static_cast<std::size_t>(len);
  }
}

void utf8_append(std::string& out, char32_t cp) {
  MLS_CHECK(cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF), "utf8_append: code point ",
            static_cast<std::uint32_t>(cp), " is not a Unicode scalar value");
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string describe_code_point(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  if (cp < 0x20 || cp == 0x7F) return buf;
  std::string s = "'";
  utf8_append(s, cp);
  return s + "' (" + buf + ")";
}

// ---- serialisation helpers ---------------------------------------------------------------------

namespace {

constexpr std::string_view kHeader = "mls-tokenizer 1 ";

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::uint32_t get_u32(std::string_view s, std::size_t pos) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(s[pos + i])) << (8 * i);
  return v;
}

void check_ids(const std::vector<std::int32_t>& ids, std::int64_t vocab, const char* op) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    MLS_CHECK(ids[i] >= 0 && ids[i] < vocab, op, ": token id ", ids[i], " at position ", i,
              " is outside the vocabulary [0, ", vocab, ")");
}

// ---- character tokenizer -----------------------------------------------------------------------

class CharTokenizer final : public Tokenizer {
 public:
  explicit CharTokenizer(std::vector<char32_t> chars) : chars_(std::move(chars)) {
    std::fill(std::begin(ascii_), std::end(ascii_), -1);
    for (std::size_t i = 0; i < chars_.size(); ++i) {
      if (chars_[i] < 128) ascii_[chars_[i]] = static_cast<std::int32_t>(i);
      index_.emplace(chars_[i], static_cast<std::int32_t>(i));
    }
  }
  std::string kind() const override { return "char"; }
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(chars_.size()); }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::string serialize() const override {
    std::string out(kHeader);
    out += "char\n";
    for (char32_t c : chars_) utf8_append(out, c);
    return out;
  }

 private:
  std::vector<char32_t> chars_;                      // sorted code points; the id is the index
  std::unordered_map<char32_t, std::int32_t> index_;  // code point -> id
  std::int32_t ascii_[128];                           // ASCII code point -> id, -1 when absent
};

/// Maps each code point of `text` to its id (its index in the sorted vocabulary).
/// Invalid UTF-8 and a character outside the vocabulary are mls::Errors naming the character
/// (describe_code_point) and its byte offset. Hint: utf8_decode_at gives the code point and its length.
std::vector<std::int32_t> CharTokenizer::encode(std::string_view text) const {
  // BEGIN SOLUTION
  std::vector<std::int32_t> ids;
  ids.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    int len = 1;
    const auto b = static_cast<unsigned char>(text[i]);
    const char32_t cp = b < 0x80 ? b : utf8_decode_at(text, i, len, "char tokenizer encode");
    std::int32_t id = -1;
    if (cp < 128) {
      id = ascii_[cp];
    } else if (auto it = index_.find(cp); it != index_.end()) {
      id = it->second;
    }
    MLS_CHECK(id >= 0, "char tokenizer encode: character ", describe_code_point(cp), " at byte offset ", i,
              " is not in the vocabulary of ", chars_.size(), " characters");
    ids.push_back(id);
    i += static_cast<std::size_t>(len);
  }
  return ids;
  // END SOLUTION
}

/// Concatenates the UTF-8 encodings of the characters with ids `ids`; an id outside
/// [0, vocab_size) is an mls::Error naming the id and its position. Hint: utf8_append.
std::string CharTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  // BEGIN SOLUTION
  check_ids(ids, vocab_size(), "char tokenizer decode");
  std::string out;
  out.reserve(ids.size());
  for (std::int32_t id : ids) utf8_append(out, chars_[static_cast<std::size_t>(id)]);
  return out;
  // END SOLUTION
}

// ---- byte-level BPE ----------------------------------------------------------------------------

using Pair = std::pair<std::int32_t, std::int32_t>;

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(std::vector<Pair> merges) : merges_(std::move(merges)) {
    bytes_.resize(256 + merges_.size());
    for (int b = 0; b < 256; ++b) bytes_[static_cast<std::size_t>(b)] = std::string(1, static_cast<char>(b));
    for (std::size_t i = 0; i < merges_.size(); ++i) {
      const auto [a, b] = merges_[i];
      bytes_[256 + i] = bytes_[static_cast<std::size_t>(a)] + bytes_[static_cast<std::size_t>(b)];
      rank_.emplace(pair_key(a, b), static_cast<std::int32_t>(i));
    }
  }
  std::string kind() const override { return "bpe"; }
  std::int64_t vocab_size() const override { return 256 + static_cast<std::int64_t>(merges_.size()); }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::string serialize() const override {
    std::string out(kHeader);
    out += "bpe\n";
    put_u32(out, static_cast<std::uint32_t>(merges_.size()));
    for (const auto& [a, b] : merges_) {
      put_u32(out, static_cast<std::uint32_t>(a));
      put_u32(out, static_cast<std::uint32_t>(b));
    }
    return out;
  }
  const std::vector<Pair>& merges() const { return merges_; }

 private:
  std::vector<Pair> merges_;                           // rank i makes token 256 + i
  std::vector<std::string> bytes_;                     // the bytes of every token
  std::unordered_map<std::uint64_t, std::int32_t> rank_;  // pair -> rank
};

/// A sequence of tokens as a doubly linked list over positions, so that merging two neighbours
/// is O(1): position i holds tok[i] (-1 once merged away), prev[i] and next[i] (-1 at the ends).
struct TokenList {
  std::vector<std::int32_t> tok, prev, next;
  explicit TokenList(std::string_view bytes) : tok(bytes.size()), prev(bytes.size()), next(bytes.size()) {
    const auto n = static_cast<std::int32_t>(bytes.size());
    for (std::int32_t i = 0; i < n; ++i) {
      tok[static_cast<std::size_t>(i)] = static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
      prev[static_cast<std::size_t>(i)] = i - 1;
      next[static_cast<std::size_t>(i)] = i + 1 < n ? i + 1 : -1;
    }
  }
  /// Replaces the pair starting at `i` by token `z` (the right position is unlinked).
  void merge_at(std::int32_t i, std::int32_t z) {
    const auto ui = static_cast<std::size_t>(i);
    const std::int32_t j = next[ui];
    const std::int32_t k = next[static_cast<std::size_t>(j)];
    tok[ui] = z;
    tok[static_cast<std::size_t>(j)] = -1;
    next[ui] = k;
    if (k >= 0) prev[static_cast<std::size_t>(k)] = i;
  }
  std::vector<std::int32_t> collect() const {
    std::vector<std::int32_t> out;
    for (std::int32_t i = tok.empty() ? -1 : 0; i >= 0; i = next[static_cast<std::size_t>(i)])
      out.push_back(tok[static_cast<std::size_t>(i)]);
    return out;
  }
};

/// Learns `n_merges` merges on the bytes of `corpus`: count every adjacent pair, merge the most
/// frequent one into a new token, repeat. Ties go to the smallest pair (a, b) in lexicographic
/// order; training stops early when no pair occurs at least twice.
/// Hint: keep the pair counts and the positions of every pair up to date as you merge (only the
/// neighbours of a merged pair change), and pick the best pair from a max-heap whose stale entries
/// you skip — rescanning the whole corpus for every merge is far too slow for 1 MB.
std::vector<Pair> learn_bpe_merges(std::string_view corpus, std::int64_t n_merges) {
  // BEGIN SOLUTION
  std::vector<Pair> merges;
  if (corpus.size() < 2 || n_merges <= 0) return merges;
  TokenList list(corpus);
  std::unordered_map<std::uint64_t, std::int64_t> count;                 // pair -> occurrences
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> where;   // pair -> start positions (may be stale)
  using Entry = std::pair<std::int64_t, std::uint64_t>;                  // (count, pair key)
  // Max-heap on count; among equal counts the smallest key (lexicographic pair) first.
  auto worse = [](const Entry& x, const Entry& y) { return x.first != y.first ? x.first < y.first : x.second > y.second; };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);

  const auto n = static_cast<std::int32_t>(corpus.size());
  for (std::int32_t i = 0; i + 1 < n; ++i) {
    const std::uint64_t key = pair_key(list.tok[static_cast<std::size_t>(i)], list.tok[static_cast<std::size_t>(i) + 1]);
    ++count[key];
    where[key].push_back(i);
  }
  for (const auto& [key, c] : count) heap.push({c, key});

  auto add = [&](std::int32_t a, std::int32_t b, std::int32_t pos) {
    const std::uint64_t key = pair_key(a, b);
    const std::int64_t c = ++count[key];
    where[key].push_back(pos);
    heap.push({c, key});
  };
  auto remove = [&](std::int32_t a, std::int32_t b) { --count[pair_key(a, b)]; };

  while (static_cast<std::int64_t>(merges.size()) < n_merges && !heap.empty()) {
    const auto [c, key] = heap.top();
    heap.pop();
    const auto it = count.find(key);
    const std::int64_t now = it == count.end() ? 0 : it->second;
    if (now != c) {  // stale entry: re-queue the current count if the pair still occurs
      if (now > 0 && now < c) heap.push({now, key});
      continue;
    }
    if (c < 2) break;
    const auto a = static_cast<std::int32_t>(key >> 32), b = static_cast<std::int32_t>(key & 0xFFFFFFFFu);
    const auto z = static_cast<std::int32_t>(256 + merges.size());
    merges.emplace_back(a, b);
    std::vector<std::int32_t> positions = std::move(where[key]);
    where.erase(key);
    std::sort(positions.begin(), positions.end());  // left to right, as encode does
    for (std::int32_t i : positions) {
      const auto ui = static_cast<std::size_t>(i);
      const std::int32_t j = list.next[ui];
      if (list.tok[ui] != a || j < 0 || list.tok[static_cast<std::size_t>(j)] != b) continue;  // stale
      const std::int32_t p = list.prev[ui], k = list.next[static_cast<std::size_t>(j)];
      if (p >= 0) remove(list.tok[static_cast<std::size_t>(p)], a);
      if (k >= 0) remove(b, list.tok[static_cast<std::size_t>(k)]);
      remove(a, b);
      list.merge_at(i, z);
      if (p >= 0) add(list.tok[static_cast<std::size_t>(p)], z, p);
      if (k >= 0) add(z, list.tok[static_cast<std::size_t>(k)], i);
    }
    count.erase(key);
  }
  return merges;
  // END SOLUTION
}

/// Encodes `text` by starting from its bytes and applying the merges in rank order (the pair of
/// lowest rank first, leftmost occurrence first), as training did.
/// Hint: a min-heap of (rank, position) over the linked list; skip entries whose pair changed.
std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text) const {
  // BEGIN SOLUTION
  MLS_CHECK(text.size() < (std::size_t{1} << 31), "bpe tokenizer encode: text of ", text.size(),
            " bytes, expected fewer than 2^31");
  TokenList list(text);
  using Entry = std::pair<std::int32_t, std::int32_t>;  // (rank, position)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  auto rank_of = [&](std::int32_t i) -> std::int32_t {
    const std::int32_t j = list.next[static_cast<std::size_t>(i)];
    if (j < 0) return -1;
    const auto it = rank_.find(pair_key(list.tok[static_cast<std::size_t>(i)], list.tok[static_cast<std::size_t>(j)]));
    return it == rank_.end() ? -1 : it->second;
  };
  const auto n = static_cast<std::int32_t>(text.size());
  for (std::int32_t i = 0; i + 1 < n; ++i)
    if (const std::int32_t r = rank_of(i); r >= 0) heap.push({r, i});
  while (!heap.empty()) {
    const auto [r, i] = heap.top();
    heap.pop();
    if (list.tok[static_cast<std::size_t>(i)] < 0 || rank_of(i) != r) continue;  // stale
    list.merge_at(i, 256 + r);
    const std::int32_t p = list.prev[static_cast<std::size_t>(i)];
    if (p >= 0)
      if (const std::int32_t rp = rank_of(p); rp >= 0) heap.push({rp, p});
    if (const std::int32_t ri = rank_of(i); ri >= 0) heap.push({ri, i});
  }
  return list.collect();
  // END SOLUTION
}

std::string BpeTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  check_ids(ids, vocab_size(), "bpe tokenizer decode");
  std::string out;
  for (std::int32_t id : ids) out += bytes_[static_cast<std::size_t>(id)];
  return out;
}

}  // namespace

// ---- training and loading ----------------------------------------------------------------------

std::unique_ptr<Tokenizer> train_char_tokenizer(std::string_view corpus) {
  MLS_CHECK(!corpus.empty(), "train_char_tokenizer: the corpus is empty, expected at least one character");
  utf8_validate(corpus, "train_char_tokenizer");
  bool seen_ascii[128] = {};
  std::vector<char32_t> chars;
  std::size_t i = 0;
  while (i < corpus.size()) {
    const auto b = static_cast<unsigned char>(corpus[i]);
    if (b < 0x80) {
      if (!seen_ascii[b]) seen_ascii[b] = true, chars.push_back(b);
      ++i;
      continue;
    }
    int len = 0;
    chars.push_back(utf8_decode_at(corpus, i, len, "train_char_tokenizer"));
    i += static_cast<std::size_t>(len);
  }
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return std::make_unique<CharTokenizer>(std::move(chars));
}

std::unique_ptr<Tokenizer> train_bpe_tokenizer(std::string_view corpus, std::int64_t vocab_size) {
  MLS_CHECK(vocab_size >= 256 && vocab_size <= (1 << 20), "train_bpe_tokenizer: vocab_size = ", vocab_size,
            ", expected 256..1048576 (256 byte tokens + merges)");
  MLS_CHECK(corpus.size() < (std::size_t{1} << 31), "train_bpe_tokenizer: corpus of ", corpus.size(),
            " bytes, expected fewer than 2^31");
  return std::make_unique<BpeTokenizer>(learn_bpe_merges(corpus, vocab_size - 256));
}

std::unique_ptr<Tokenizer> train_tokenizer(const std::string& kind, std::string_view corpus,
                                           std::int64_t vocab_size) {
  if (kind == "char") return train_char_tokenizer(corpus);
  if (kind == "bpe") return train_bpe_tokenizer(corpus, vocab_size);
  fail("train_tokenizer: unknown tokenizer kind '", kind, "', expected 'char' or 'bpe'");
}

std::vector<std::int32_t> encode_prompt(const Tokenizer& tok, std::string_view prompt, std::int64_t block_size) {
  MLS_CHECK(!prompt.empty(), "prompt: the prompt is empty, expected at least one character");
  utf8_validate(prompt, "prompt");
  std::vector<std::int32_t> ids = tok.encode(prompt);
  MLS_CHECK(static_cast<std::int64_t>(ids.size()) <= block_size, "prompt: ", ids.size(),
            " tokens, longer than the block size ", block_size, " (shorten the prompt)");
  return ids;
}

std::vector<std::pair<std::int32_t, std::int32_t>> bpe_merges(const Tokenizer& tok) {
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok);
  MLS_CHECK(bpe != nullptr, "bpe_merges: the tokenizer is of kind '", tok.kind(), "', expected 'bpe'");
  return bpe->merges();
}

std::unique_ptr<Tokenizer> load_tokenizer(std::string_view bytes) {
  MLS_CHECK(bytes.substr(0, kHeader.size()) == kHeader, "load_tokenizer: not a tokenizer (expected it to start with '",
            kHeader, "', got ", bytes.size(), " bytes starting differently)");
  const std::size_t eol = bytes.find('\n', kHeader.size());
  MLS_CHECK(eol != std::string_view::npos && eol - kHeader.size() <= 16,
            "load_tokenizer: the header has no kind line (expected 'char' or 'bpe')");
  const std::string_view kind = bytes.substr(kHeader.size(), eol - kHeader.size());
  const std::string_view payload = bytes.substr(eol + 1);
  if (kind == "char") {
    MLS_CHECK(!payload.empty(), "load_tokenizer: a char tokenizer with an empty vocabulary");
    std::vector<char32_t> chars;
    std::size_t i = 0;
    while (i < payload.size()) {
      int len = 0;
      const char32_t cp = utf8_decode_at(payload, i, len, "load_tokenizer (char vocabulary)");
      MLS_CHECK(chars.empty() || chars.back() < cp, "load_tokenizer: the char vocabulary is not strictly sorted at ",
                describe_code_point(cp), " (byte offset ", i, ")");
      chars.push_back(cp);
      i += static_cast<std::size_t>(len);
    }
    return std::make_unique<CharTokenizer>(std::move(chars));
  }
  if (kind == "bpe") {
    MLS_CHECK(payload.size() >= 4, "load_tokenizer: a bpe tokenizer of ", payload.size(),
              " payload bytes, expected at least 4 (the merge count)");
    const std::uint32_t m = get_u32(payload, 0);
    MLS_CHECK(m <= (1u << 20) && payload.size() == 4 + std::size_t{8} * m, "load_tokenizer: a bpe tokenizer of ", m,
              " merges needs ", 4 + std::uint64_t{8} * m, " payload bytes, got ", payload.size());
    std::vector<Pair> merges;
    std::unordered_map<std::uint64_t, std::uint32_t> seen;
    for (std::uint32_t i = 0; i < m; ++i) {
      const auto a = static_cast<std::int32_t>(get_u32(payload, 4 + 8 * std::size_t{i}));
      const auto b = static_cast<std::int32_t>(get_u32(payload, 8 + 8 * std::size_t{i}));
      const std::int64_t limit = 256 + static_cast<std::int64_t>(i);
      MLS_CHECK(a >= 0 && a < limit && b >= 0 && b < limit, "load_tokenizer: bpe merge ", i, " = (", a, ", ", b,
                ") uses a token that does not exist yet (expected ids below ", limit, ")");
      MLS_CHECK(seen.emplace(pair_key(a, b), i).second, "load_tokenizer: bpe merge ", i, " = (", a, ", ", b,
                ") repeats merge ", seen[pair_key(a, b)]);
      merges.emplace_back(a, b);
    }
    return std::make_unique<BpeTokenizer>(std::move(merges));
  }
  fail("load_tokenizer: unknown tokenizer kind '", kind, "', expected 'char' or 'bpe'");
}

}  // namespace mls::llm
