#pragma once
/// Lab 5: the Communicator — point-to-point messages and the collectives built from them.
///
/// Data flow:
///   Transport (backend plumbing, not student code): moves raw bytes between ranks.
///     - SimTransport: N ranks as threads of one process, in-memory channels, a simulated
///       α-β-γ clock per rank, a timeout that turns a missing message into mls::Error.
///     - MpiTransport: one rank per OpenMPI process (MPI_Isend/MPI_Irecv underneath), mpi.hpp.
///     - NcclTransport: one rank per GPU (ncclSend/ncclRecv), where CUDA + NCCL are found, nccl.hpp.
///   Communicator (this header): rank(), size(), send/recv on lab 1 tensors, and every
///     collective, each implemented by the student over send/recv only (ring, tree,
///     recursive doubling, ...), with per-rank traffic counted by collective.
///   Training wrappers (data.hpp, tensor_parallel.hpp, pipeline.hpp) use only Communicator.
///
/// Every collective is called by every rank of the communicator with matching arguments;
/// a mismatch (sizes, dtypes, roots, ops, a different collective) is an mls::Error on every
/// rank, never a hang: each message carries a small Header that the receiver checks.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mls/common/rng.hpp"
#include "mls/parallel/cost.hpp"
#include "mls/tensor/tensor.hpp"

namespace mls::parallel {

/// Reduction operators of reduce / allreduce / reduce_scatter. Avg = Sum then divide by size()
/// (integer dtypes: truncating division).
enum class ReduceOp { Sum, Avg, Max, Min, Prod };
/// "sum", "avg", "max", "min", "prod".
const char* to_string(ReduceOp op);
/// Parses "sum", "avg", ...; throws mls::Error on an unknown name.
ReduceOp parse_reduce_op(const std::string& name);

/// Algorithms a collective may use. Auto lets the cost model pick (see cost.hpp); Native asks
/// the backend's own collective (MPI_Allreduce, ncclAllReduce): the peer our algorithms race.
enum class Algo { Auto, Ring, Tree, RecursiveDoubling, Rabenseifner, Pairwise, Linear, Native };
/// "auto", "ring", "tree", "recursive_doubling", "rabenseifner", "pairwise", "linear", "native".
const char* to_string(Algo a);
Algo parse_algo(const std::string& name);

/// Traffic of one rank: what it sent and received, in total and per collective name
/// ("allreduce", "broadcast", "send", ...). Counted by the Communicator, identical on every backend.
struct Traffic {
  struct Counts {
    std::int64_t messages_sent = 0, bytes_sent = 0, messages_recv = 0, bytes_recv = 0;
    std::int64_t steps = 0;  // communication rounds this rank took part in (send, recv or sendrecv)
    std::int64_t calls = 0;  // collective calls (by_op only; total counts every call)
  };
  Counts total;
  std::map<std::string, Counts> by_op;
  void reset() { *this = Traffic{}; }
};

/// What travels with every message, checked by the receiver against what it expects. A field
/// set to its "unset" value (-1) in the expectation is not checked.
struct Header {
  std::int64_t bytes = 0;     // payload bytes
  std::int32_t dtype = -1;    // mls::DType of the payload
  std::int32_t op = -1;       // collective id (internal), -1 for user send/recv
  std::int64_t seq = -1;      // collective sequence number on this communicator
  std::int64_t numel = -1;    // elements of the whole collective's tensor on the sender
  std::int32_t root = -1;     // root of a rooted collective
  std::int32_t reduce = -1;   // ReduceOp of a reducing collective
  std::int32_t step = 0;      // the sender's step within the collective (1-based; for the trace)
  std::int32_t reserved = 0;
  double t_depart = 0.0;      // sender's simulated clock when the message left (sim; filled by the transport)
};

/// A handle on a non-blocking operation: a send or receive (isend/irecv) or an asynchronous
/// collective (iallreduce, ireduce_scatter, iallgather, ibroadcast).
///   wait()  blocks until it completed; rethrows the operation's mls::Error (timeout, a peer's
///           failure, mismatched collectives). Waiting twice is an mls::Error.
///   test()  true once it completed (wait() then returns at once); never blocks.
/// A collective's request dropped without wait() is waited for by its destructor (which logs
/// that, once per process, and never throws): no communication outlives its request unseen.
class Request {
 public:
  Request() = default;
  /// A point-to-point request: `wait_fn` completes it; test() is true only after wait().
  explicit Request(std::function<void()> wait_fn) : wait_(std::move(wait_fn)) {}
  /// An asynchronous collective's request (`what` names it in messages).
  Request(std::function<void()> wait_fn, std::function<bool()> test_fn, std::string what);
  Request(Request&& o) noexcept;
  Request& operator=(Request&& o) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();
  void wait();
  bool test();
  /// True until waited on (a default-constructed request is not valid).
  bool valid() const { return static_cast<bool>(wait_); }

