#pragma once
/// Lab 5: pipeline parallelism — a model split into stages over ranks, micro-batches scheduled
/// GPipe-style (all forwards, then all backwards) or 1F1B (one forward, one backward).
///
/// Three layers, from pure to distributed:
///   1. make_schedule(p, m, kind): a pure function giving each stage its ordered list of
///      (F|B, micro-batch) steps. Student code.
///   2. simulate_schedule(schedule): the timeline those lists produce when every step takes a unit
///      of time and a step waits for the step it depends on (F on the previous stage's F of the
///      same micro-batch, B on the next stage's B). Pure; gives the bubble and the peak number of
///      micro-batches whose activations a stage keeps alive. schedule_text / schedule_svg draw it.
///   3. pipeline_step(comm, stage, ...): runs the schedule for real on the ranks of `comm`, one
///      stage per rank, sending activations forward and gradients backward (send/recv), with a
///      logical clock carried alongside the messages, and measures the same bubble and the live
///      activation bytes.
///
/// Bubble (unit forward and backward, p stages, m micro-batches): each stage is busy 2m units
/// of a step that lasts 2(m + p - 1) units, so the idle fraction is (p - 1) / (m + p - 1).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mls/autodiff/nn.hpp"
#include "mls/parallel/comm.hpp"

namespace mls::parallel {

enum class ScheduleKind { GPipe, OneFOneB };
/// "gpipe" or "1f1b".
const char* to_string(ScheduleKind k);
/// Parses "gpipe" or "1f1b" (mls::Error otherwise).
ScheduleKind schedule_kind_from_string(const std::string& s);

/// One step of a stage: the forward or the backward of micro-batch `micro`.
struct PipeStep {
  enum Kind : std::uint8_t { Forward, Backward } kind;
  int micro;
  friend bool operator==(const PipeStep&, const PipeStep&) = default;
};
/// The steps of every stage, in the order each stage runs them: schedule[s] is stage s's list.
using PipelineSchedule = std::vector<std::vector<PipeStep>>;

/// The schedule of `p` stages and `m` micro-batches.
/// GPipe: every stage runs F0..F(m-1), then B(m-1)..B0 (backwards in reverse order, as the
///   last stage finishes them).
/// 1F1B (PipeDream-flush): stage s runs w = min(p - 1 - s, m) warm-up forwards, then alternates
///   one forward and one backward (F(w), B0, F(w+1), B1, ...) until the forwards run out, then
///   runs the remaining backwards (cool-down). A stage thus holds at most p - s micro-batches.
/// Every stage gets each F(i) and B(i) exactly once, F(i) before B(i).
/// Hint: write the 1F1B list as three loops (warm-up, steady state, cool-down).
/// Errors: p < 1 or m < 1.
PipelineSchedule make_schedule(int p, int m, ScheduleKind kind);

/// The closed form of the bubble fraction: (p - 1) / (m + p - 1).
double bubble_fraction(int p, int m);

/// Checks that `s` is a valid schedule of its size: every stage runs F(i) and B(i) once for
/// i < m, F(i) before B(i). Throws mls::Error naming the stage and the step otherwise.
void validate_schedule(const PipelineSchedule& s, int m);

/// One executed step on the timeline.
struct TimelineSlot {
  int stage;
  PipeStep step;
  double start, end;
};
/// The timeline of a schedule: every slot, the total time, and per stage the busy time, the
/// bubble (idle / total) and the peak number of micro-batches whose activations are alive
/// (forward done, backward not yet).
struct Timeline {
  int stages = 0, micro = 0;
  std::vector<TimelineSlot> slots;
  double total = 0.0;
  std::vector<double> busy, bubble;
  std::vector<int> peak_live;
  /// Mean of the per-stage bubbles.
  double bubble_fraction() const;
};

/// Runs `s` on an ideal machine: a forward takes `t_fwd`, a backward `t_bwd`, messages are free;
/// a step starts when its stage is free and its dependency is done. Throws mls::Error when the
/// schedule deadlocks (a stage waits for a step that waits for it).
Timeline simulate_schedule(const PipelineSchedule& s, double t_fwd = 1.0, double t_bwd = 1.0);

/// A text timeline: one line per stage, one character per time unit ("F3", "B3" cells of width
/// 2 per unit for unit steps), '.' for idle, a legend with the bubble, and each stage's peak
/// number of live micro-batches.
std::string schedule_text(const Timeline& t);
/// An SVG timeline: one lane per stage, forward boxes blue, backward boxes green, micro-batch
/// number in each box, a time axis, the bubble in the title, and at the right of each lane the
/// stage's peak number of live micro-batches (its activation memory).
std::string schedule_svg(const Timeline& t, const std::string& title = "");
/// Several timelines in one SVG, one panel each (drawn as schedule_svg) stacked top to bottom on
/// one time scale, so that schedules compare at a glance: `mls-parallel --mode schedule` draws
/// GPipe above 1F1B for the same p and m (the same bubble; the peak live micro-batches differ).
/// Throws mls::Error unless there is one title per timeline and at least one timeline.
std::string schedule_comparison_svg(const std::vector<Timeline>& ts, const std::vector<std::string>& titles);

// ---- the distributed executor ---------------------------------------------------------------------
/// The loss of the last stage on one micro-batch: output and target -> scalar (a mean).
using PipeLossFn = std::function<autodiff::Var(const autodiff::Var& out, const autodiff::Var& target)>;

struct PipelineOptions {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int micro_batches = 4;
  /// Simulated time of one forward / backward of a micro-batch on a stage.
  double t_fwd = 1.0, t_bwd = 1.0;
  DType dtype = DType::Float32;
  /// Default: mse_loss.
  PipeLossFn loss;
  /// Data-parallel overlap: where set, the forward of the micro-batch whose backward this stage
  /// runs last is `last_forward(in)` instead of stage.forward(in): the stage's forward through
  /// DataParallel::hook'ed parameters, so that the buckets' allreduces start inside the step's
  /// last backward (the earlier micro-batches' gradients are complete by then).
  std::function<autodiff::Var(const autodiff::Var& in)> last_forward;
};

/// What pipeline_step measured on this rank (this stage).
struct PipelineStats {
  double loss = 0.0;                // mean over micro-batches (last stage; broadcast to every stage)
  double total_time = 0.0;          // simulated makespan of the step (the same on every stage)
  double busy_time = 0.0;           // this stage's compute time
  double bubble = 0.0;              // (total - busy) / total on this stage
  std::int64_t peak_live_bytes = 0; // peak bytes of activations stashed for a pending backward
  std::int64_t micro_bytes = 0;     // stashed bytes of one micro-batch (input + output)
  int peak_live_micro = 0;          // peak number of micro-batches alive
  std::vector<TimelineSlot> slots;  // this stage's executed steps with simulated times
};

/// One training step (forward and backward, no optimizer step) of a pipeline over the ranks of
/// `comm`: rank s holds stage s (`stage`), applied to micro-batches of `x` (rank 0 only; [B, ...])
/// with targets `y` (last rank only; [B, ...]); B must divide into micro_batches equal parts.
/// The loss of each micro-batch is divided by m, so the stages' parameter gradients equal those of
/// the unsplit model on the whole batch. Activations go forward and gradients backward with
/// send/recv, each preceded by a header (the sender's clock and the tensor's shape); on receipt a
/// stage's clock advances to the sender's. Every rank runs make_schedule(size, m, kind)[rank].
PipelineStats pipeline_step(Communicator& comm, autodiff::nn::Module& stage, const Tensor& x, const Tensor& y,
                            const PipelineOptions& opts);

/// Splits `n` layers into `p` contiguous stages as evenly as possible (earlier stages get the
/// extra layers): the first layer index of each stage, then n.
std::vector<int> partition_layers(int n, int p);

}  // namespace mls::parallel
