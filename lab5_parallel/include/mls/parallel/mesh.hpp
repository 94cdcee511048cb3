#pragma once
/// Lab 5: 3-D parallelism — data x tensor x pipeline parallel on one world of dp * tp * pp ranks.
///
/// Rank layout (tensor parallel innermost, as its allreduces are the most frequent and would sit
/// on the fastest links): world rank = (d * pp + s) * tp + t for data-parallel replica d, pipeline
/// stage s and tensor-parallel rank t. Three sub-communicators come from Communicator::split:
///   tp: the ranks of one (d, s), ordered by t   — allreduces inside each block (f and g);
///   pp: the ranks of one (d, t), ordered by s   — activations and gradients between stages;
///   dp: the ranks of one (s, t), ordered by d   — gradient averaging of identical shards.
///
/// The model trained here is a stack of pp residual MLP blocks, x <- x + mlp(x), one per stage,
/// each split over tp ranks (ParallelMLP); each data-parallel replica takes B/dp rows, split
/// into micro-batches by the pipeline. After `steps` SGD steps every rank's shards equal the
/// matching shards of a single-rank run on the whole batch.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mls/parallel/comm.hpp"
#include "mls/parallel/pipeline.hpp"

namespace mls::parallel {

/// Where a rank sits in the mesh.
struct MeshCoord {
  int d = 0, s = 0, t = 0;
};

class Mesh3D {
 public:
  /// Splits `world` (of size dp * tp * pp) into the three sub-communicators. Collective: every
  /// rank of `world` calls it with the same sizes.
  Mesh3D(Communicator& world, int dp, int tp, int pp);
  int dp_size() const { return dp_; }
  int tp_size() const { return tp_; }
  int pp_size() const { return pp_; }
  MeshCoord coord() const { return coord_; }
  Communicator& dp() { return dp_comm_; }
  Communicator& tp() { return tp_comm_; }
  Communicator& pp() { return pp_comm_; }
  /// The world rank of (d, s, t) in a mesh of these sizes.
  static int rank_of(MeshCoord c, int tp, int pp) { return (c.d * pp + c.s) * tp + c.t; }
  /// The coordinates of world rank r.
  static MeshCoord coord_of(int r, int tp, int pp) { return {r / (tp * pp), (r / tp) % pp, r % tp}; }

 private:
  int dp_, tp_, pp_;
  MeshCoord coord_;
  Communicator dp_comm_, tp_comm_, pp_comm_;
};

/// The toy problem of the 3-D runs (and of mls-parallel).
struct StackConfig {
  std::int64_t d_model = 8, d_hidden = 16, batch = 16;
  int blocks = 2;         // pipeline depth of the model (= pp in 3-D)
  int micro_batches = 2;  // per data-parallel replica
  int steps = 5;
  double lr = 0.05;
  std::int64_t bucket_bytes = 1 << 20;  // data-parallel gradient buckets
  /// Data-parallel overlap: each bucket's allreduce starts (asynchronously) inside the backward of
  /// the step's last micro-batch, from DataParallel::hook'ed parameters (PipelineOptions::
  /// last_forward), and is waited before the SGD step. Bit-identical parameters with or without.
  bool overlap = false;
  std::uint64_t seed = 1;
  DType dtype = DType::Float64;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
};

/// The full weights of block b {W1 [D, H], b1 [H], W2 [H, D], b2 [D]} (identical on every rank).
std::array<Tensor, 4> stack_block_weights(const StackConfig& c, int b);
/// The batch of `step`: x [batch, D], y [batch, D] (a fixed random linear map of x plus a tanh).
std::array<Tensor, 2> stack_batch(const StackConfig& c, int step);

struct StackResult {
  std::vector<double> losses;                 // per step (full-batch mean loss)
  std::vector<std::array<Tensor, 4>> params;  // this rank's parameters per local block (shards in 3-D)
  Traffic traffic;                            // 3-D: this rank's traffic on the dp, tp and pp communicators
  double modelled_seconds = 0.0;              // 3-D: this rank's modelled clock at the end (sim), else 0
  std::int64_t overlapped_buckets = 0;        // 3-D: buckets launched from inside backward (overlap)
};

/// Adds every count of `from` into `into` (totals and per collective).
void add_traffic(Traffic& into, const Traffic& from);

/// The reference: the whole stack on one rank, the whole batch, `steps` SGD steps.
StackResult train_stack_single(const StackConfig& c);

/// What validate_stack_3d's messages call each knob: the StackConfig fields and mesh sizes by
/// default; a tool passes its flags (mls-parallel: "--ranks", "--d-hidden", "--batch", ...).
struct StackNames {
  std::string op = "train_stack_3d";
  std::string dp = "dp", tp = "tp", pp = "pp";
  std::string d_model = "d_model", d_hidden = "d_hidden", batch = "batch", micro = "micro_batches";
  std::string steps = "steps", bucket_bytes = "bucket_bytes", lr = "lr";
};

/// Checks, before any rank starts, that `c` can train on a dp x tp x pp mesh: dp, tp, pp,
/// d_model, d_hidden, batch, micro_batches and bucket_bytes >= 1, steps >= 0, lr finite; tp
/// divides d_hidden (each tensor-parallel rank holds d_hidden / tp hidden units); dp divides batch
/// (each replica takes batch / dp rows); micro_batches divides batch / dp (equal micro-batches);
/// c.blocks == pp (one block per stage). Throws mls::Error "<op>: <name> <value> must ..." naming
/// the knob, its value and what is expected (with values that would work).
void validate_stack_3d(const StackConfig& c, int dp, int tp, int pp, const StackNames& names = {});

/// The same training on a 3-D mesh: this rank's stage block (shards of tp), its data shard, pipeline
/// micro-batches over pp, gradients averaged over dp. Checks `c` first (validate_stack_3d).
/// `stats` (if given) receives the pipeline statistics of the last step.
StackResult train_stack_3d(Communicator& world, const StackConfig& c, int dp, int tp, int pp,
                           PipelineStats* stats = nullptr);

}  // namespace mls::parallel
