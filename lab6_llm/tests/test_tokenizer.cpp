// Lab 6 tokenizers: the character tokenizer and byte-level BPE (round trips on random input,
// worked examples, an independent naive BPE, serialisation, errors), and the UTF-8 helpers.
#include <map>
#include <set>

#include "lab6_helpers.hpp"
#include "mls/llm/tokenizer.hpp"

using namespace mls::llm;
using llm_test::require_error;

namespace {

/// Independent naive BPE trainer: rescans the whole sequence for every merge (counts adjacent
/// pairs, takes the most frequent, ties to the smallest pair, merges left to right).
std::vector<std::pair<std::int32_t, std::int32_t>> naive_bpe(const std::string& text, int n_merges,
                                                             std::vector<std::int32_t>* final_ids = nullptr) {
  std::vector<std::int32_t> ids(text.begin(), text.end());
  for (auto& x : ids) x &= 0xFF;
  std::vector<std::pair<std::int32_t, std::int32_t>> merges;
  for (int m = 0; m < n_merges; ++m) {
    std::map<std::pair<std::int32_t, std::int32_t>, int> counts;
    for (std::size_t i = 0; i + 1 < ids.size(); ++i) ++counts[{ids[i], ids[i + 1]}];
    std::pair<std::int32_t, std::int32_t> best{};
    int best_count = 1;
    for (const auto& [p, c] : counts)  // map order: smallest pair first, so ties keep the first
      if (c > best_count) best = p, best_count = c;
    if (best_count < 2) break;
    merges.push_back(best);
    std::vector<std::int32_t> out;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (i + 1 < ids.size() && ids[i] == best.first && ids[i + 1] == best.second) {
        out.push_back(256 + m);
        ++i;
      } else {
        out.push_back(ids[i]);
      }
    }
    ids = out;
  }
  if (final_ids) *final_ids = ids;
  return merges;
}

/// Naive encode: apply merge 0 everywhere left to right, then merge 1, ...
std::vector<std::int32_t> naive_encode(const std::string& text,
                                       const std::vector<std::pair<std::int32_t, std::int32_t>>& merges) {
  std::vector<std::int32_t> ids(text.begin(), text.end());
  for (auto& x : ids) x &= 0xFF;
  for (std::size_t m = 0; m < merges.size(); ++m) {
    std::vector<std::int32_t> out;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (i + 1 < ids.size() && ids[i] == merges[m].first && ids[i + 1] == merges[m].second) {
        out.push_back(static_cast<std::int32_t>(256 + m));
        ++i;
      } else {
        out.push_back(ids[i]);
      }
    }
    ids = out;
  }
  return ids;
}

}  // namespace

// ---- character tokenizer -----------------------------------------------------------------------

TEST_CASE("char tokenizer: worked example hello", "[lab6][tokenizer]") {
  auto tok = train_char_tokenizer("hello world");
  mls::testing::observe("kind", std::string(tok->kind()));
  MLS_ORACLE_CHECK(CHECK(tok->kind() == "char"));
  MLS_OBSERVE(tok->vocab_size());
  MLS_OBSERVE(tok->encode("hello"));
  MLS_OBSERVE(tok->decode({7, 5, 6, 4, 1}));
  MLS_OBSERVE(tok->encode(""));
  MLS_ORACLE_CHECK(CHECK(tok->vocab_size() == 8));  // ' ' d e h l o r w
  MLS_ORACLE_CHECK(CHECK(tok->encode("hello") == std::vector<std::int32_t>{3, 2, 4, 4, 5}));
  MLS_ORACLE_CHECK(CHECK(tok->encode("") == std::vector<std::int32_t>{}));
  MLS_ORACLE_CHECK(CHECK(tok->decode({7, 5, 6, 4, 1}) == "world"));
}

TEST_CASE("char tokenizer: code points, not bytes", "[lab6][tokenizer]") {
  const std::string text = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80";  // "héllo € 😀"
  auto tok = train_char_tokenizer(text);
  MLS_ORACLE_CHECK(CHECK(tok->vocab_size() == 7));  // ' ' h l o e-acute euro grin
  const auto ids = tok->encode(text);
  MLS_OBSERVE(tok->vocab_size());
  MLS_OBSERVE(ids);
  MLS_ORACLE_CHECK(CHECK(ids == std::vector<std::int32_t>{1, 4, 2, 2, 3, 0, 5, 0, 6}));
  CHECK(tok->decode(ids) == text);
}

