#pragma once
/// Lab 5: data parallelism. Every rank holds the whole model and a shard of the batch (B/N rows);
/// after backward the gradients are averaged over the ranks with allreduce, so every rank takes
/// the same optimizer step as one rank on the whole batch would (for a loss that is a mean over
/// the batch).
///
/// Bucketing: one allreduce per parameter costs N_params * alpha in latency; packing the gradients
/// into buckets of about `bucket_bytes` (in backward order: the last layer's gradients are ready
/// first) pays alpha once per bucket. Overlap: with `overlap`, a bucket's allreduce is started
/// (asynchronously: Communicator::iallreduce) from inside backward as soon as its last gradient
/// was produced (through a hook on the tape), and runs on the communication thread while
/// backward computes the earlier layers' gradients; allreduce_gradients() waits for every bucket
/// before the optimizer step. Buckets go in reverse layer order because backward produces the
/// last layer's gradients first: the first bucket is ready earliest and has the most backward
/// left to hide behind. Parameters after any number of steps are bit-identical with and without
/// overlap (the same allreduces of the same buffers, only started earlier).
///
/// Re-prioritised buckets (P3, ByteScheduler) and waits in the next forward: DDP's overlap hides
/// communication under backward only, so at t_comm = t_compute it can hide at most backward's share
/// of the step (handout lab 5, "Its ceiling"). The last buckets hold the first layers, which the
/// next forward needs first. With `defer_buckets` K, the last K buckets are not launched from their
/// hooks: when all K are ready (at the end of backward) they are launched together in forward order
/// (the first layer's bucket first) — the issue order bucket_issue_order(n, K) is a fixed function
/// of the buckets, the same on every rank, so the communicator's in-order rule holds with no
/// negotiation. With `wait_in_forward` too, allreduce_gradients() waits only for the other buckets;
/// the K deferred ones stay in flight, and hook(i) in the NEXT forward waits for parameter i's
/// bucket and runs its optimizer step (the on_bucket callback) before the parameter is used, so
/// their allreduces hide under the next forward. flush() completes them (before evaluation,
/// checkpointing, comparisons). Parameters after N steps + flush() are bit-identical to the blocking
/// run (each parameter updated once per step from its own averaged gradient, before it is used).
#include <cstdint>
#include <functional>
#include <vector>

#include "mls/autodiff/nn.hpp"
#include "mls/parallel/comm.hpp"

