// The NCCL backend (plumbing, not student code): NcclTransport, one rank per GPU.
//
// A send is deferred until the next receive or wait, then issued inside ncclGroupStart/End with
// that receive, so the exchange steps of the ring (send right, receive left) never deadlock.
// Each message is [Header] then [payload], staged through device buffers.
//
// Streams: every copy and NCCL call of this transport runs on its own communication stream (a
// non-blocking stream, so it never serializes with the default stream implicitly). The compute
// stream is CUDA's default stream of the transport's device, where the caller's kernels run. A
// collective is ordered after the compute issued before it by an event: recorded on the compute
// stream when an asynchronous collective is issued (async_issued, the caller's thread) or when a
// blocking one begins, and waited for by the communication stream (cudaStreamWaitEvent) before
// the collective's first message (order_after_compute, on the thread that runs it: the
// communicator's communication thread for i-collectives). Compute issued after it is not waited
// for: the two streams overlap. Each thread that calls in selects the transport's device first.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "../detail.hpp"
#include "mls/common/error.hpp"
#include "mls/parallel/nccl.hpp"
#ifdef MLS_HAVE_MPI
#include "mls/parallel/mpi.hpp"
#endif

namespace mls::parallel {

namespace {

void check_cuda(cudaError_t e, const char* what, const char* call) {
  if (e != cudaSuccess) fail(what, ": ", call, " failed: ", cudaGetErrorString(e));
}
void check_nccl(ncclResult_t r, const char* what, const char* call) {
  if (r != ncclSuccess) fail(what, ": ", call, " failed: ", ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Int64: return ncclInt64;
    case DType::Int32: return ncclInt32;
    case DType::Bool: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Prod: return ncclProd;
  }
  return ncclSum;
}

/// A device buffer that grows on demand.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t size = 0;
  void* get(std::size_t n, const char* what) {
    if (n > size) {
      if (ptr) cudaFree(ptr);
      ptr = nullptr;
      check_cuda(cudaMalloc(&ptr, n), what, "cudaMalloc");
      size = n;
    }
    return ptr;
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
};

struct PendingSend {
  Header h;
  int dst = 0;
  DeviceBuffer head, body;
  bool issued = false;
};

class NcclTransport final : public Transport {
 public:
  NcclTransport(ncclComm_t comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {
    check_cuda(cudaSetDevice(device_), "nccl", "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "nccl", "cudaStreamCreateWithFlags");
  }
  ~NcclTransport() override {
    cudaSetDevice(device_);
    for (auto& [i, ev] : issued_) cudaEventDestroy(ev);
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  void async_issued(std::int64_t index) override {
    check_cuda(cudaSetDevice(device_), "nccl", "cudaSetDevice");
    cudaEvent_t ev = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "nccl", "cudaEventCreateWithFlags");
    check_cuda(cudaEventRecord(ev, kComputeStream), "nccl", "cudaEventRecord");  // the compute stream, now
    std::lock_guard<std::mutex> lk(mu_);
    issued_.emplace_back(index, ev);
  }
  void order_after_compute(std::int64_t index) override {
    check_cuda(cudaSetDevice(device_), "nccl", "cudaSetDevice");  // the communication thread's too
    cudaEvent_t ev = nullptr;
    if (index < 0) {  // blocking: after everything the compute stream holds now
      check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "nccl", "cudaEventCreateWithFlags");
      check_cuda(cudaEventRecord(ev, kComputeStream), "nccl", "cudaEventRecord");
    } else {  // asynchronous: the event recorded when it was issued (earlier ones whose collective
              // never ran, e.g. refused arguments, are dropped)
      std::lock_guard<std::mutex> lk(mu_);
      while (!issued_.empty() && issued_.front().first <= index) {
        if (issued_.front().first == index) ev = issued_.front().second;
        else cudaEventDestroy(issued_.front().second);
        issued_.pop_front();
      }
    }
    if (!ev) return;
    check_cuda(cudaStreamWaitEvent(stream_, ev, 0), "nccl", "cudaStreamWaitEvent");
    cudaEventDestroy(ev);  // released once the wait is enqueued (CUDA keeps it until then)
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  void send(const void* data, const Header& h, int dst, int tag) override { isend(data, h, dst, tag).wait(); }

  Request isend(const void* data, const Header& h, int dst, int) override {
    auto p = std::make_shared<PendingSend>();
    p->h = h;
    p->dst = dst;
    void* dh = p->head.get(sizeof(Header), "send");
    // synchronous on the communication stream: the host buffer may change once isend returns
    to_device(dh, &h, sizeof(Header), "send");
    if (h.bytes) {
      void* db = p->body.get(static_cast<std::size_t>(h.bytes), "send");
      to_device(db, data, static_cast<std::size_t>(h.bytes), "send");
    }
    pending_.push_back(p);
    return Request([this, p] {
      if (!p->issued) flush(nullptr);
    });
  }

  Header recv(void* data, const Header& expect, int src, int, const char* what) override {
    // Header first (together with any deferred sends), then the payload.
    DeviceBuffer dh;
    Incoming in{dh.get(sizeof(Header), what), sizeof(Header), src};
    flush(&in);
    Header h;
    to_host(&h, in.dev, sizeof(Header), what);
    std::string bad = detail::header_mismatch(expect, h, what, rank_, src);
    if (!bad.empty()) throw Error(bad);
    if (h.bytes) {
      void* db = recv_buf_.get(static_cast<std::size_t>(h.bytes), what);
      check_nccl(ncclRecv(db, static_cast<std::size_t>(h.bytes), ncclUint8, src, comm_, stream_), what, "ncclRecv");
      to_host(data, db, static_cast<std::size_t>(h.bytes), what);
    }
    return h;
  }

  Request irecv(void* data, const Header& expect, int src, int tag, const char* what) override {
    return Request([this, data, expect, src, tag, what] { recv(data, expect, src, tag, what); });
  }

  std::unique_ptr<Transport> split(int color, int key, const std::vector<int>&, const std::vector<int>&) override {
    ncclComm_t child = nullptr;
    check_nccl(ncclCommSplit(comm_, color, key, &child, nullptr), "split", "ncclCommSplit");
    int r = 0, n = 1;
    ncclCommUserRank(child, &r);
    ncclCommCount(child, &n);
    return std::make_unique<NcclTransport>(child, r, n, device_);
  }

  bool native_allreduce(void* data, std::int64_t count, DType dtype, ReduceOp op) override {
    const std::size_t bytes = static_cast<std::size_t>(count) * itemsize(dtype);
    flush(nullptr);
    if (!bytes) return true;
    void* d = recv_buf_.get(bytes, "allreduce");
    to_device(d, data, bytes, "allreduce");
    check_nccl(ncclAllReduce(d, d, static_cast<std::size_t>(count), nccl_type(dtype), nccl_op(op), comm_, stream_),
               "allreduce", "ncclAllReduce");
    to_host(data, d, bytes, "allreduce");
    return true;
  }
  bool native_broadcast(void* data, std::int64_t bytes, int root) override {
    flush(nullptr);
    if (!bytes) return true;
    void* d = recv_buf_.get(static_cast<std::size_t>(bytes), "broadcast");
    to_device(d, data, static_cast<std::size_t>(bytes), "broadcast");
    check_nccl(ncclBroadcast(d, d, static_cast<std::size_t>(bytes), ncclUint8, root, comm_, stream_), "broadcast",
               "ncclBroadcast");
    to_host(data, d, static_cast<std::size_t>(bytes), "broadcast");
    return true;
  }

 private:
  /// CUDA's default stream of the device: the compute stream collectives are ordered after.
  static constexpr cudaStream_t kComputeStream = nullptr;
  /// Host -> device on the communication stream, complete on return (the host side may change).
  void to_device(void* dev, const void* host, std::size_t n, const char* what) {
    check_cuda(cudaSetDevice(device_), what, "cudaSetDevice");
    check_cuda(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, stream_), what, "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream_), what, "cudaStreamSynchronize");
  }
  /// Device -> host on the communication stream, after the stream's NCCL calls; complete on return.
  void to_host(void* host, const void* dev, std::size_t n, const char* what) {
    check_cuda(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, stream_), what, "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream_), what, "cudaStreamSynchronize");
  }
  struct Incoming {
    void* dev;
    std::size_t bytes;
    int src;
  };
  /// Issues every deferred send (header then payload) and, if given, one receive, in one group.
  void flush(Incoming* in) {
    if (pending_.empty() && !in) return;
    check_nccl(ncclGroupStart(), "nccl", "ncclGroupStart");
    for (auto& p : pending_) {
      check_nccl(ncclSend(p->head.ptr, sizeof(Header), ncclUint8, p->dst, comm_, stream_), "send", "ncclSend");
      if (p->h.bytes)
        check_nccl(ncclSend(p->body.ptr, static_cast<std::size_t>(p->h.bytes), ncclUint8, p->dst, comm_, stream_),
                   "send", "ncclSend");
    }
    if (in) check_nccl(ncclRecv(in->dev, in->bytes, ncclUint8, in->src, comm_, stream_), "recv", "ncclRecv");
    check_nccl(ncclGroupEnd(), "nccl", "ncclGroupEnd");
    check_cuda(cudaStreamSynchronize(stream_), "nccl", "cudaStreamSynchronize");
    for (auto& p : pending_) p->issued = true;
    pending_.clear();
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the communication stream
  int rank_ = 0, size_ = 1, device_ = 0;
  std::mutex mu_;                                             // guards issued_
  std::deque<std::pair<std::int64_t, cudaEvent_t>> issued_;  // asynchronous collectives' events, by index
  std::vector<std::shared_ptr<PendingSend>> pending_;
  DeviceBuffer recv_buf_;
};

int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : def;
}

}  // namespace

bool nccl_gpu_available(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) : "no CUDA device";
    return false;
  }
  return true;
}

namespace {

/// This process's GPU (rank % device count) and its NCCL communicator of `size` ranks from `id`.
Communicator nccl_init(int rank, int size, const ncclUniqueId& id) {
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "nccl_world", "cudaGetDeviceCount");
  check_cuda(cudaSetDevice(rank % devices), "nccl_world", "cudaSetDevice");
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, size, id, rank), "nccl_world", "ncclCommInitRank");
  return Communicator(std::make_unique<NcclTransport>(comm, rank, size, rank % devices));
}

