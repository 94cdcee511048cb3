#pragma once
/// Lab 5: the Communicator — point-to-point messages and the collectives built from them.
///
/// Data flow:
///   Transport (backend plumbing, not student code): moves raw bytes between ranks.
///     - SimTransport: N ranks as threads of one process, in-memory channels, a simulated
///       α-β-γ clock per rank, a timeout that turns a missing message into mls::Error.
///     - MpiTransport: one rank per OpenMPI process (MPI_Send/MPI_Recv underneath).
///     - NcclTransport: one rank per GPU (ncclSend/ncclRecv), where CUDA + NCCL are found.
///   Communicator (this header): rank(), size(), send/recv on lab 1 tensors, and every
///     collective, each implemented by the student over send/recv only (ring, tree,
///     recursive doubling, ...), with per-rank traffic counted by collective.
///   Training wrappers (data.hpp, tensor_parallel.hpp, pipeline.hpp) use only Communicator.
///
/// Every collective is called by every rank of the communicator with matching arguments;
/// a mismatch (sizes, dtypes, roots) is an mls::Error on every rank, never a hang.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mls/tensor/tensor.hpp"

namespace mls::parallel {

/// Reduction operators of reduce / allreduce / reduce_scatter. Avg = Sum then divide by size()
/// (integer dtypes: truncating division).
enum class ReduceOp { Sum, Avg, Max, Min, Prod };
/// "sum", "avg", "max", "min", "prod".
const char* to_string(ReduceOp op);

/// Algorithms a collective may use. Auto lets the cost model pick (see cost.hpp).
enum class Algo { Auto, Ring, Tree, RecursiveDoubling, Rabenseifner, Pairwise, Linear, Native };
const char* to_string(Algo a);

/// Traffic of one rank: what it sent and received, in total and per collective name
/// ("allreduce", "broadcast", "send", ...). Counted by the Communicator, identical on every backend.
struct Traffic {
  struct Counts {
    std::int64_t messages_sent = 0, bytes_sent = 0, messages_recv = 0, bytes_recv = 0;
    std::int64_t steps = 0;  // communication rounds this rank took part in
  };
  Counts total;
  std::map<std::string, Counts> by_op;
  void reset() { *this = Traffic{}; }
};

/// The α-β-γ cost model: a message of n bytes costs alpha + n * beta seconds; reducing k
/// elements costs k * gamma seconds. Defaults come from `mls-collectives calibrate`.
struct CostModel {
  double alpha = 2e-6;    // seconds per message
  double beta = 1e-10;    // seconds per byte
  double gamma = 2.5e-10; // seconds per reduced element
};

/// A handle on a non-blocking send or receive.
class Request {
 public:
  Request() = default;
  explicit Request(std::function<void()> wait_fn) : wait_(std::move(wait_fn)) {}
  /// Blocks until the operation completed (throws mls::Error on timeout or peer failure).
  void wait();
  bool valid() const { return static_cast<bool>(wait_); }

 private:
  std::function<void()> wait_;
};

/// Raw byte transport between ranks: the backend. Not student code.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "sim", "mpi" or "nccl".
  virtual std::string backend() const = 0;
  virtual void send(const void* data, std::size_t bytes, int dst, int tag) = 0;
  virtual void recv(void* data, std::size_t bytes, int src, int tag) = 0;
  virtual Request isend(const void* data, std::size_t bytes, int dst, int tag) = 0;
  virtual Request irecv(void* data, std::size_t bytes, int src, int tag) = 0;
  /// A sub-transport of the ranks with the same color, ordered by (key, rank).
  virtual std::unique_ptr<Transport> split(int color, int key) = 0;
  /// Charges `elements` reduced elements to this rank's simulated clock (sim only; else no-op).
  virtual void charge_compute(std::int64_t elements) { (void)elements; }
  /// Simulated seconds on this rank's clock (sim), or 0 where there is no model.
  virtual double modelled_seconds() const { return 0.0; }
};

/// The student-facing communicator on lab 1 tensors.
class Communicator {
 public:
  explicit Communicator(std::unique_ptr<Transport> t);
  int rank() const;
  int size() const;
  std::string backend() const;

  // ---- point to point (tensors must be contiguous; recv fills a preallocated tensor) --------
  void send(const Tensor& t, int dst, int tag = 0);
  void recv(Tensor& t, int src, int tag = 0);
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
  /// Root's `t` has shape [size, ...]; rank r gets t[r].
  Tensor scatter(const Tensor& t, int root);
  /// `t` is split along dim 0 into size() chunks (sizes may differ by one: chunk r has
  /// n/size + (r < n%size) rows); rank r gets the reduction of everyone's chunk r.
  Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum, Algo algo = Algo::Auto);
  /// `t` has shape [size, ...]; rank r gets [size, ...] whose row s is rank s's row r.
  Tensor all_to_all(const Tensor& t);

  /// Sub-communicator of the ranks that passed the same color, ordered by (key, rank).
  Communicator split(int color, int key);

  const Traffic& traffic() const { return traffic_; }
  Traffic& traffic() { return traffic_; }
  double modelled_seconds() const;
  Transport& transport() { return *t_; }

 private:
  std::unique_ptr<Transport> t_;
  Traffic traffic_;
};

/// Runs `body(comm)` on `n` simulated ranks (threads), each with its own Communicator over
/// in-memory channels; rethrows (as mls::Error naming the rank) the first exception any rank
/// threw, after every rank has stopped. `timeout` bounds every wait.
struct SimOptions {
  CostModel cost{};
  std::chrono::milliseconds timeout{10000};
};
void run_simulated(int n, const std::function<void(Communicator&)>& body, SimOptions opts = {});

}  // namespace mls::parallel
