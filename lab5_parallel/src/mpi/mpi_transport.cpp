// The MPI backend (plumbing, not student code): MpiTransport over an MPI communicator.
//
// A message on user/collective tag t is sent as
//   payload <= kInlineBytes: one message [Header | payload] on MPI tag 2t
//   larger:                  [Header] on 2t, then the payload on 2t+1
// Both sides choose the protocol from their own byte count; when the counts differ, the header
// check reports it (and the posted payload receive is cancelled). Every wait polls MPI_Testall
// with a deadline: a receive that never matches becomes an mls::Error, never a hang.
#include <mpi.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <cstring>
#include <mutex>
#include <vector>

#include "../detail.hpp"
#include "mls/common/error.hpp"
#include "mls/parallel/link.hpp"
#include "mls/parallel/mpi.hpp"

namespace mls::parallel {

namespace {

constexpr std::size_t kInlineBytes = 8192;
/// MPI_THREAD_MULTIPLE was provided: a communication thread may call MPI next to the caller's.
bool g_thread_multiple = false;

/// The emulated link (link.hpp): one per process, shared by every communicator and thread.
/// Guarded by g_link_mu; set from the environment by mpi_world() unless mpi_set_link() set it.
LinkEmulation g_link;
bool g_link_set_by_program = false;
std::mutex g_link_mu;
std::chrono::steady_clock::time_point g_link_free{};

/// Asks the kernel to wake this thread within 1 us of the time it asked for (Linux: the default
/// timer slack is 50 us, which would make every paced message and every poll of wait() late).
/// Once per thread.
void tighten_timer_slack() {
#ifdef __linux__
  thread_local bool done = false;
  if (!done) {
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    done = true;
  }
#endif
}


/// Holds a message of `bytes` back until the emulated link would have carried it. It sleeps,
/// never spins: a spinning sender on a machine with as many cores as ranks takes its core from
/// the compute the communication is meant to hide behind. A sleep wakes a little late (the
/// scheduler); so that the overshoots of back-to-back messages do not add up to a slower link
/// than asked for, a message whose sender arrives less than kLinkCredit after the link became
/// free starts when it became free (the link was never idle), not when the sender arrived.
void pace(std::int64_t bytes) {
  std::chrono::steady_clock::time_point done;
  {
    std::lock_guard<std::mutex> lk(g_link_mu);
    if (!g_link.active()) return;
    const auto now = std::chrono::steady_clock::now();
    const auto start = now - g_link_free <= kLinkCredit ? g_link_free : now;
    done = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(g_link.seconds(bytes)));
    g_link_free = done;  // the next message (any thread of this process) queues behind this one
  }
  tighten_timer_slack();
  std::this_thread::sleep_until(done);
}
constexpr std::size_t kHeader = sizeof(Header);

void check_mpi(int rc, const char* what, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail(what, ": ", call, " failed: ", std::string(msg, static_cast<std::size_t>(len)));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int64: return MPI_INT64_T;
    case DType::Int32: return MPI_INT32_T;
    case DType::Bool: return MPI_C_BOOL;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Prod: return MPI_PROD;
  }
  return MPI_SUM;
}

/// One posted operation: the MPI requests and the buffers they use.
struct Pending {
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::vector<std::byte> head;  // header (+ inline payload)
};