 private:
  void drop() noexcept;
  std::function<void()> wait_;
  std::function<bool()> test_;
  std::string what_;
  bool waited_ = false, wait_on_drop_ = false;
};

/// One message as the trace sees it (mls-collectives trace): times are modelled seconds.
struct TraceEvent {
  std::string op;   // collective name
  int step = 0;     // the sender's step number within the collective (1-based): the round
  int src = 0, dst = 0;
  std::int64_t bytes = 0;
  double t_send = 0, t_recv = 0;
};

/// Raw byte transport between ranks: the backend. Not student code.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "sim", "mpi" or "nccl".
  virtual std::string backend() const = 0;
  /// Sends `h.bytes` bytes from `data` with header `h` (h.bytes is the payload size).
  virtual void send(const void* data, const Header& h, int dst, int tag) = 0;
  /// Receives into `data` (room for `expect.bytes` bytes) the next message from (src, tag);
  /// throws mls::Error (naming `what`) when its header disagrees with `expect`, on timeout or
  /// when the world was aborted. Returns the received header.
  virtual Header recv(void* data, const Header& expect, int src, int tag, const char* what) = 0;
  virtual Request isend(const void* data, const Header& h, int dst, int tag) = 0;
  virtual Request irecv(void* data, const Header& expect, int src, int tag, const char* what) = 0;
  /// A sub-transport of the ranks with the same color, ordered by (key, rank). `colors` and
  /// `keys` hold every rank's arguments (already exchanged and checked by Communicator::split).
  virtual std::unique_ptr<Transport> split(int color, int key, const std::vector<int>& colors,
                                           const std::vector<int>& keys) = 0;
  /// Charges `elements` reduced elements to this rank's simulated clock (sim only; else no-op):
  /// inside a collective to its communication lane, else to the compute lane.
  virtual void charge_compute(std::int64_t elements) { (void)elements; }
  /// Charges `seconds` of compute to this rank's compute lane (sim only; else no-op).
  virtual void charge_seconds(double seconds) { (void)seconds; }
  /// The two lanes of the simulated clock (sim only; no-ops elsewhere). A collective runs on the
  /// communication lane: lane_begin(issued) starts it at max(lane, issued) (issued < 0: the
  /// compute lane's time now); lane_end() returns the time it finished; lane_join(t) makes the
  /// compute lane wait for it (max). A blocking collective joins at once; an asynchronous one
  /// when its request is waited on, so compute issued in between overlaps it.
  virtual void lane_begin(double issued) { (void)issued; }
  virtual double lane_end() { return 0.0; }
  virtual void lane_join(double t) { (void)t; }
  /// Stream ordering of asynchronous collectives (NCCL; no-ops elsewhere). async_issued(index)
  /// runs on the issuing thread when asynchronous collective number `index` of this communicator
  /// is queued; order_after_compute(index) on the thread that runs a collective, before its first
  /// message (index < 0: a blocking collective). NCCL records an event on the compute stream at
  /// issue (blocking: now) and makes its communication stream wait for it: the collective runs
  /// after the compute issued before it, and next to the compute issued after it.
  virtual void async_issued(std::int64_t index) { (void)index; }
  virtual void order_after_compute(std::int64_t index) { (void)index; }
  /// True when a communication thread may call this transport while the caller's thread calls
  /// another communicator's (MPI: MPI_THREAD_MULTIPLE was provided). Where false, asynchronous
  /// collectives run to completion when issued (no overlap, same results).
  virtual bool thread_safe() const { return true; }
  /// Simulated seconds on this rank's clock (sim), or 0 where there is no model.
  virtual double modelled_seconds() const { return 0.0; }
  /// The backend's own allreduce / broadcast (Algo::Native); false where there is none.
  virtual bool native_allreduce(void* data, std::int64_t count, DType dtype, ReduceOp op) {
    (void)data, (void)count, (void)dtype, (void)op;
    return false;
  }
  virtual bool native_broadcast(void* data, std::int64_t bytes, int root) {
    (void)data, (void)bytes, (void)root;
    return false;
  }
  /// The backend's own variable all-to-all (MPI_Alltoallv) on bytes: send_bytes / recv_bytes
  /// per rank, consecutive in `send` / `recv`. False where there is none.
  virtual bool native_all_to_allv(const void* send, const std::vector<std::int64_t>& send_bytes, void* recv,
                                  const std::vector<std::int64_t>& recv_bytes) {
    (void)send, (void)send_bytes, (void)recv, (void)recv_bytes;
    return false;
  }
  /// Marks the world as failed (sim: wakes every blocked rank with `why`); no-op elsewhere.
  virtual void abort(const std::string& why) { (void)why; }
};