namespace mls::parallel {

struct DataParallelOptions {
  /// Target size of a gradient bucket (a parameter larger than this gets a bucket of its own).
  std::int64_t bucket_bytes = 1 << 20;
  /// Start each bucket's allreduce from inside backward (see DataParallel::hook).
  bool overlap = false;
  /// Target size of the first bucket (the last layers' gradients), 0: bucket_bytes. PyTorch DDP
  /// makes it small (1 MiB against 25 MiB): the first allreduce starts after the last layer's
  /// backward instead of after a whole bucket's worth of layers, so the communication starts
  /// early — what matters most when the link is the bottleneck.
  std::int64_t first_bucket_bytes = 0;
  /// Re-prioritised buckets: the last `defer_buckets` buckets (0..number of buckets; they hold the
  /// first layers) are launched together, in forward order, once all of them are ready, instead of
  /// from their hooks in backward order (bucket_issue_order). 0: backward order throughout.
  int defer_buckets = 0;
  /// Needs overlap and defer_buckets >= 1: the deferred buckets are waited (and their on_bucket
  /// run) by the next forward's hook(i), not before the optimizer step; flush() completes them.
  bool wait_in_forward = false;
};

/// Groups parameters of sizes `bytes` (in forward order) into buckets in backward order: walking
/// from the last parameter to the first, a bucket is closed when adding the next parameter would
/// make it exceed its cap — `first_bucket_bytes` for the first bucket when > 0, `bucket_bytes`
/// for the others (a bucket always holds at least one parameter). Returns the parameter indices
/// of each bucket, in the order their allreduces are issued.
/// Examples: bytes {4, 4, 4, 4}, bucket 8 -> {{3, 2}, {1, 0}};
///           bytes {4, 4, 4, 4}, bucket 8, first 4 -> {{3}, {2, 1}, {0}}.
std::vector<std::vector<std::size_t>> make_buckets(const std::vector<std::int64_t>& bytes,
                                                   std::int64_t bucket_bytes, std::int64_t first_bucket_bytes = 0);

/// The order in which DataParallel issues the allreduces of `n_buckets` buckets when the last
/// `defer` of them are deferred: buckets 0 .. n−defer−1 first (backward order: the last layers'
/// gradients, ready first), then the deferred ones in forward order, n−1 down to n−defer (bucket
/// n−1 holds the first layer, which the next forward needs first). 0 <= defer <= n_buckets.
/// Examples: (4, 0) -> {0, 1, 2, 3};  (4, 2) -> {0, 1, 3, 2};  (4, 4) -> {3, 2, 1, 0}.
std::vector<std::size_t> bucket_issue_order(std::size_t n_buckets, std::size_t defer);

/// Rows rank*B/N .. (rank+1)*B/N of `batch` (B must divide by `ranks`).
Tensor shard_batch(const Tensor& batch, int rank, int ranks);

/// Gradient averaging over the ranks of `comm` for a list of parameters.
class DataParallel {
 public:
  DataParallel(Communicator& comm, std::vector<autodiff::nn::Parameter> params, DataParallelOptions opts = {});
  /// With buckets still in flight (wait_in_forward, no flush()): waits for them (no error thrown),
  /// says on stderr that their optimizer steps never ran; call flush() before.
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;
  /// Copies root's parameter values to every rank (so every replica starts equal).
  void broadcast_parameters(int root = 0);
  /// Averages every parameter's gradient over the ranks, one allreduce per bucket: launches the
  /// buckets no hook launched during backward, then waits for every bucket in order and writes
  /// the averages as the gradients (without overlap: each bucket launched and waited in turn).
  /// A parameter without a gradient contributes zeros and gets the average. Call after
  /// backward, before the optimizer step.
  /// `on_bucket(b)`, when given, is called as soon as bucket b's averages are written (bucket
  /// order; without overlap after each bucket's allreduce, with overlap after each wait): an
  /// optimizer step of bucket_parameters(b) there runs while the later buckets' allreduces are
  /// still in flight, so the step's optimizer hides behind its communication instead of
  /// following it. Each parameter is updated from its own averaged gradient either way, so an
  /// elementwise optimizer (SGD, Adam: one per bucket) gives bit-identical parameters.
  /// Buckets are launched and waited in bucket_issue_order. With wait_in_forward, the deferred
  /// buckets are left in flight: `on_bucket` is required, kept, and called for them later (by the
  /// next forward's hook or flush()), so it must stay valid until then (capture by value or
  /// long-lived objects, not the step's locals). A step whose previous deferred buckets were never
  /// waited (a forward that did not hook their parameters) is an mls::Error.
  void allreduce_gradients(const std::function<void(std::size_t)>& on_bucket = {});
  /// wait_in_forward: waits for every bucket still in flight and runs its on_bucket (issue order);
  /// afterwards the parameters and gradients are those of the blocking run. No-op when none is.
  void flush();
  /// Buckets whose allreduce is still in flight after allreduce_gradients (wait_in_forward).
  std::size_t unflushed() const;
  /// The order the buckets' allreduces are issued in (bucket_issue_order(buckets, defer_buckets)).
  const std::vector<std::size_t>& issue_order() const { return order_; }
  /// The parameters of bucket b (in the bucket's order).
  std::vector<autodiff::nn::Parameter> bucket_parameters(std::size_t b) const;
  /// With overlap: wraps parameter i for use in forward (identity; on the tape, its backward
  /// records that the gradient of i is complete and, when its bucket is complete, launches the
  /// bucket's allreduce at once — a deferred bucket waits for the other deferred ones). Use the
  /// returned Var instead of the parameter, once per forward. With wait_in_forward, when i's
  /// bucket is still in flight from the last step, it first waits for it and runs its on_bucket
  /// (the parameter's optimizer step), so forward reads the updated value.
  autodiff::Var hook(std::size_t i);
  const std::vector<std::vector<std::size_t>>& buckets() const { return buckets_; }
  /// Allreduces issued so far (one per bucket per step).
  std::int64_t allreduce_calls() const { return calls_; }
  /// Buckets launched from inside backward so far.
  std::int64_t overlapped_buckets() const { return overlapped_; }
  /// Communicator::wall_now() when each bucket's allreduce was launched in the last
  /// allreduce_gradients() (by a hook, or by allreduce_gradients itself), in bucket order.
  const std::vector<double>& launch_times() const { return last_launch_times_; }
  std::vector<autodiff::nn::Parameter>& parameters() { return params_; }