class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm comm, std::chrono::milliseconds timeout) : comm_(comm), timeout_(timeout) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    MLS_CHECK(!flag || *ub >= 2 * (detail::kSplitTag + 1) + 1, "mpi: MPI_TAG_UB is ", flag ? *ub : 0,
              ", expected at least ", 2 * (detail::kSplitTag + 1) + 1);
  }
  ~MpiTransport() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  bool thread_safe() const override { return g_thread_multiple; }

  void send(const void* data, const Header& h, int dst, int tag) override { isend(data, h, dst, tag).wait(); }

  Header recv(void* data, const Header& expect, int src, int tag, const char* what) override {
    auto p = post_recv(data, expect, src, tag, what);
    return finish_recv(*p, data, expect, src, tag, what);
  }

  Request isend(const void* data, const Header& h, int dst, int tag) override {
    auto p = std::make_shared<Pending>();
    const auto bytes = static_cast<std::size_t>(h.bytes);
    pace(h.bytes);
    const bool inline_payload = bytes <= kInlineBytes;
    p->head.resize(kHeader + (inline_payload ? bytes : 0));
    std::memcpy(p->head.data(), &h, kHeader);
    if (inline_payload && bytes) std::memcpy(p->head.data() + kHeader, data, bytes);
    check_mpi(MPI_Isend(p->head.data(), static_cast<int>(p->head.size()), MPI_BYTE, dst, 2 * tag, comm_, &p->req[0]),
              "send", "MPI_Isend");
    if (!inline_payload)
      check_mpi(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dst, 2 * tag + 1, comm_, &p->req[1]), "send",
                "MPI_Isend");
    return Request([this, p, dst, tag] { wait(p->req, 2, "send", "to", dst, tag); });
  }

  Request irecv(void* data, const Header& expect, int src, int tag, const char* what) override {
    auto p = post_recv(data, expect, src, tag, what);
    return Request([this, p, data, expect, src, tag, what] { finish_recv(*p, data, expect, src, tag, what); });
  }

  std::unique_ptr<Transport> split(int color, int key, const std::vector<int>&, const std::vector<int>&) override {
    MPI_Comm child = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, color, key, &child), "split", "MPI_Comm_split");
    return std::make_unique<MpiTransport>(child, timeout_);
  }

  bool native_allreduce(void* data, std::int64_t count, DType dtype, ReduceOp op) override {
    MLS_CHECK(count <= INT32_MAX, "allreduce: native MPI_Allreduce takes at most 2^31-1 elements, got ", count);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, count ? data : nullptr, static_cast<int>(count), mpi_type(dtype), mpi_op(op),
                            comm_),
              "allreduce", "MPI_Allreduce");
    return true;
  }
  bool native_broadcast(void* data, std::int64_t bytes, int root) override {
    MLS_CHECK(bytes <= INT32_MAX, "broadcast: native MPI_Bcast takes at most 2^31-1 bytes, got ", bytes);
    check_mpi(MPI_Bcast(bytes ? data : nullptr, static_cast<int>(bytes), MPI_BYTE, root, comm_), "broadcast",
              "MPI_Bcast");
    return true;
  }
  bool native_all_to_allv(const void* send, const std::vector<std::int64_t>& send_bytes, void* recv,
                          const std::vector<std::int64_t>& recv_bytes) override {
    const std::size_t n = send_bytes.size();
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    std::int64_t so = 0, ro = 0;
    for (std::size_t r = 0; r < n; ++r) {
      MLS_CHECK(so + send_bytes[r] <= INT32_MAX && ro + recv_bytes[r] <= INT32_MAX,
                "all_to_allv: native MPI_Alltoallv takes at most 2^31-1 bytes per rank");
      sc[r] = static_cast<int>(send_bytes[r]), sd[r] = static_cast<int>(so), so += send_bytes[r];
      rc[r] = static_cast<int>(recv_bytes[r]), rd[r] = static_cast<int>(ro), ro += recv_bytes[r];
    }
    check_mpi(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, comm_),
              "all_to_allv", "MPI_Alltoallv");
    return true;
  }
  void abort(const std::string& why) override {
    std::fprintf(stderr, "mls: rank %d of %d failed: %s\n", rank_, size_, why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  std::shared_ptr<Pending> post_recv(void* data, const Header& expect, int src, int tag, const char* what) {
    auto p = std::make_shared<Pending>();
    const auto bytes = static_cast<std::size_t>(expect.bytes);
    p->head.resize(kHeader + kInlineBytes);  // room for any inline message
    check_mpi(MPI_Irecv(p->head.data(), static_cast<int>(p->head.size()), MPI_BYTE, src, 2 * tag, comm_, &p->req[0]),
              what, "MPI_Irecv");
    if (bytes > kInlineBytes)
      check_mpi(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, src, 2 * tag + 1, comm_, &p->req[1]), what,
                "MPI_Irecv");
    return p;
  }

  Header finish_recv(Pending& p, void* data, const Header& expect, int src, int tag, const char* what) {
    wait(&p.req[0], 1, what, "from", src, tag);
    Header h;
    std::memcpy(&h, p.head.data(), kHeader);
    std::string bad = detail::header_mismatch(expect, h, what, rank_, src);
    if (!bad.empty()) {
      if (p.req[1] != MPI_REQUEST_NULL) {
        MPI_Cancel(&p.req[1]);
        MPI_Request_free(&p.req[1]);
      }
      throw Error(bad);
    }
    if (p.req[1] != MPI_REQUEST_NULL) wait(&p.req[1], 1, what, "from", src, tag);
    else if (h.bytes) std::memcpy(data, p.head.data() + kHeader, static_cast<std::size_t>(h.bytes));
    return h;
  }

  /// Polls until every request completed or the deadline passed. On the communication thread
  /// (detail::this_thread_waits_nap) it polls back to back for kSpin (a message already on its
  /// way completes at once), then sleeps between polls, the
  /// sleep doubling from 2 us up to kMaxNap: a thread waiting for a message that is milliseconds
  /// away (a slower rank, a paced link) uses next to no CPU. Spinning instead (MPI_Wait does:
  /// OpenMPI's progress loop busy-polls) takes a core from the compute the other threads run:
  /// with two ranks on two cores, a communication thread that spins while its collective waits
  /// for the peer halves its own rank's compute, and overlap is lost. The price: a message that
  /// arrives during a nap is seen up to kMaxNap late. Every other thread (a blocking collective,
  /// which has nothing to overlap) polls back to back for the whole wait, as MPI_Wait does: with
  /// naps there, all_to_allv of 4 MiB per rank took 1.35-1.49 x MPI_Alltoallv's time instead of
  /// 1.06 (two processes, Zen 5).
  void wait(MPI_Request* reqs, int n, const char* what, const char* dir, int peer, int tag) {
    constexpr auto kSpin = std::chrono::microseconds(20);
    constexpr auto kMaxNap = std::chrono::microseconds(50);
    const auto t0 = std::chrono::steady_clock::now();
    const auto deadline = t0 + timeout_;
    auto nap = std::chrono::microseconds(2);
    int done = 0;
    for (long spin = 0;; ++spin) {
      check_mpi(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), what, "MPI_Testall");
      if (done) return;
      if (spin < 16) continue;  // the first polls without reading the clock
      const auto now = std::chrono::steady_clock::now();
      if (now > deadline)
        fail(what, ": rank ", rank_, " timed out after ", timeout_.count(), " ms waiting for a message ", dir,
             " rank ", peer, " (tag ", tag > Communicator::kMaxUserTag ? std::string("collective") : std::to_string(tag),
             "): the peer never matched it (a missing call, mismatched collectives, or a dead rank)");
      if (!detail::this_thread_waits_nap()) {
        if (spin % 256 == 0) std::this_thread::yield();  // more ranks than cores: let the peer run
        continue;
      }
      if (now - t0 < kSpin) continue;
      tighten_timer_slack();
      std::this_thread::sleep_for(nap);
      nap = std::min(2 * nap, kMaxNap);
    }
  }

  MPI_Comm comm_;
  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
};

