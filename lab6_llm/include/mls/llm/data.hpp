#pragma once
/// Lab 6: training data. Text files split into train/val token streams with seeded random
/// windows, and generated tasks (sorting digits, multi-digit addition) whose loss is masked to
/// the answer.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mls/common/rng.hpp"
#include "mls/llm/tokenizer.hpp"

namespace mls::llm {

/// One batch: B sequences of T tokens. targets[b, t] is the next token of inputs[b, t];
/// mask[b, t] is 1 where the loss counts and 0 elsewhere (all 1 for plain text).
struct Batch {
  std::int64_t B = 0, T = 0;
  std::vector<std::int32_t> inputs;   // (B, T)
  std::vector<std::int32_t> targets;  // (B, T)
  std::vector<float> mask;            // (B, T)
};

/// A source of batches. next() draws from a seeded stream; position()/seek() save and restore
/// where the stream is, so a resumed run sees exactly the batches it would have seen.
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual Batch next_train(std::int64_t B, std::int64_t T) = 0;
  virtual Batch next_val(std::int64_t B, std::int64_t T) = 0;
  virtual std::uint64_t position() const = 0;
  virtual void seek(std::uint64_t position) = 0;
};

/// position() of the sources below packs two counters: the train batches drawn so far (low 40
/// bits) and the val batches drawn so far (high 24 bits). Batch i of a split is drawn from that
/// split's named stream jumped ahead to draw i * 2^32, so seek() restores it exactly, with no replay.
std::uint64_t pack_position(std::uint64_t train_batches, std::uint64_t val_batches);
std::uint64_t position_train(std::uint64_t position);
std::uint64_t position_val(std::uint64_t position);

/// The text the repository ships for the examples and tests (relative to the repository root):
/// the first 65,535 bytes of tiny-shakespeare (lab6_llm/data/README.md).
inline constexpr const char* kShippedText = "lab6_llm/data/tinyshakespeare_64k.txt";
/// Where the whole tiny-shakespeare comes from (Karpathy's char-rnn; 1,115,394 bytes, its sha256
/// in lab6_llm/data/README.md): the text of the write-up's figures, not in the repository.
inline constexpr const char* kTinyShakespeareUrl =
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt";

/// Reads a text file for training: it must exist, be non-empty and valid UTF-8; each failure is
/// an mls::Error naming the file (and the byte offset of bad UTF-8). A file that does not exist
/// is an error that also names the shipped excerpt and where the whole tiny-shakespeare is.
std::string read_text_file(const std::string& path);

/// A text corpus as two token streams: the first 90% of the tokens for training, the last 10% for
/// validation. Batches are B random windows of T + 1 tokens (inputs and the targets shifted by one).
class TextData final : public DataSource {
 public:
  /// `text` must be non-empty valid UTF-8 that `tok` can encode, and each split must hold more than
  /// block_size + 1 tokens (else an mls::Error naming the sizes). Streams are "text/train" and
  /// "text/val" of `seed`.
  TextData(std::string_view text, const Tokenizer& tok, std::int64_t block_size, std::uint64_t seed,
           double val_fraction = 0.1);
  /// read_text_file(path), then the constructor above.
  static TextData from_file(const std::string& path, const Tokenizer& tok, std::int64_t block_size,
                            std::uint64_t seed, double val_fraction = 0.1);

  /// T in [1, block_size]; B >= 1.
  Batch next_train(std::int64_t B, std::int64_t T) override;
  Batch next_val(std::int64_t B, std::int64_t T) override;
  std::uint64_t position() const override { return pack_position(train_batches_, val_batches_); }
  void seek(std::uint64_t position) override;

  const std::vector<std::int32_t>& train_tokens() const { return train_; }
  const std::vector<std::int32_t>& val_tokens() const { return val_; }
  std::int64_t block_size() const { return block_size_; }

 private:
  Batch draw(const std::vector<std::int32_t>& split, const char* name, std::uint64_t index, std::int64_t B,
             std::int64_t T) const;
  std::vector<std::int32_t> train_, val_;
  std::int64_t block_size_;
  std::uint64_t seed_;
  std::uint64_t train_batches_ = 0, val_batches_ = 0;
};

// ---- generated tasks (minGPT-style) ----------------------------------------------------------

