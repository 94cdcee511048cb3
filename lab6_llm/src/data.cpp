// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
#include "mls/llm/data.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"

namespace mls::llm {

namespace {
constexpr int kTrainBits = 40;
constexpr std::uint64_t kTrainMask = (std::uint64_t{1} << kTrainBits) - 1;
constexpr std::uint64_t kValLimit = std::uint64_t{1} << (64 - kTrainBits);

/// The generator for batch `index` of a split: the split's named stream, jumped to draw index * 2^32.
[[maybe_unused]] Rng batch_rng(std::uint64_t seed, const std::string& stream, std::uint64_t index) {
  Rng rng(seed, stream);
  rng.skip(index << 32);
  return rng;
}

void check_batch_dims(const char* op, std::int64_t B, std::int64_t T) {
  MLS_CHECK(B >= 1 && B <= (1 << 20), op, ": batch size B = ", B, ", expected 1..1048576");
  MLS_CHECK(T >= 1, op, ": sequence length T = ", T, ", expected >= 1");
}
}  // namespace

std::uint64_t pack_position(std::uint64_t train_batches, std::uint64_t val_batches) {
  MLS_CHECK(train_batches <= kTrainMask && val_batches < kValLimit, "pack_position: ", train_batches,
            " train and ", val_batches, " val batches, expected fewer than 2^40 and 2^24");
  return (val_batches << kTrainBits) | train_batches;
}
std::uint64_t position_train(std::uint64_t position) { return position & kTrainMask; }
std::uint64_t position_val(std::uint64_t position) { return position >> kTrainBits; }

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec)
    fail("read_text_file: cannot open '", path, "': no such file; expected a UTF-8 text file (the repository ships ",
         kShippedText, ", the first 64 KB of tiny-shakespeare; the whole text is ", kTinyShakespeareUrl,
         ", see lab6_llm/data/README.md)");
  std::string text = read_file(path, "read_text_file");
  MLS_CHECK(!text.empty(), "read_text_file: '", path, "' is empty, expected UTF-8 text");
  const std::string op = "read_text_file: '" + path + "'";
  utf8_validate(text, op.c_str());
  return text;
}

// ---- text ------------------------------------------------------------------------------------

TextData::TextData(std::string_view text, const Tokenizer& tok, std::int64_t block_size, std::uint64_t seed,
                   double val_fraction)
    : block_size_(block_size), seed_(seed) {
  MLS_CHECK(!text.empty(), "TextData: the text is empty, expected UTF-8 text");
  MLS_CHECK(block_size >= 1, "TextData: block_size = ", block_size, ", expected >= 1");
  MLS_CHECK(val_fraction > 0 && val_fraction < 1, "TextData: val_fraction = ", val_fraction, ", expected in (0, 1)");
  utf8_validate(text, "TextData");
  std::vector<std::int32_t> ids = tok.encode(text);
  const auto n = static_cast<std::int64_t>(ids.size());
  const auto n_val = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * val_fraction));
  const std::int64_t n_train = n - n_val;
  MLS_CHECK(n_train > block_size + 1 && n_val > block_size + 1, "TextData: the text has ", n,
            " tokens, split into ", n_train, " train and ", n_val, " val tokens; each split needs more than block_size + 1 = ",
            block_size + 1, " tokens (use a longer text or a smaller block size)");
  train_.assign(ids.begin(), ids.begin() + n_train);
  val_.assign(ids.begin() + n_train, ids.end());
}

TextData TextData::from_file(const std::string& path, const Tokenizer& tok, std::int64_t block_size,
                             std::uint64_t seed, double val_fraction) {
  return TextData(read_text_file(path), tok, block_size, seed, val_fraction);
}