std::once_flag g_init;

}  // namespace

void mpi_init() {
  std::call_once(g_init, [] {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      // OpenMPI streams a large message in fragments (32 KiB on shared memory), at most
      // pml_ob1_send_pipeline_depth (default 3) in flight: every further fragment waits for the
      // receiver to take one and for the sender to see it back, a round trip through both sides'
      // polls. Our waits nap between polls (wait() below): with 3 in flight a 2 MB message
      // took 3-4x as long as with spinning polls; with 64 it takes what spinning does. An
      // explicit setting (environment, mpirun --mca) wins.
      setenv("OMPI_MCA_pml_ob1_send_pipeline_depth", "64", 0);
      setenv("OMPI_MCA_pml_ob1_recv_pipeline_depth", "64", 0);
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
      std::atexit([] {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
      });
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  });
}

bool under_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_RANK") != nullptr; }

Communicator mpi_world(std::chrono::milliseconds timeout) {
  mpi_init();
  LinkEmulation link = link_from_env();  // a bad spec is an mls::Error on every rank
  {
    std::lock_guard<std::mutex> lk(g_link_mu);
    if (g_link_set_by_program) link = g_link;
    else g_link = link;
  }
  if (link.active()) {
    static std::once_flag said;
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (r == 0) std::call_once(said, [&] { std::fprintf(stderr, "mls: mpi backend: %s\n", link.label().c_str()); });
  }
  MLS_CHECK(timeout.count() > 0, "mpi_world: the timeout must be > 0 ms, got ", timeout.count());
  MPI_Comm dup = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "mpi_world", "MPI_Comm_dup");
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  return Communicator(std::make_unique<MpiTransport>(dup, timeout));
}

int mpi_run(const std::function<void(Communicator&)>& body, std::chrono::milliseconds timeout) {
  Communicator comm = mpi_world(timeout);
  try {
    body(comm);
  } catch (const std::exception& e) {
    comm.transport().abort(e.what());
  } catch (...) {
    comm.transport().abort("a non-standard exception");
  }
  return 0;
}

double mpi_wtime() { return MPI_Wtime(); }

void mpi_set_link(const std::optional<LinkEmulation>& link) {
  const LinkEmulation l = link ? *link : link_from_env();
  std::lock_guard<std::mutex> lk(g_link_mu);
  g_link = l;
  g_link_set_by_program = link.has_value();
  g_link_free = std::chrono::steady_clock::time_point{};
}

LinkEmulation mpi_link() {
  std::lock_guard<std::mutex> lk(g_link_mu);
  return g_link;
}

}  // namespace mls::parallel
