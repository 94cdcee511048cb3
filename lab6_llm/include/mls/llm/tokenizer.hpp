#pragma once
/// Lab 6: tokenizers. Character-level (the vocabulary is the set of code points of a corpus) and
/// byte-level BPE (256 byte tokens + learned merges). Both serialise to a byte string that is
/// stored inside a checkpoint, so a checkpoint always carries the tokenizer it was trained with.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mls::llm {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// "char" or "bpe".
  virtual std::string kind() const = 0;
  virtual std::int64_t vocab_size() const = 0;
  /// Throws mls::Error for input it cannot encode (a character outside a char vocabulary,
  /// invalid UTF-8), naming the offending character and its byte offset.
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  /// Throws mls::Error for an id outside [0, vocab_size).
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;
  /// A self-describing byte string (kind + payload) that `load_tokenizer` reads back.
  virtual std::string serialize() const = 0;
};

/// Character tokenizer over the code points of `corpus` (valid UTF-8, non-empty), sorted.
std::unique_ptr<Tokenizer> train_char_tokenizer(std::string_view corpus);
/// Byte-level BPE with `vocab_size` >= 256 tokens (256 bytes + vocab_size - 256 merges, fewer if
/// the corpus runs out of pairs). encode∘decode is the identity on any byte string.
std::unique_ptr<Tokenizer> train_bpe_tokenizer(std::string_view corpus, std::int64_t vocab_size);
/// Reads what `serialize` wrote; a corrupt or unknown payload is an mls::Error.
std::unique_ptr<Tokenizer> load_tokenizer(std::string_view bytes);
/// "char" -> train_char_tokenizer(corpus); "bpe" -> train_bpe_tokenizer(corpus, vocab_size).
/// Any other kind is an mls::Error naming the known ones.
std::unique_ptr<Tokenizer> train_tokenizer(const std::string& kind, std::string_view corpus,
                                           std::int64_t vocab_size);

/// A prompt for sampling: encoded with `tok` (invalid UTF-8 or a character outside a char
/// vocabulary is an mls::Error naming it and its byte offset); an empty prompt or one longer than
/// `block_size` tokens is an mls::Error naming both lengths.
std::vector<std::int32_t> encode_prompt(const Tokenizer& tok, std::string_view prompt, std::int64_t block_size);

// ---- UTF-8 (shared by the char tokenizer, the data loader and prompt checks) -------------------

/// Decodes the code point starting at byte `pos` of `s`, stores its byte length in `len`.
/// Throws mls::Error naming `op`, the byte value and the byte offset on invalid UTF-8 (bad lead
/// byte, truncated sequence, bad continuation, overlong form, surrogate, > U+10FFFF).
char32_t utf8_decode_at(std::string_view s, std::size_t pos, int& len, const char* op);
/// Throws mls::Error (as above) unless `s` is valid UTF-8.
void utf8_validate(std::string_view s, const char* op);
/// Appends the UTF-8 encoding of code point `cp` (<= U+10FFFF, not a surrogate) to `out`.
void utf8_append(std::string& out, char32_t cp);
/// "'a' (U+0061)" for messages; control characters are shown by their code point only.
std::string describe_code_point(char32_t cp);

/// The byte-level BPE merges (rank i makes token 256 + i from the pair merges[i]), for tests and
/// the handout's worked example. Throws mls::Error when `tok` is not a BPE tokenizer.
std::vector<std::pair<std::int32_t, std::int32_t>> bpe_merges(const Tokenizer& tok);

}  // namespace mls::llm