TEST_CASE("char tokenizer: round trip on random UTF-8", "[lab6][tokenizer]") {
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    const std::string text = llm_test::random_utf8(2000, seed);
    auto tok = train_char_tokenizer(text);
    const auto ids = tok->encode(text);
    MLS_OBSERVE(ids);  // the vocabulary is the sorted code points: the ids follow from the text
    // The oracle: an independent count of code points (bytes that are not continuation bytes).
    MLS_ORACLE(std::size_t n_cp = 0; for (char c : text) n_cp += (static_cast<unsigned char>(c) & 0xC0) != 0x80;)
    MLS_ORACLE_CHECK(CHECK(ids.size() == n_cp));
    CHECK(tok->decode(ids) == text);
    for (auto id : ids) CHECK((id >= 0 && id < tok->vocab_size()));
  }
}

TEST_CASE("char tokenizer: serialize and load", "[lab6][tokenizer]") {
  const std::string text = llm_test::random_utf8(500, 7);
  auto tok = train_char_tokenizer(text);
  auto back = load_tokenizer(tok->serialize());
  MLS_OBSERVE(back->vocab_size());
  MLS_OBSERVE(back->encode(text));
  mls::testing::observe("kind", std::string(back->kind()));
  MLS_ORACLE_CHECK(CHECK(back->kind() == "char"));
  CHECK(back->vocab_size() == tok->vocab_size());
  CHECK(back->encode(text) == tok->encode(text));
  CHECK(back->serialize() == tok->serialize());
}

TEST_CASE("char tokenizer: errors name the character and its offset", "[lab6][tokenizer]") {
  auto tok = train_char_tokenizer("abc");
  require_error([&] { tok->encode("abxc"); }, "character 'x' (U+0078) at byte offset 2");
  require_error([&] { tok->encode("ab\xc3\xa9"); }, "U+00E9");
  require_error([&] { tok->encode("ab\xff"); }, "byte 0xff at byte offset 2");
  require_error([&] { tok->encode("a\xe2\x82"); }, "truncated");
  require_error([&] { tok->decode({0, 3}); }, "token id 3 at position 1 is outside the vocabulary [0, 3)");
  require_error([&] { tok->decode({-1}); }, "token id -1");
}

// ---- byte-level BPE ----------------------------------------------------------------------------

TEST_CASE("bpe: worked example aaabdaaabac", "[lab6][tokenizer]") {
  // aa -> Z (256), ab -> Y (257; ties with Za go to the smaller pair), ZY -> X (258): "XdXac".
  auto tok = train_bpe_tokenizer("aaabdaaabac", 259);
  MLS_OBSERVE(llm_test::flat_pairs(bpe_merges(*tok)));
  MLS_OBSERVE(tok->encode("aaabdaaabac"));
  MLS_OBSERVE(tok->decode({258}));
  mls::testing::observe("kind", std::string(tok->kind()));
  MLS_ORACLE_CHECK(CHECK(tok->kind() == "bpe"));
  MLS_ORACLE_CHECK(CHECK(tok->vocab_size() == 259));
  const auto merges = bpe_merges(*tok);
  REQUIRE(merges.size() == 3);
  MLS_ORACLE_CHECK(CHECK(merges[0] == std::pair<std::int32_t, std::int32_t>{'a', 'a'}));
  MLS_ORACLE_CHECK(CHECK(merges[1] == std::pair<std::int32_t, std::int32_t>{'a', 'b'}));
  MLS_ORACLE_CHECK(CHECK(merges[2] == std::pair<std::int32_t, std::int32_t>{256, 257}));
  MLS_ORACLE_CHECK(CHECK(tok->encode("aaabdaaabac") == std::vector<std::int32_t>{258, 'd', 258, 'a', 'c'}));
  MLS_ORACLE_CHECK(CHECK(tok->decode({258}) == "aaab"));
}