/// The student-facing communicator on lab 1 tensors.
class Communicator {
 public:
  explicit Communicator(std::unique_ptr<Transport> t);
  /// Moving waits for the source's asynchronous collectives first (its thread stops).
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  /// Waits for every asynchronous collective still in flight (errors are logged, not thrown).
  ~Communicator();
  int rank() const;
  int size() const;
  std::string backend() const;

  // ---- point to point (tensors must be contiguous; recv fills a preallocated tensor) --------
  // User tags are in [0, kMaxUserTag]; the collectives use tags above it.
  static constexpr int kMaxUserTag = 16383;
  void send(const Tensor& t, int dst, int tag = 0);
  void recv(Tensor& t, int src, int tag = 0);
  /// `t` must stay alive and unchanged until the request was waited on.
  Request isend(const Tensor& t, int dst, int tag = 0);
  Request irecv(Tensor& t, int src, int tag = 0);
  void barrier();

  // ---- collectives (in place where the result has the input's shape) ------------------------
  void broadcast(Tensor& t, int root, Algo algo = Algo::Auto);
  /// Result lands in `t` on root; other ranks' `t` is unspecified afterwards.
  void reduce(Tensor& t, ReduceOp op, int root, Algo algo = Algo::Auto);
  void allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum, Algo algo = Algo::Auto);
  /// Root gets [size, *t.shape] stacked in rank order; other ranks get an empty tensor.
  Tensor gather(const Tensor& t, int root);
  /// Every rank gets [size, *t.shape].
  Tensor allgather(const Tensor& t, Algo algo = Algo::Auto);
  /// Root's `t` has shape [size, ...]; rank r gets t[r]. Other ranks' `t` only gives the dtype
  /// and the row shape (t.shape[1:]) and must agree with root's.
  Tensor scatter(const Tensor& t, int root);
  /// `t` is split along dim 0 into size() chunks (sizes may differ by one: chunk r has
  /// n/size + (r < n%size) rows); rank r gets the reduction of everyone's chunk r.
  Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum, Algo algo = Algo::Auto);
  /// `t` has shape [size, ...]; rank r gets [size, ...] whose row s is rank s's row r.
  Tensor all_to_all(const Tensor& t);
  /// Variable all-to-all (MPI_Alltoallv), e.g. the routed tokens of expert parallelism: `in` is
  /// 1-D and contiguous; rank r sends in[soff[s], soff[s] + send_counts[s]) to rank s (soff the
  /// prefix sums of send_counts, which must sum to in.numel()) and returns a 1-D tensor (in's
  /// dtype) holding what rank s sent it at roff[s], recv_counts[s] elements. send_counts[s] on
  /// rank r must equal recv_counts[r] on rank s: counts that disagree between ranks are an
  /// mls::Error ("all_to_allv: the counts disagree between ranks: ..."). Algo: Auto / Pairwise
  /// (all_to_allv_pairwise, ours) or Native (MPI_Alltoallv on the MPI backend). Counted as
  /// "all_to_allv": rank r sends Σ_{s≠r} send_counts[s] elements in N−1 messages.
  Tensor all_to_allv(const Tensor& in, const std::vector<std::int64_t>& send_counts,
                     const std::vector<std::int64_t>& recv_counts, Algo algo = Algo::Auto);
  /// In-place allgather of uneven chunks (MPI_Allgatherv): `buf` is 1-D and contiguous with the
  /// same numel on every rank, `bounds` has size()+1 offsets (the same on every rank); rank r's
  /// chunk [bounds[r], bounds[r+1]) is given, afterwards every rank has every chunk (ring).
  /// Counted as "allgather". Used by ZeRO (lab 6) for partitions that Ψ does not divide.
  void allgather_inplace(Tensor& buf, const std::vector<std::int64_t>& bounds);

  // ---- asynchronous collectives -------------------------------------------------------------
  // Each returns at once with a Request; the collective runs on this communicator's
  // communication thread (the progress engine, src/async.cpp) with the same algorithm, so the
  // result is bit-identical to the blocking call's. Ordering rule: the collectives of one
  // communicator run and complete in issue order on every rank (a queue, one thread); every rank
  // must issue them in the same order — a mismatch is an mls::Error on every rank within the
  // timeout, from the request's wait(), as for blocking calls. A blocking call (or send, recv,
  // split) on a communicator first waits for its asynchronous collectives in flight.
  // Tensors passed must stay alive and untouched until the request was waited on; bad
  // arguments throw at once, when issued.
  Request iallreduce(Tensor& t, ReduceOp op = ReduceOp::Sum, Algo algo = Algo::Auto);
  Request ibroadcast(Tensor& t, int root, Algo algo = Algo::Auto);
  /// `out` is set at once to a tensor of the result's shape; it holds the result after wait().
  Request ireduce_scatter(const Tensor& t, Tensor& out, ReduceOp op = ReduceOp::Sum, Algo algo = Algo::Auto);
  /// `out` is set at once to a [size, *t.shape] tensor; it holds the result after wait().
  Request iallgather(const Tensor& t, Tensor& out, Algo algo = Algo::Auto);
  /// Asynchronous allgather_inplace (ZeRO-3's prefetch).
  Request iallgather_inplace(Tensor& buf, const std::vector<std::int64_t>& bounds);
  /// Waits for every asynchronous collective issued and not yet complete (rethrows the first
  /// error). Requests already complete stay valid: wait() on them returns at once.
  void wait_all();
  /// Asynchronous collectives issued and not yet finished.
  int in_flight() const;
  /// Advances this rank's compute lane by `seconds` on the simulated clock (sim; elsewhere a
  /// no-op): the compute that in-flight collectives overlap in the α-β-γ model.
  void model_compute(double seconds) { t_->charge_seconds(seconds); }

  /// The progress engine's loop, run by the communication thread: takes the queued collectives
  /// in issue order and runs each to completion (student code, src/async.cpp).
  struct AsyncQueue;  // the queue of issued collectives (internal)
  void progress_loop(AsyncQueue& q);

  /// Sub-communicator of the ranks that passed the same color, ordered by (key, rank). Every
  /// rank must call it; color >= 0. The child inherits the cost model and the trace switch.
  Communicator split(int color, int key);

  const Traffic& traffic() const { return traffic_; }
  Traffic& traffic() { return traffic_; }
  /// Simulated seconds on this rank's clock (sim backend), else 0.
  double modelled_seconds() const;
  Transport& transport() { return *t_; }

  /// The α-β-γ model Algo::Auto uses to choose (the same on every rank).
  const CostModel& cost_model() const { return cost_; }
  void set_cost_model(const CostModel& c) { cost_ = c; }
  /// The algorithm Auto picks for `collective` ("allreduce", "broadcast", ...) on `bytes` bytes.
  Algo choose(const std::string& collective, std::int64_t bytes) const;

  /// A collective as the timeline sees it: its name and wall seconds (wall_now()) when it began
  /// and ended, on whichever thread ran it; the elements and dtype of its tensor (enough to
  /// replay it with no compute around it, as mls-zero-bench --overlap does for t_comm).
  struct Span {
    std::string op;
    double start = 0, end = 0;
    std::int64_t numel = 0;
    std::int32_t dtype = -1;  // mls::DType
    /// CPU seconds the thread that ran it used meanwhile (its thread CPU clock): far below
    /// end − start when the collective waits by sleeping (a paced link, a slower peer), close
    /// to it when it spins or copies.
    double cpu = 0;
    /// When it was issued (wall_now()): an asynchronous collective's issue; a blocking one's
    /// start. start − max(issued, the previous collective's end) is how long the communication
    /// thread took to start it (waking up, getting the core).
    double issued = 0;
  };
  /// Records a Span for every collective from now on (off by default).
  void set_span_recording(bool on);
  /// The spans recorded so far (a copy; safe while collectives are in flight).
  std::vector<Span> spans() const;
  /// Seconds on the clock the spans use (steady_clock).
  static double wall_now();
  /// CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID).
  static double thread_cpu_now();

  /// How the latest communication thread of this process is scheduled: "fifo" (SCHED_FIFO: the
  /// MPI backend where permitted, unless MLS_COMM_THREAD_RT=0), "slice" (SCHED_OTHER with a
  /// 100 us slice), "default", or "none started" (src/communicator.cpp, prefer_prompt_wakeups).
  static const char* comm_thread_policy();

  /// Records every message this rank receives inside a collective (for mls-collectives trace).
  void set_tracing(bool on) { tracing_ = on; }
  const std::vector<TraceEvent>& trace() const { return trace_; }

  // ---- the collectives' algorithms (student code, src/collectives.cpp) -----------------------
  // Each works in place on a contiguous 1-D buffer `buf` (n elements), over the primitives below.
  void broadcast_linear(Tensor& buf, int root);
  void broadcast_tree(Tensor& buf, int root);
  void reduce_tree(Tensor& buf, ReduceOp op, int root);
  void allreduce_ring(Tensor& buf, ReduceOp op);
  void allreduce_recursive_doubling(Tensor& buf, ReduceOp op);
  void allreduce_rabenseifner(Tensor& buf, ReduceOp op);
  /// Ring reduce-scatter over chunks [bounds[c], bounds[c+1]) of `buf` (bounds has size()+1
  /// entries): afterwards rank r's chunk r holds the reduction of every rank's chunk r.
  void reduce_scatter_ring(Tensor& buf, const std::vector<std::int64_t>& bounds, ReduceOp op);
  /// Ring allgather: rank r's chunk r is given; afterwards every rank has every chunk.
  void allgather_ring(Tensor& buf, const std::vector<std::int64_t>& bounds);
  /// Linear gather into `out` (root only; chunk r of `out` comes from rank r) of `mine`.
  void gather_linear(const Tensor& mine, Tensor& out, const std::vector<std::int64_t>& bounds, int root);
  /// Linear scatter: chunk r of root's `all` lands in rank r's `mine`.
  void scatter_linear(const Tensor& all, Tensor& mine, const std::vector<std::int64_t>& bounds, int root);
  /// Pairwise exchange: chunk s of `in` goes to rank s; chunk s of `out` comes from rank s.
  void all_to_all_pairwise(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& bounds);
  /// Pairwise exchange of uneven chunks: chunk s of `in`, [send_bounds[s], send_bounds[s+1]),
  /// goes to rank s; chunk s of `out`, [recv_bounds[s], recv_bounds[s+1]), comes from rank s
  /// (both bounds have size()+1 offsets; they differ from rank to rank).
  void all_to_allv_pairwise(const Tensor& in, const std::vector<std::int64_t>& send_bounds, Tensor& out,
                            const std::vector<std::int64_t>& recv_bounds);
  void barrier_dissemination();

  // ---- primitives the algorithms use (given): counted, traced, header-checked ---------------
  /// Sends / receives a contiguous 1-D slice on the current collective's reserved tag (one step).
  void coll_send(const Tensor& part, int dst);
  void coll_recv(Tensor& part, int src);
  /// Sends `out` to `dst` and receives `in` from `src` at the same time (one step).
  void coll_sendrecv(const Tensor& out, int dst, Tensor& in, int src);
  /// acc = op(acc, in) elementwise (same dtype and numel; Avg reduces as Sum). Charges γ.
  void reduce_into(Tensor& acc, const Tensor& in, ReduceOp op);

  struct Coll;  // the collective in progress (name, header fields); internal
  /// Ends the collective in progress (internal: the collectives' scope guard calls it).
  void end() noexcept;

 private:
  void begin(const char* name, int op_id, const Tensor& t, int root, int reduce);
  /// Waits for the asynchronous collectives in flight unless called by the communication thread.
  void quiesce();
  /// Queues `run` on the communication thread (started on first use); returns its request.
  Request enqueue(const char* name, std::function<void()> run);
  void stop_async() noexcept;
  Header coll_header(std::int64_t bytes) const;
  void count_send(std::int64_t bytes, bool step);
  void count_recv(std::int64_t bytes, bool step);

  std::unique_ptr<Transport> t_;
  Traffic traffic_;
  CostModel cost_{};
  std::int64_t seq_ = 0, seq_async_ = 0;
  std::unique_ptr<Coll> coll_;
  bool tracing_ = false;
  std::vector<TraceEvent> trace_;
  std::shared_ptr<AsyncQueue> async_;  // shared with the requests it issued
  bool async_running_ = false;  // the communication thread runs the collective in progress
  double issued_at_ = -1.0;     // ... issued at this compute-lane time
  double issued_wall_ = 0.0;    // ... and at this wall_now() (its Span's issued)
  double finished_at_ = 0.0;    // the communication-lane time the last collective finished at
  struct SpanLog;
  std::shared_ptr<SpanLog> spans_;  // set while recording
};