 private:
  /// Packs bucket b's gradients into one flat buffer and starts its averaging allreduce
  /// asynchronously (student code). grads[k] is the gradient of parameter buckets_[b][k]
  /// (undefined: zeros).
  void launch_bucket(std::size_t b, const std::vector<Tensor>& grads);
  /// Waits for bucket b's allreduce and writes the averaged slices back as the parameters'
  /// gradients (student code).
  void finish_bucket(std::size_t b);
  /// wait_in_forward: completes deferred bucket b left in flight by the last step — waits for it
  /// and writes its averaged gradients (finish_bucket), marks it waited (unwaited_[b] = false),
  /// runs its optimizer step (deferred_on_bucket_(b)); with `restore_grads` (the forward's wait)
  /// it then gives the bucket's parameters back the gradients they had before (the step's
  /// zero_grad already ran: the averages must not add to this step's gradients) (student code).
  void complete_deferred(std::size_t b, bool restore_grads);
  /// Gathers bucket b's gradients (the hooked ones plus any accumulated outside the hooks, or the
  /// parameters' own) and launches it.
  void launch(std::size_t b, bool from_hooks);
  /// The parameter list and, for buckets in flight, each parameter are what they were at launch.
  void check_unchanged(const char* where) const;
  bool deferred(std::size_t b) const { return b + static_cast<std::size_t>(opts_.defer_buckets) >= buckets_.size(); }
  Communicator* comm_;
  std::vector<autodiff::nn::Parameter> params_;
  DataParallelOptions opts_;
  std::vector<std::vector<std::size_t>> buckets_;
  std::vector<std::size_t> bucket_of_;
  std::vector<Tensor> pending_;          // hooked gradients waiting for their bucket
  std::vector<int> ready_in_bucket_;
  std::vector<bool> launched_;           // bucket's allreduce started this step
  std::vector<std::size_t> order_;       // issue order (bucket_issue_order)
  std::size_t deferred_ready_ = 0;       // deferred buckets complete (hooks) this step, not launched
  std::vector<bool> unwaited_;           // deferred bucket still in flight after the step (wait_in_forward)
  std::vector<const void*> launched_node_;   // per parameter: its node when its bucket was launched
  std::vector<Shape> launched_shape_;        // ... and its shape
  std::function<void(std::size_t)> deferred_on_bucket_;  // the on_bucket of the unwaited buckets
  std::vector<Tensor> flat_;             // bucket's flat buffer [numel of its parameters]
  std::vector<Request> requests_;        // bucket's allreduce in flight
  std::vector<double> launch_times_;     // wall_now() at each bucket's launch, this step
  std::vector<double> last_launch_times_;  // ... of the last completed step (launch_times())
  std::int64_t calls_ = 0, overlapped_ = 0;
};

}  // namespace mls::parallel