TEST_CASE("bpe: stops when no pair repeats", "[lab6][tokenizer]") {
  auto tok = train_bpe_tokenizer("abcdef", 300);
  MLS_ORACLE_CHECK(CHECK(tok->vocab_size() == 256));
  MLS_ORACLE_CHECK(CHECK(tok->encode("abc") == std::vector<std::int32_t>{'a', 'b', 'c'}));
  MLS_OBSERVE(tok->vocab_size());
  MLS_OBSERVE(tok->encode("abc"));
  auto one = train_bpe_tokenizer("", 300);
  MLS_OBSERVE(one->vocab_size());
  MLS_OBSERVE(one->decode(one->encode("xyz")));
  MLS_ORACLE_CHECK(CHECK(one->vocab_size() == 256));
  MLS_ORACLE_CHECK(CHECK(one->decode(one->encode("xyz")) == "xyz"));
}

TEST_CASE("bpe: overlapping runs merge left to right", "[lab6][tokenizer]") {
  auto tok = train_bpe_tokenizer("aaaaaaaaa", 258);  // aa -> 256 (4 times), then (256,256) -> 257
  const auto merges = bpe_merges(*tok);
  REQUIRE(merges.size() == 2);
  MLS_OBSERVE(llm_test::flat_pairs(merges));
  MLS_OBSERVE(tok->encode("aaaaa"));
  MLS_OBSERVE(tok->encode("aaa"));
  MLS_ORACLE_CHECK(CHECK(merges[1] == std::pair<std::int32_t, std::int32_t>{256, 256}));
  MLS_ORACLE_CHECK(CHECK(tok->encode("aaaaa") == std::vector<std::int32_t>{257, 'a'}));
  MLS_ORACLE_CHECK(CHECK(tok->encode("aaa") == std::vector<std::int32_t>{256, 'a'}));
}

TEST_CASE("bpe: merges and encoding equal a naive reference on random text", "[lab6][tokenizer]") {
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    const std::string text = seed % 2 ? llm_test::random_words(400, seed) : llm_test::random_bytes(1500, seed) ;
    auto tok = train_bpe_tokenizer(text, 256 + 60);
    MLS_OBSERVE(llm_test::flat_pairs(bpe_merges(*tok)));
    MLS_OBSERVE(tok->encode(text));
    const std::string other = llm_test::random_words(100, seed + 100);
    MLS_OBSERVE(tok->encode(other));
    // The oracle: the naive BPE, after the code ran.
    MLS_ORACLE(std::vector<std::int32_t> final_ids; const auto expect = naive_bpe(text, 60, &final_ids);)
    MLS_ORACLE_CHECK(CHECK(bpe_merges(*tok) == expect); CHECK(tok->encode(text) == final_ids);
                     CHECK(tok->encode(other) == naive_encode(other, expect)));
  }
}

TEST_CASE("bpe: encode then decode is the identity on random bytes and UTF-8", "[lab6][tokenizer]") {
  auto tok = train_bpe_tokenizer(llm_test::random_words(3000, 1), 400);
  MLS_OBSERVE(tok->vocab_size());
  MLS_OBSERVE(tok->encode(llm_test::random_words(60, 77)));
  CHECK(tok->vocab_size() > 300);
  for (std::uint64_t seed = 0; seed < 10; ++seed) {
    const std::string bytes = llm_test::random_bytes(1 + seed * 97, seed);
    CHECK(tok->decode(tok->encode(bytes)) == bytes);
    const std::string utf8 = llm_test::random_utf8(1 + seed * 50, seed);
    CHECK(tok->decode(tok->encode(utf8)) == utf8);
    const std::string words = llm_test::random_words(50 + seed, seed + 50);
    const auto ids = tok->encode(words);
    CHECK(ids.size() < words.size());  // it compresses the kind of text it was trained on
    CHECK(tok->decode(ids) == words);
  }
  // A tokenizer trained on random bytes round-trips too.
  auto tok2 = train_bpe_tokenizer(llm_test::random_bytes(4000, 3), 300);
  const std::string bytes = llm_test::random_bytes(3000, 4);
  CHECK(tok2->decode(tok2->encode(bytes)) == bytes);
}

TEST_CASE("bpe: trains 512 tokens on ~1 MB", "[lab6][tokenizer]") {
  const std::string text = llm_test::random_words(200000, 9);  // about 0.8 MB
  auto tok = train_bpe_tokenizer(text, 512);
  MLS_OBSERVE(tok->vocab_size());
  MLS_OBSERVE(llm_test::flat_pairs(bpe_merges(*tok)));
  MLS_CHECK_EQ(tok->vocab_size(), 512);
  const auto ids = tok->encode(text);
  CHECK(ids.size() * 3 < text.size());
  CHECK(tok->decode(ids) == text);
}