/// Batch number `index` of a split: B windows of T + 1 consecutive tokens at uniform random starts
/// s_b in [0, len - T - 1] of `split`, drawn in order b = 0..B-1 with rng.randint(0, len - T):
/// inputs[b, t] = split[s_b + t], targets[b, t] = split[s_b + t + 1], mask all 1 (shapes (B, T)).
/// Hint: the generator is batch_rng(seed_, "text/<name>", index), so batch i never depends on
/// the batches before it, which is what makes seek() exact.
Batch TextData::draw(const std::vector<std::int32_t>& split, const char* name, std::uint64_t index, std::int64_t B,
                     std::int64_t T) const {
  const std::string op = std::string("TextData next_") + name;
  check_batch_dims(op.c_str(), B, T);
  MLS_CHECK(T <= block_size_, op, ": T = ", T, " exceeds the block size ", block_size_);
  // BEGIN SOLUTION
  const auto len = static_cast<std::int64_t>(split.size());
  Rng rng = batch_rng(seed_, std::string("text/") + name, index);
  Batch batch{B, T, std::vector<std::int32_t>(static_cast<std::size_t>(B * T)),
              std::vector<std::int32_t>(static_cast<std::size_t>(B * T)), std::vector<float>(static_cast<std::size_t>(B * T), 1.0f)};
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t s = rng.randint(0, len - T);
    for (std::int64_t t = 0; t < T; ++t) {
      batch.inputs[static_cast<std::size_t>(b * T + t)] = split[static_cast<std::size_t>(s + t)];
      batch.targets[static_cast<std::size_t>(b * T + t)] = split[static_cast<std::size_t>(s + t + 1)];
    }
  }
  return batch;
  // END SOLUTION
}

Batch TextData::next_train(std::int64_t B, std::int64_t T) {
  Batch b = draw(train_, "train", train_batches_, B, T);
  ++train_batches_;
  return b;
}

Batch TextData::next_val(std::int64_t B, std::int64_t T) {
  Batch b = draw(val_, "val", val_batches_, B, T);
  ++val_batches_;
  return b;
}

void TextData::seek(std::uint64_t position) {
  train_batches_ = position_train(position);
  val_batches_ = position_val(position);
}

// ---- generated tasks ---------------------------------------------------------------------------

namespace {
constexpr std::string_view kTaskAlphabet = "+0123456789=";
std::int32_t digit_id(int d) { return 1 + d; }      // '+' is id 0, '0'..'9' are 1..10
constexpr std::int32_t kPlus = 0, kEquals = 11;
std::uint64_t pow10(std::int64_t n) {
  std::uint64_t p = 1;
  for (std::int64_t i = 0; i < n; ++i) p *= 10;
  return p;
}
/// The n decimal digits of x, most significant first.
void push_digits(std::vector<std::int32_t>& out, std::uint64_t x, std::int64_t n) {
  const std::size_t at = out.size();
  out.resize(at + static_cast<std::size_t>(n));
  for (std::int64_t i = n - 1; i >= 0; --i, x /= 10) out[at + static_cast<std::size_t>(i)] = digit_id(static_cast<int>(x % 10));
}
}  // namespace

GeneratedTask::GeneratedTask(std::int64_t n_digits, std::uint64_t seed, const char* stream)
    : n_digits_(n_digits), tok_(train_char_tokenizer(kTaskAlphabet)), seed_(seed), stream_(stream) {}

void GeneratedTask::set_lengths(std::int64_t prompt_len, std::int64_t answer_len) {
  prompt_len_ = prompt_len;
  answer_len_ = answer_len;
}

bool GeneratedTask::is_val(std::uint64_t index) const {
  return stream_hash(stream_ + "/" + std::to_string(index)) % 10 == 0;
}

Problem GeneratedTask::sample(Rng& rng, bool val) const {
  const std::uint64_t space = space_size();
  for (int tries = 0; tries < 100000; ++tries) {
    const auto index = static_cast<std::uint64_t>(rng.randint(0, static_cast<std::int64_t>(space)));
    if (is_val(index) == val) return problem(index);
  }
  fail(name(), " task: no ", val ? "val" : "train", " problem found among ", space, " problems");
}

/// Batch number `index` of a split: B problems sample(rng, val), each one row of shape (T):
/// seq = prompt + answer (L = seq_len() + 1 tokens); for t < L - 1: inputs[b, t] = seq[t],
/// targets[b, t] = seq[t + 1], mask[b, t] = 1 when the target is an answer token
/// (t + 1 >= prompt_len()), else 0; positions t >= L - 1 stay 0 (padding, mask 0).
/// Hint: rng = batch_rng(seed_, stream_ + "/train" or "/val", index).
Batch GeneratedTask::draw(bool val, std::uint64_t index, std::int64_t B, std::int64_t T) const {
  const std::string op = name() + " task next_" + (val ? "val" : "train");
  check_batch_dims(op.c_str(), B, T);
  MLS_CHECK(T >= seq_len(), op, ": T = ", T, " is shorter than a problem: prompt ", prompt_len_, " + answer ",
            answer_len_, " - 1 = ", seq_len(), " tokens");
  // BEGIN SOLUTION
  Rng rng = batch_rng(seed_, stream_ + (val ? "/val" : "/train"), index);
  const auto n = static_cast<std::size_t>(B * T);
  Batch batch{B, T, std::vector<std::int32_t>(n, 0), std::vector<std::int32_t>(n, 0), std::vector<float>(n, 0.0f)};
  for (std::int64_t b = 0; b < B; ++b) {
    Problem p = sample(rng, val);
    std::vector<std::int32_t> seq = p.prompt;
    seq.insert(seq.end(), p.answer.begin(), p.answer.end());
    for (std::int64_t t = 0; t + 1 < static_cast<std::int64_t>(seq.size()); ++t) {
      const auto k = static_cast<std::size_t>(b * T + t);
      batch.inputs[k] = seq[static_cast<std::size_t>(t)];
      batch.targets[k] = seq[static_cast<std::size_t>(t + 1)];
      batch.mask[k] = t + 1 >= prompt_len_ ? 1.0f : 0.0f;
    }
  }
  return batch;
  // END SOLUTION
}