/// Chunk boundaries of n items over `parts` parts: parts+1 offsets, part r holding
/// n/parts + (r < n%parts) items (the layout of reduce_scatter and the ring algorithms).
std::vector<std::int64_t> chunk_bounds(std::int64_t n, int parts);

/// Runs `body(comm)` on `n` simulated ranks (threads), each with its own Communicator over
/// in-memory channels; rethrows (as mls::Error naming the rank) the first exception any rank
/// threw, after every rank has stopped. `timeout` bounds every wait. A rank that fails aborts
/// the world: every other rank's pending or next wait throws at once.
struct SimOptions {
  CostModel cost{};
  std::chrono::milliseconds timeout{10000};
  bool trace = false;
};
/// What a simulated run reports: per-rank traffic and modelled time, and the wall time.
struct SimReport {
  std::vector<Traffic> traffic;
  std::vector<double> modelled_seconds;
  std::vector<std::vector<TraceEvent>> trace;
  double wall_seconds = 0;
  double max_modelled_seconds() const;
};
SimReport run_simulated(int n, const std::function<void(Communicator&)>& body, SimOptions opts = {});

/// `iters` round trips of `t` between ranks 0 and 1 (rank 0 sends first; other ranks do nothing):
/// the ping-pong that calibration and the benchmarks time.
void ping_pong(Communicator& c, Tensor& t, int iters);

/// The random stream of one rank: Rng(seed, "rank<r>") — independent and reproducible per rank.
Rng rank_rng(std::uint64_t seed, const Communicator& comm);

}  // namespace mls::parallel