TEST_CASE("bpe: serialize and load", "[lab6][tokenizer]") {
  const std::string text = llm_test::random_words(500, 2);
  auto tok = train_bpe_tokenizer(text, 320);
  auto back = load_tokenizer(tok->serialize());
  MLS_OBSERVE(llm_test::flat_pairs(bpe_merges(*back)));
  MLS_OBSERVE(back->encode(text));
  mls::testing::observe("kind", std::string(back->kind()));
  MLS_ORACLE_CHECK(CHECK(back->kind() == "bpe"));
  CHECK(back->vocab_size() == tok->vocab_size());
  CHECK(bpe_merges(*back) == bpe_merges(*tok));
  CHECK(back->encode(text) == tok->encode(text));
}

TEST_CASE("bpe: errors", "[lab6][tokenizer]") {
  require_error([] { train_bpe_tokenizer("abc", 255); }, "vocab_size = 255, expected 256");
  auto tok = train_bpe_tokenizer("abab", 257);
  require_error([&] { tok->decode({257}); }, "token id 257 at position 0 is outside the vocabulary [0, 257)");
  require_error([] { train_tokenizer("wordpiece", "abc", 300); }, "unknown tokenizer kind 'wordpiece'");
  CHECK(train_tokenizer("bpe", "abab", 257)->decode(tok->encode("abab")) == "abab");
  MLS_OBSERVE(tok->encode("abab"));
  MLS_OBSERVE(train_tokenizer("char", "abab", 0)->encode("ba"));
  CHECK(train_tokenizer("char", "abab", 0)->encode("ba") == std::vector<std::int32_t>{1, 0});
}

// ---- given: UTF-8 helpers, loading, training errors ---------------------------------------------