Batch GeneratedTask::next_train(std::int64_t B, std::int64_t T) {
  Batch b = draw(false, train_batches_, B, T);
  ++train_batches_;
  return b;
}

Batch GeneratedTask::next_val(std::int64_t B, std::int64_t T) {
  Batch b = draw(true, val_batches_, B, T);
  ++val_batches_;
  return b;
}

void GeneratedTask::seek(std::uint64_t position) {
  train_batches_ = position_train(position);
  val_batches_ = position_val(position);
}

SortTask::SortTask(std::int64_t n_digits, std::uint64_t seed) : GeneratedTask(n_digits, seed, "task/sort") {
  MLS_CHECK(n_digits >= 2 && n_digits <= 18, "SortTask: n_digits = ", n_digits, ", expected 2..18");
  set_lengths(n_digits + 1, n_digits);
}

std::uint64_t SortTask::space_size() const { return pow10(n_digits_); }

Problem SortTask::problem(std::uint64_t index) const {
  MLS_CHECK(index < space_size(), "sort task: problem ", index, " outside [0, ", space_size(), ")");
  Problem p;
  push_digits(p.prompt, index, n_digits_);
  p.answer = p.prompt;
  std::sort(p.answer.begin(), p.answer.end());
  p.prompt.push_back(kEquals);
  return p;
}

AdditionTask::AdditionTask(std::int64_t n_digits, std::uint64_t seed) : GeneratedTask(n_digits, seed, "task/add") {
  MLS_CHECK(n_digits >= 1 && n_digits <= 9, "AdditionTask: n_digits = ", n_digits, ", expected 1..9");
  set_lengths(2 * n_digits + 2, n_digits + 1);
}

std::uint64_t AdditionTask::space_size() const { return pow10(2 * n_digits_); }

Problem AdditionTask::problem(std::uint64_t index) const {
  MLS_CHECK(index < space_size(), "add task: problem ", index, " outside [0, ", space_size(), ")");
  const std::uint64_t base = pow10(n_digits_);
  const std::uint64_t a = index / base, b = index % base;
  Problem p;
  push_digits(p.prompt, a, n_digits_);
  p.prompt.push_back(kPlus);
  push_digits(p.prompt, b, n_digits_);
  p.prompt.push_back(kEquals);
  push_digits(p.answer, a + b, n_digits_ + 1);
  std::reverse(p.answer.begin(), p.answer.end());
  return p;
}

std::unique_ptr<GeneratedTask> make_task(const std::string& name, std::int64_t n_digits, std::uint64_t seed) {
  if (name == "sort") return std::make_unique<SortTask>(n_digits, seed);
  if (name == "add") return std::make_unique<AdditionTask>(n_digits, seed);
  fail("make_task: unknown task '", name, "', expected 'sort' or 'add'");
}

double exact_match(const GeneratedTask& task, const GreedyFn& generate, std::int64_t n_problems, bool val,
                   std::uint64_t seed) {
  MLS_CHECK(n_problems >= 1, "exact_match: n_problems = ", n_problems, ", expected >= 1");
  MLS_CHECK(static_cast<bool>(generate), "exact_match: no generate function");
  Rng rng(seed, "eval");
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < n_problems; ++i) {
    const Problem p = task.sample(rng, val);
    const std::vector<std::int32_t> out = generate(p.prompt, static_cast<int>(task.answer_len()));
    if (out == p.answer) ++correct;
  }
  return static_cast<double>(correct) / static_cast<double>(n_problems);
}

}  // namespace mls::llm
