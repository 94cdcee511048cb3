#pragma once
/// Lab 6: tokenizers. Character-level (the vocabulary is the set of code points of a corpus) and
/// byte-level BPE (256 byte tokens + learned merges). Both serialise to a byte string that is
/// stored inside a checkpoint, so a checkpoint always carries the tokenizer it was trained with.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
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

}  // namespace mls::llm