TEST_CASE("utf8: decode, validate, append", "[lab6][utf8]") {
  int len = 0;
  mls::testing::observe("code point, length", std::vector<std::int64_t>{static_cast<std::int64_t>(utf8_decode_at("x\xf0\x9f\x98\x80", 1, len, "t")), len});
  MLS_CHECK_EQ(static_cast<std::int64_t>(utf8_decode_at("a", 0, len, "t")), static_cast<std::int64_t>(U'a'));
  MLS_CHECK_EQ(len, 1);
  MLS_CHECK_EQ(static_cast<std::int64_t>(utf8_decode_at("\xe2\x82\xac", 0, len, "t")), static_cast<std::int64_t>(U'\u20AC'));
  MLS_CHECK_EQ(len, 3);
  MLS_CHECK_EQ(static_cast<std::int64_t>(utf8_decode_at("x\xf0\x9f\x98\x80", 1, len, "t")), static_cast<std::int64_t>(U'\U0001F600'));
  MLS_CHECK_EQ(len, 4);
  std::string s;
  for (char32_t cp : {U'a', U'\u00E9', U'\u20AC', U'\U0001F600'}) utf8_append(s, cp);
  MLS_OBSERVE(s);
  MLS_OBSERVE(describe_code_point(U'a'));
  MLS_CHECK_EQ(s, std::string("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
  const std::string r = llm_test::random_utf8(1000, 11);
  CHECK_NOTHROW(utf8_validate(r, "t"));
  MLS_CHECK_EQ(describe_code_point(U'a'), std::string("'a' (U+0061)"));
  MLS_CHECK_EQ(describe_code_point(U'\n'), std::string("U+000A"));
}

TEST_CASE("utf8: every kind of invalid input is an error with its offset", "[lab6][utf8]") {
  require_error([] { utf8_validate("ab\x80", "op"); }, "op: invalid UTF-8: byte 0x80 at byte offset 2 cannot start");
  require_error([] { utf8_validate("\xc3", "op"); }, "truncated");
  require_error([] { utf8_validate("\xc3\x41", "op"); }, "byte 0x41 at byte offset 1 is not a continuation byte");
  require_error([] { utf8_validate("\xc0\xaf", "op"); }, "overlong encoding at byte offset 0");
  require_error([] { utf8_validate("\xed\xa0\x80", "op"); }, "surrogate");
  require_error([] { utf8_validate("\xf4\x90\x80\x80", "op"); }, "above U+10FFFF");
  require_error([] { utf8_validate("\xf8\x88\x80\x80\x80", "op"); }, "cannot start a character");
  std::string s;
  require_error([&] { utf8_append(s, 0xD800); }, "not a Unicode scalar value");
  // Random bytes are almost never valid UTF-8: the error is an mls::Error, never a crash.
  int errors = 0;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    try {
      utf8_validate(llm_test::random_bytes(64, seed), "op");
    } catch (const mls::Error&) {
      ++errors;
    }
  }
  MLS_OBSERVE(errors);
  MLS_CHECK_EQ(errors, 20);
}

TEST_CASE("tokenizer: training and loading errors", "[lab6][utf8]") {
  require_error([] { train_char_tokenizer(""); }, "the corpus is empty");
  require_error([] { train_char_tokenizer("ab\xfe"); }, "train_char_tokenizer: invalid UTF-8: byte 0xfe at byte offset 2");
  require_error([] { load_tokenizer("hello"); }, "load_tokenizer: not a tokenizer");
  require_error([] { load_tokenizer("mls-tokenizer 1 wordpiece\nxyz"); }, "unknown tokenizer kind 'wordpiece'");
  require_error([] { load_tokenizer("mls-tokenizer 1 char"); }, "no kind line");
  require_error([] { load_tokenizer("mls-tokenizer 1 char\n"); }, "empty vocabulary");
  require_error([] { load_tokenizer("mls-tokenizer 1 char\nba"); }, "not strictly sorted");
  require_error([] { load_tokenizer("mls-tokenizer 1 char\na\xff"); }, "invalid UTF-8");
  require_error([] { load_tokenizer("mls-tokenizer 1 bpe\n"); }, "at least 4");
  std::string bpe = "mls-tokenizer 1 bpe\n";
  bpe += std::string("\x01\x00\x00\x00", 4);
  require_error([&] { load_tokenizer(bpe); }, "1 merges needs 12 payload bytes, got 4");
  std::string bad = bpe + std::string("\x00\x01\x00\x00\x61\x00\x00\x00", 8);  // (256, 'a') as merge 0
  require_error([&] { load_tokenizer(bad); }, "bpe merge 0 = (256, 97) uses a token that does not exist yet");
  std::string dup = "mls-tokenizer 1 bpe\n" + std::string("\x02\x00\x00\x00", 4) +
                    std::string("\x61\x00\x00\x00\x62\x00\x00\x00", 8) + std::string("\x61\x00\x00\x00\x62\x00\x00\x00", 8);
  require_error([&] { load_tokenizer(dup); }, "repeats merge 0");
  auto empty = load_tokenizer("mls-tokenizer 1 bpe\n" + std::string(4, '\0'));
  MLS_OBSERVE(empty->vocab_size());
  MLS_CHECK_EQ(empty->vocab_size(), 256);
  require_error([] { bpe_merges(*train_char_tokenizer("ab")); }, "of kind 'char', expected 'bpe'");
}

TEST_CASE("prompts: encoded, checked against the vocabulary and the block size", "[lab6][tokenizer]") {
  auto tok = train_char_tokenizer("hello world");
  MLS_OBSERVE(encode_prompt(*tok, "hello", 8));
  CHECK(encode_prompt(*tok, "hello", 8) == tok->encode("hello"));
  require_error([&] { encode_prompt(*tok, "hello!", 8); }, "character '!' (U+0021) at byte offset 5");
  require_error([&] { encode_prompt(*tok, "hello world", 8); }, "prompt: 11 tokens, longer than the block size 8");
  require_error([&] { encode_prompt(*tok, "", 8); }, "the prompt is empty");
  require_error([&] { encode_prompt(*tok, "he\xc3", 8); }, "prompt: invalid UTF-8");
  auto bpe = train_bpe_tokenizer("hello hello hello", 260);
  MLS_OBSERVE(encode_prompt(*bpe, "hello hello", 4));
  CHECK(encode_prompt(*bpe, "hello hello", 4).size() <= 4);
  require_error([&] { encode_prompt(*bpe, "hello hello hello hello", 3); }, "longer than the block size 3");
}
