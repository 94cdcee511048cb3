#pragma once
/// Lab 6: what a training run reports — the loss curve (CSV and SVG) and the loss of a token
/// stream (eval).
#include <cstdint>
#include <string>
#include <vector>

#include "mls/llm/model.hpp"

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

/// Mean next-token loss over a token stream, in non-overlapping windows of T + 1 tokens
/// (T = block_size, or shorter for the last window), B windows per forward pass.
/// The stream needs at least 2 tokens (an mls::Error otherwise).
double eval_stream_loss(const GPTParams& params, const std::vector<std::int32_t>& tokens,
                        std::int64_t B);

}  // namespace mls::llm
