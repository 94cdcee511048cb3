#pragma once
/// Lab 6: what a training run reports — the loss curve (CSV and SVG) and the loss of a token
/// stream (eval).
#include <cstdint>
#include <string>
#include <vector>

#include "mls/llm/model.hpp"
#include "mls/llm/moe.hpp"

namespace mls::llm {

struct LossRow {
  std::int64_t step = 0;
  double train_loss = 0;
  double val_loss = -1;  // < 0: not measured at this step
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
};

/// CSV with a header line "step,train_loss,val_loss,lr,grad_norm,tokens_per_s" (val_loss empty
/// where not measured). Written atomically.
void write_loss_csv(const std::string& path, const std::vector<LossRow>& rows);
/// Reads what write_loss_csv wrote (an mls::Error names the file and line on bad input).
std::vector<LossRow> read_loss_csv(const std::string& path);
/// The curve as an SVG line plot: train loss (a line), val loss (dots) against the step, with
/// axes, ticks and a legend. Written atomically. `title` goes above the plot.
std::string loss_svg(const std::vector<LossRow>& rows, const std::string& title);
void write_loss_svg(const std::string& path, const std::vector<LossRow>& rows,
                    const std::string& title);

/// One training step's expert utilisation (an MoE model; moe.hpp's moe_stats of the step's last
/// micro-batch, summed over the MoE blocks).
struct MoeRow {
  std::int64_t step = 0;
  std::vector<std::int64_t> tokens;  // (E) expert rows kept, summed over the MoE blocks
  std::int64_t choices = 0;          // N · K · (MoE blocks)
  std::int64_t dropped = 0;          // choices dropped by capacity
  double balance_loss = 0;           // summed over the MoE blocks (coefficient applied)
  double dropped_fraction() const { return choices > 0 ? static_cast<double>(dropped) / static_cast<double>(choices) : 0.0; }
};
/// The row of step `step` from the MoE blocks' routing (moe_stats, or EpDispatch::stats under
/// expert parallelism): their counts, choices, drops and balancing losses summed.
MoeRow moe_row(std::int64_t step, const std::vector<MoeBlockStats>& blocks);
/// CSV "step,dropped_fraction,balance_loss,tokens_e0,...,tokens_e{E-1}". Written atomically.
void write_moe_csv(const std::string& path, const std::vector<MoeRow>& rows);
/// Utilisation over training as an SVG: each expert's share of the kept rows (one line per expert),
/// the ideal share 1/E (dashed) and the dropped fraction (black, dashed) against the step.
std::string moe_svg(const std::vector<MoeRow>& rows, const std::string& title);
void write_moe_svg(const std::string& path, const std::vector<MoeRow>& rows, const std::string& title);

/// Mean next-token loss over a token stream, in non-overlapping windows of T + 1 tokens
/// (T = block_size, or shorter for the last window), B windows per forward pass.
/// The stream needs at least 2 tokens (an mls::Error otherwise).
double eval_stream_loss(const GPTParams& params, const std::vector<std::int32_t>& tokens,
                        std::int64_t B);

}  // namespace mls::llm