/// One problem of a generated task: the prompt and the answer as token ids.
struct Problem {
  std::vector<std::int32_t> prompt, answer;
};

/// A task with a fixed small vocabulary ("+0123456789=" as a char tokenizer), problems of one
/// length, and a held-out split: every problem belongs to train or val by a hash of its digits
/// (about 10% val), so train and val never share a problem. A training sequence is
/// prompt + answer; its inputs are all tokens but the last, its targets the next tokens, and the
/// mask is 1 only where the target is an answer token (the loss counts the answer only). With
/// T > sequence length - 1 the rest of the row is padded (token 0, mask 0).
class GeneratedTask : public DataSource {
 public:
  GeneratedTask(std::int64_t n_digits, std::uint64_t seed, const char* stream);
  /// The text of a problem, "312=" for the prompt, "123" for the answer, for the demo.
  virtual std::string name() const = 0;
  /// The task's tokenizer (the same vocabulary for every task, 12 characters).
  const Tokenizer& tokenizer() const { return *tok_; }
  std::int64_t vocab_size() const { return tok_->vocab_size(); }
  std::int64_t prompt_len() const { return prompt_len_; }
  std::int64_t answer_len() const { return answer_len_; }
  /// prompt_len + answer_len - 1: the T a batch needs at least.
  std::int64_t seq_len() const { return prompt_len_ + answer_len_ - 1; }
  std::int64_t n_digits() const { return n_digits_; }

  /// Problem number `index` of the task's problem space (0 <= index < space_size()).
  virtual Problem problem(std::uint64_t index) const = 0;
  virtual std::uint64_t space_size() const = 0;
  /// Whether problem `index` is in the held-out (val) split.
  bool is_val(std::uint64_t index) const;
  /// A random problem of a split from `rng`.
  Problem sample(Rng& rng, bool val) const;

  Batch next_train(std::int64_t B, std::int64_t T) override;
  Batch next_val(std::int64_t B, std::int64_t T) override;
  std::uint64_t position() const override { return pack_position(train_batches_, val_batches_); }
  void seek(std::uint64_t position) override;

 protected:
  void set_lengths(std::int64_t prompt_len, std::int64_t answer_len);
  std::int64_t n_digits_;
  std::unique_ptr<Tokenizer> tok_;

 private:
  Batch draw(bool val, std::uint64_t index, std::int64_t B, std::int64_t T) const;
  std::uint64_t seed_;
  std::string stream_;
  std::int64_t prompt_len_ = 0, answer_len_ = 0;
  std::uint64_t train_batches_ = 0, val_batches_ = 0;
};

/// Sorting: prompt "3142=" (n_digits digits then '='), answer "1234" (the digits sorted).
class SortTask final : public GeneratedTask {
 public:
  explicit SortTask(std::int64_t n_digits = 6, std::uint64_t seed = 0);
  std::string name() const override { return "sort"; }
  Problem problem(std::uint64_t index) const override;
  std::uint64_t space_size() const override;
};

/// Addition: prompt "0123+0456=" (two n_digits numbers, zero padded), answer the n_digits + 1
/// digits of the sum written least significant digit first ("9750" for 579: reversed, so the model
/// produces the digits in the order the carry needs).
class AdditionTask final : public GeneratedTask {
 public:
  explicit AdditionTask(std::int64_t n_digits = 2, std::uint64_t seed = 0);
  std::string name() const override { return "add"; }
  Problem problem(std::uint64_t index) const override;
  std::uint64_t space_size() const override;
};

/// "sort" or "add" (an mls::Error lists them otherwise).
std::unique_ptr<GeneratedTask> make_task(const std::string& name, std::int64_t n_digits, std::uint64_t seed);

/// Greedy decoding: given the prompt ids, returns `n_new` generated ids (the model's argmax).
using GreedyFn = std::function<std::vector<std::int32_t>(const std::vector<std::int32_t>& prompt, int n_new)>;

/// The fraction of `n_problems` problems of a split (drawn from the stream "eval" of `seed`, the
/// same ones every call) whose generated answer equals the true answer exactly.
double exact_match(const GeneratedTask& task, const GreedyFn& generate, std::int64_t n_problems, bool val = true,
                   std::uint64_t seed = 0);

}  // namespace mls::llm