void check_world(int rank, int size) {
  MLS_CHECK(size >= 1 && rank >= 0 && rank < size, "nccl_world: rank ", rank, " of ", size, " is out of range");
  std::string why;
  MLS_CHECK(nccl_gpu_available(&why), "nccl_world: no GPU (", why, ")");
}

}  // namespace

Communicator nccl_world(int rank, int size, const std::string& id_file, std::chrono::milliseconds timeout) {
  check_world(rank, size);
  ncclUniqueId id;
  if (rank == 0) check_nccl(ncclGetUniqueId(&id), "nccl_world", "ncclGetUniqueId");
  if (size > 1) {
    MLS_CHECK(!id_file.empty(), "nccl_world: ", size, " ranks need an id file to share the NCCL unique id");
    if (rank == 0) {
      const std::string tmp = id_file + ".tmp";
      std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(&id), sizeof(id));
      MLS_CHECK(std::rename(tmp.c_str(), id_file.c_str()) == 0, "nccl_world: cannot write '", id_file, "'");
    } else {
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (true) {
        std::ifstream f(id_file, std::ios::binary);
        if (f && f.read(reinterpret_cast<char*>(&id), sizeof(id))) break;
        MLS_CHECK(std::chrono::steady_clock::now() < deadline, "nccl_world: rank ", rank, " timed out after ",
                  timeout.count(), " ms waiting for the NCCL id in '", id_file, "'");
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  return nccl_init(rank, size, id);
}

Communicator nccl_world(Communicator& bootstrap) {
  const int rank = bootstrap.rank(), size = bootstrap.size();
  MLS_CHECK(bootstrap.backend() != "nccl", "nccl_world: the bootstrap communicator must be another backend ",
            "(mpi_world() under mpirun, or simulated ranks), got an nccl one");
  check_world(rank, size);
  // Rank 0's id, as bytes, to every rank over the bootstrap's own network: no shared file.
  ncclUniqueId id;
  Tensor bytes = Tensor::zeros({static_cast<std::int64_t>(sizeof(id))}, DType::Bool);
  if (rank == 0) {
    check_nccl(ncclGetUniqueId(&id), "nccl_world", "ncclGetUniqueId");
    std::memcpy(bytes.data_ptr(), &id, sizeof(id));
  }
  bootstrap.broadcast(bytes, 0);
  std::memcpy(&id, bytes.data_ptr(), sizeof(id));
  return nccl_init(rank, size, id);
}

Communicator nccl_world_from_env() {
  const int size = env_int("OMPI_COMM_WORLD_SIZE", 1);
  if (size == 1) return nccl_world(0, 1);
#ifdef MLS_HAVE_MPI
  Communicator bootstrap = mpi_world();
  return nccl_world(bootstrap);
#else
  fail("nccl_world_from_env: ", size, " ranks (mpirun) need the MPI backend to share the NCCL unique id, ",
       "and this build has none (apt-get install libopenmpi-dev, reconfigure)");
#endif
}

}  // namespace mls::parallel
