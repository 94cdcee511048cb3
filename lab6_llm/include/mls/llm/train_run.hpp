#pragma once
/// Lab 6: a whole training run on one process — what `mls-gpt train` does (the CLI only parses
/// its flags into TrainRunOptions; `--zero` runs are zero.hpp's run_zero). The data (a generated
/// task or a text file with its tokenizer), resuming from a checkpoint or starting from an
/// mls-gpt checkpoint / llm.c model file, the Trainer and its one step (every activation kept,
/// or under a recompute plan), validation, checkpoints, loss.csv / loss.svg, and after training
/// the held-out exact match (a task) or a sample (text). Progress goes to stdout.
#include <cstdint>
#include <string>

#include "mls/llm/config.hpp"
#include "mls/llm/remat.hpp"

namespace mls::llm {

struct TrainRunOptions {
  ModelSpec model{};
  std::string data;              // a UTF-8 text file; empty: the generated task
  std::string task = "sort";     // sort | add (without data)
  std::int64_t digits = 6;       // of the task
  std::string tokenizer = "char";  // char | bpe (text)
  std::int64_t vocab = 512;      // BPE vocabulary size
  std::string out = "gpt-run";   // folder for ckpt.bin, loss.csv, loss.svg
  std::string resume;            // a checkpoint to continue from (bit-identical)
  std::string init_from;         // an mls-gpt checkpoint or llm.c .bin to start from
  std::int64_t steps = 300;
  std::int64_t batch = 0;        // 0: 12 for "small", 32 otherwise
  std::int64_t context = 0;      // 0: the task's sequence length, or the block size
  std::int64_t warmup = -1;      // -1: steps / 20 (at least 1)
  std::int64_t accum = 1;        // micro-batches per step
  double lr = 1e-3, min_lr = -1;  // min_lr -1: lr / 10
  double weight_decay = 0.1, grad_clip = 1.0, beta2 = 0.95;
  std::int64_t eval_every = 50, eval_batches = 4, ckpt_every = 0, sample_tokens = 200;
  std::int64_t stop_after = 0;   // > 0: stop after this many steps (a checkpoint to resume)
  bool autodiff = false;         // lab 2's tape instead of the fused path
  std::string attention = "flash";  // flash | naive: the fused path's attention kernel (not --autodiff's)
  std::uint64_t seed = 0;
  RecomputeKind remat;           // none | sqrt | optimal
  std::string remat_budget;      // activation bytes for optimal, e.g. "4MiB" (default: sqrt's)
};

struct TrainRunResult {
  double final_loss = 0;
  double tokens_per_s = 0;  // mean over the steps after the first
  std::string checkpoint, loss_csv, loss_svg;
  /// An MoE model: moe.csv and moe.svg, the experts' utilisation per step (report.hpp's MoeRow:
  /// the last micro-batch's routing; under --remat as each block's forward recorded it
  /// (MoeRecord), under --autodiff from the fused forward on the step's batch; not kept across --resume).
  std::string moe_csv, moe_svg;
};

/// Runs it. Every bad option is an mls::Error naming it, before any step.
TrainRunResult run_training(TrainRunOptions opts);

/// The lines `mls-gpt info` and `train` print about a config at context T: the shape, the
/// parameter count term by term and the training FLOPs per token.
std::string describe_counts(const GPTConfig& cfg, std::int64_t T);

}  // namespace mls::llm
