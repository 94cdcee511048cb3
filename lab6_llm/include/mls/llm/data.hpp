#pragma once
/// Lab 6: training data. Text files split into train/val token streams with seeded random
/// windows, and generated tasks (sorting digits, multi-digit addition) whose loss is masked to
/// the answer.
#include <cstdint>
#include <string>
#include <vector>

#include "mls/common/rng.hpp"

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

}  // namespace mls::llm
