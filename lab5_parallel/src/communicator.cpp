// The Communicator's plumbing (not student code): argument checks, the collective in progress,
// traffic counting, tracing, the header every message carries, and the public collectives that
// pick an algorithm and hand a flat contiguous buffer to it (the algorithms: collectives.cpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "async_queue.hpp"
#include "detail.hpp"
#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/shape.hpp"
#include "mls/parallel/comm.hpp"

namespace mls::parallel {

// ---- names ----------------------------------------------------------------------------------

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Prod: return "prod";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& name) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod})
    if (name == to_string(op)) return op;
  fail("parse_reduce_op: unknown reduce op '", name, "', expected sum, avg, max, min or prod");
}

const char* to_string(Algo a) {
  switch (a) {
    case Algo::Auto: return "auto";
    case Algo::Ring: return "ring";
    case Algo::Tree: return "tree";
    case Algo::RecursiveDoubling: return "recursive_doubling";
    case Algo::Rabenseifner: return "rabenseifner";
    case Algo::Pairwise: return "pairwise";
    case Algo::Linear: return "linear";
    case Algo::Native: return "native";
  }
  return "?";
}

Algo parse_algo(const std::string& name) {
  for (Algo a : {Algo::Auto, Algo::Ring, Algo::Tree, Algo::RecursiveDoubling, Algo::Rabenseifner, Algo::Pairwise,
                 Algo::Linear, Algo::Native})
    if (name == to_string(a)) return a;
  fail("parse_algo: unknown algorithm '", name,
       "', expected auto, ring, tree, recursive_doubling, rabenseifner, pairwise, linear or native");
}

Request::Request(std::function<void()> wait_fn, std::function<bool()> test_fn, std::string what)
    : wait_(std::move(wait_fn)), test_(std::move(test_fn)), what_(std::move(what)), wait_on_drop_(true) {}

Request::Request(Request&& o) noexcept
    : wait_(std::move(o.wait_)), test_(std::move(o.test_)), what_(std::move(o.what_)), waited_(o.waited_),
      wait_on_drop_(o.wait_on_drop_) {
  o.wait_ = nullptr;
  o.test_ = nullptr;
  o.waited_ = false;
  o.wait_on_drop_ = false;
}

Request& Request::operator=(Request&& o) noexcept {
  if (this != &o) {
    drop();
    wait_ = std::move(o.wait_);
    test_ = std::move(o.test_);
    what_ = std::move(o.what_);
    waited_ = o.waited_;
    wait_on_drop_ = o.wait_on_drop_;
    o.wait_ = nullptr;
    o.test_ = nullptr;
    o.waited_ = false;
    o.wait_on_drop_ = false;
  }
  return *this;
}

Request::~Request() { drop(); }

void Request::drop() noexcept {
  if (!wait_on_drop_ || !wait_) return;
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    std::fprintf(stderr,
                 "mls: warning: a %s request was destroyed without wait(); its destructor waits for it "
                 "(logged once per process)\n",
                 what_.c_str());
    std::fflush(stderr);
  }
  try {
    wait();
  } catch (...) {  // a destructor never throws: the error was the request's to report
  }
}

void Request::wait() {
  MLS_CHECK(!waited_, "Request::wait: ", what_.empty() ? std::string("the request") : what_,
            " was already waited on: wait() completes a request once");
  MLS_CHECK(wait_ != nullptr, "Request::wait: the request is empty (default-constructed or moved from)");
  waited_ = true;
  auto f = std::move(wait_);
  wait_ = nullptr;
  test_ = nullptr;
  f();
}

bool Request::test() {
  if (waited_) return true;
  MLS_CHECK(wait_ != nullptr, "Request::test: the request is empty (default-constructed or moved from)");
  return test_ ? test_() : false;
}

std::vector<std::int64_t> chunk_bounds(std::int64_t n, int parts) {
  MLS_CHECK(parts >= 1, "chunk_bounds: parts must be >= 1, got ", parts);
  MLS_CHECK(n >= 0, "chunk_bounds: n must be >= 0, got ", n);
  std::vector<std::int64_t> b(static_cast<std::size_t>(parts) + 1, 0);
  for (int r = 0; r < parts; ++r) b[r + 1] = b[r] + n / parts + (r < n % parts ? 1 : 0);
  return b;
}

double SimReport::max_modelled_seconds() const {
  double m = 0;
  for (double s : modelled_seconds) m = std::max(m, s);
  return m;
}

Rng rank_rng(std::uint64_t seed, const Communicator& comm) {
  return Rng(seed, "rank" + std::to_string(comm.rank()));
}

namespace detail {

const char* coll_name(int op) {
  switch (op) {
    case kUser: return "send/recv";
    case kBarrier: return "barrier";
    case kBroadcast: return "broadcast";
    case kReduce: return "reduce";
    case kAllreduce: return "allreduce";
    case kGather: return "gather";
    case kAllgather: return "allgather";
    case kScatter: return "scatter";
    case kReduceScatter: return "reduce_scatter";
    case kAllToAll: return "all_to_all";
    case kSplit: return "split";
    case kAllToAllv: return "all_to_allv";
    default: return "?";
  }
}

std::string header_mismatch(const Header& e, const Header& g, const char* what, int me, int src) {
  auto dt = [](std::int32_t d) { return d < 0 ? std::string("?") : std::string(dtype_name(static_cast<DType>(d))); };
  auto red = [](std::int32_t r) { return r < 0 ? "none" : to_string(static_cast<ReduceOp>(r)); };
  const std::string who = "rank " + std::to_string(me), from = "rank " + std::to_string(src);
  if (e.op != g.op || (e.seq >= 0 && e.seq != g.seq))
    return mls::detail::cat(what, ": ", who, " is in ", coll_name(e.op), " (call #", e.seq, ") but received a message of ",
               coll_name(g.op), " (call #", g.seq, ") from ", from,
               ": every rank must call the same collectives in the same order");
  if (e.dtype >= 0 && e.dtype != g.dtype)
    return mls::detail::cat(what, ": dtype mismatch: ", who, " has ", dt(e.dtype), " but ", from, " sent ", dt(g.dtype),
               " (every rank must pass the same dtype)");
  if (e.numel >= 0 && e.numel != g.numel)
    return mls::detail::cat(what, ": size mismatch: ", who, " has ", e.numel, " elements but ", from, " has ", g.numel,
               " (every rank must pass tensors of the same size)");
  if (e.root >= 0 && e.root != g.root)
    return mls::detail::cat(what, ": root mismatch: ", who, " has root ", e.root, " but ", from, " has root ", g.root,
               " (every rank must pass the same root)");
  if (e.reduce >= 0 && e.reduce != g.reduce)
    return mls::detail::cat(what, ": reduce op mismatch: ", who, " reduces with ", red(e.reduce), " but ", from, " with ",
               red(g.reduce), " (every rank must pass the same op)");
  if (e.bytes != g.bytes)
    return mls::detail::cat(what, ": message size mismatch: ", who, " expected ", e.bytes, " bytes from ", from, " but got ",
               g.bytes, " bytes");
  return "";
}

}  // namespace detail

using namespace detail;

// ---- the collective in progress -------------------------------------------------------------

struct Communicator::SpanLog {
  std::mutex mu;
  std::vector<Span> spans;
};

double Communicator::wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Communicator::thread_cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void Communicator::set_span_recording(bool on) {
  quiesce();
  if (on && !spans_) spans_ = std::make_shared<SpanLog>();
  if (!on) spans_.reset();
}

std::vector<Communicator::Span> Communicator::spans() const {
  if (!spans_) return {};
  std::lock_guard<std::mutex> lk(spans_->mu);
  return spans_->spans;
}

struct Communicator::Coll {
  const char* name = "";
  double t_start = 0;    // wall_now() at begin (span recording)
  double t_issued = 0;   // ... when it was issued (Span::issued)
  double cpu_start = 0;  // thread_cpu_now() at begin (span recording)
  int op = kUser;
  std::int64_t seq = 0, numel = 0;
  std::int32_t dtype = -1, root = -1, reduce = -1;
  int step = 0;
};

Communicator::Communicator(std::unique_ptr<Transport> t) : t_(std::move(t)) {
  MLS_CHECK(t_ != nullptr, "Communicator: the transport is null");
}
Communicator::Communicator(Communicator&& o) noexcept { *this = std::move(o); }
Communicator& Communicator::operator=(Communicator&& o) noexcept {
  if (this != &o) {
    stop_async();
    o.stop_async();
    t_ = std::move(o.t_);
    traffic_ = std::move(o.traffic_);
    cost_ = o.cost_;
    seq_ = o.seq_;
    seq_async_ = o.seq_async_;
    coll_ = std::move(o.coll_);
    tracing_ = o.tracing_;
    trace_ = std::move(o.trace_);
    spans_ = std::move(o.spans_);
  }
  return *this;
}
Communicator::~Communicator() { stop_async(); }

int Communicator::rank() const { return t_->rank(); }
int Communicator::size() const { return t_->size(); }
std::string Communicator::backend() const { return t_->backend(); }
double Communicator::modelled_seconds() const { return t_->modelled_seconds(); }

void Communicator::begin(const char* name, int op_id, const Tensor& t, int root, int reduce) {
  MLS_CHECK(coll_ == nullptr, name, ": called while ", coll_ ? coll_->name : "", " is in progress on rank ", rank());
  auto c = std::make_unique<Coll>();
  c->name = name;
  c->op = op_id;
  c->seq = seq_++;
  c->numel = t.numel();
  c->dtype = static_cast<std::int32_t>(t.dtype());
  c->root = root;
  c->reduce = reduce;
  if (spans_) c->t_start = wall_now(), c->cpu_start = thread_cpu_now(), c->t_issued = async_running_ ? issued_wall_ : c->t_start;
  coll_ = std::move(c);
  traffic_.by_op[name].calls += 1;
  traffic_.total.calls += 1;
  t_->lane_begin(async_running_ ? issued_at_ : -1.0);
  if (!async_running_) t_->order_after_compute(-1);  // asynchronous: AsyncQueue::run did, with its index
}

void Communicator::end() noexcept {
  if (!coll_) return;
  if (spans_) {
    std::lock_guard<std::mutex> lk(spans_->mu);
    spans_->spans.push_back(
        {coll_->name, coll_->t_start, wall_now(), coll_->numel, coll_->dtype, thread_cpu_now() - coll_->cpu_start,
         coll_->t_issued});
  }
  coll_.reset();
  finished_at_ = t_->lane_end();
  if (!async_running_) t_->lane_join(finished_at_);  // blocking: the caller waits for it now
}

Header Communicator::coll_header(std::int64_t bytes) const {
  Header h;
  h.bytes = bytes;
  h.dtype = coll_->dtype;
  h.op = coll_->op;
  h.seq = coll_->seq;
  h.numel = coll_->numel;
  h.root = coll_->root;
  h.reduce = coll_->reduce;
  h.step = coll_->step;
  return h;
}

void Communicator::count_send(std::int64_t bytes, bool step) {
  const std::string op = coll_ ? coll_->name : "send";
  for (Traffic::Counts* c : {&traffic_.total, &traffic_.by_op[op]}) {
    c->messages_sent += 1;
    c->bytes_sent += bytes;
    c->steps += step ? 1 : 0;
  }
}

void Communicator::count_recv(std::int64_t bytes, bool step) {
  const std::string op = coll_ ? coll_->name : "recv";
  for (Traffic::Counts* c : {&traffic_.total, &traffic_.by_op[op]}) {
    c->messages_recv += 1;
    c->bytes_recv += bytes;
    c->steps += step ? 1 : 0;
  }
}

namespace {

std::int64_t nbytes(const Tensor& t) { return t.numel() * static_cast<std::int64_t>(t.itemsize()); }

void check_part(const Tensor& t, const char* what) {
  MLS_CHECK(t.defined(), what, ": the tensor is undefined");
  MLS_CHECK(t.is_contiguous(), what, ": the tensor must be contiguous (shape ", shape_str(t.shape()), ")");
}

void check_peer(int peer, int size, const char* what, const char* role) {
  MLS_CHECK(peer >= 0 && peer < size, what, ": ", role, " rank ", peer, " is out of range [0, ", size, ")");
}

void check_tag(int tag, const char* what) {
  MLS_CHECK(tag >= 0 && tag <= Communicator::kMaxUserTag, what, ": tag ", tag, " is out of range [0, ",
            Communicator::kMaxUserTag, "]");
}

void check_reducible(const Tensor& t, const char* what) {
  MLS_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::Float64 || t.dtype() == DType::Int64 ||
                t.dtype() == DType::Int32,
            what, ": cannot reduce dtype ", t.dtype(), ", expected float32, float64, int32 or int64");
}

/// A flat contiguous working buffer of `t`: `t` itself (viewed 1-D) when contiguous, else a copy.
Tensor flat_of(const Tensor& t) {
  Tensor c = t.is_contiguous() ? t : t.compact();
  return c.view({c.numel()});
}

/// Divides every element by `n` (Avg); integer dtypes truncate.
void divide_by(Tensor& flat, int n) {
  dispatch(flat.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      T* p = flat.data<T>();
      const std::int64_t k = flat.numel();
      for (std::int64_t i = 0; i < k; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(n));
    }
  });
}

/// RAII: ends the collective in progress when the scope is left (also by an exception).
struct CollScope {
  Communicator* c;
  ~CollScope() { c->end(); }
};

}  // namespace

// ---- primitives the algorithms use ------------------------------------------------------------

void Communicator::coll_send(const Tensor& part, int dst) {
  MLS_CHECK(coll_ != nullptr, "coll_send: called outside a collective");
  check_part(part, coll_->name);
  check_peer(dst, size(), coll_->name, "destination");
  ++coll_->step;
  const std::int64_t b = nbytes(part);
  t_->send(b ? part.data_ptr() : nullptr, coll_header(b), dst, kCollTag);
  count_send(b, true);
}

void Communicator::coll_recv(Tensor& part, int src) {
  MLS_CHECK(coll_ != nullptr, "coll_recv: called outside a collective");
  check_part(part, coll_->name);
  check_peer(src, size(), coll_->name, "source");
  ++coll_->step;
  const std::int64_t b = nbytes(part);
  Header h = t_->recv(b ? part.data_ptr() : nullptr, coll_header(b), src, kCollTag, coll_->name);
  count_recv(b, true);
  if (tracing_)
    trace_.push_back({coll_->name, h.step, src, rank(), b, h.t_depart, t_->modelled_seconds()});
}

void Communicator::coll_sendrecv(const Tensor& out, int dst, Tensor& in, int src) {
  MLS_CHECK(coll_ != nullptr, "coll_sendrecv: called outside a collective");
  check_part(out, coll_->name);
  check_part(in, coll_->name);
  check_peer(dst, size(), coll_->name, "destination");
  check_peer(src, size(), coll_->name, "source");
  ++coll_->step;
  const std::int64_t bo = nbytes(out), bi = nbytes(in);
  Request r = t_->isend(bo ? out.data_ptr() : nullptr, coll_header(bo), dst, kCollTag);
  Header h = t_->recv(bi ? in.data_ptr() : nullptr, coll_header(bi), src, kCollTag, coll_->name);
  r.wait();
  count_send(bo, true);
  count_recv(bi, false);
  if (tracing_)
    trace_.push_back({coll_->name, h.step, src, rank(), bi, h.t_depart, t_->modelled_seconds()});
}

void Communicator::reduce_into(Tensor& acc, const Tensor& in, ReduceOp op) {
  MLS_CHECK(acc.dtype() == in.dtype() && acc.numel() == in.numel(), "reduce_into: acc is ", acc.dtype(), "[",
            acc.numel(), "] but in is ", in.dtype(), "[", in.numel(), "]");
  check_part(acc, "reduce_into");
  check_part(in, "reduce_into");
  const std::int64_t n = acc.numel();
  dispatch(acc.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      fail("reduce_into: cannot reduce dtype bool");
    } else {
      T* a = acc.data<T>();
      const T* b = in.data<T>();
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          for (std::int64_t i = 0; i < n; ++i) a[i] = static_cast<T>(a[i] + b[i]);
          break;
        case ReduceOp::Prod:
          for (std::int64_t i = 0; i < n; ++i) a[i] = static_cast<T>(a[i] * b[i]);
          break;
        case ReduceOp::Max:
          for (std::int64_t i = 0; i < n; ++i) a[i] = b[i] > a[i] ? b[i] : a[i];
          break;
        case ReduceOp::Min:
          for (std::int64_t i = 0; i < n; ++i) a[i] = b[i] < a[i] ? b[i] : a[i];
          break;
      }
    }
  });
  t_->charge_compute(n);
}

// ---- point to point ---------------------------------------------------------------------------

namespace {
/// The checks and the header of a user message (`role`: "destination" or "source").
Header user_header(const Tensor& t, int peer, int tag, int size, const char* what, const char* role) {
  check_part(t, what);
  check_peer(peer, size, what, role);
  check_tag(tag, what);
  Header h;
  h.bytes = nbytes(t);
  h.dtype = static_cast<std::int32_t>(t.dtype());
  h.numel = t.numel();
  return h;
}
}  // namespace

void Communicator::send(const Tensor& t, int dst, int tag) {
  quiesce();
  const Header h = user_header(t, dst, tag, size(), "send", "destination");
  t_->send(h.bytes ? t.data_ptr() : nullptr, h, dst, tag);
  count_send(h.bytes, true);
}

void Communicator::recv(Tensor& t, int src, int tag) {
  quiesce();
  const Header e = user_header(t, src, tag, size(), "recv", "source");
  t_->recv(e.bytes ? t.data_ptr() : nullptr, e, src, tag, "recv");
  count_recv(e.bytes, true);
}

Request Communicator::isend(const Tensor& t, int dst, int tag) {
  quiesce();
  const Header h = user_header(t, dst, tag, size(), "isend", "destination");
  Request r = t_->isend(h.bytes ? t.data_ptr() : nullptr, h, dst, tag);
  count_send(h.bytes, true);
  return r;
}

Request Communicator::irecv(Tensor& t, int src, int tag) {
  quiesce();
  const Header e = user_header(t, src, tag, size(), "irecv", "source");
  Request r = t_->irecv(e.bytes ? t.data_ptr() : nullptr, e, src, tag, "irecv");
  count_recv(e.bytes, true);
  return r;
}

// ---- collectives: checks, algorithm choice, flat buffers --------------------------------------

Algo Communicator::choose(const std::string& collective, std::int64_t bytes) const {
  const std::string best = cheapest(cost_, collective, size(), bytes);
  return parse_algo(best);
}

void ping_pong(Communicator& c, Tensor& t, int iters) {
  for (int i = 0; i < iters; ++i) {
    if (c.rank() == 0) {
      c.send(t, 1);
      c.recv(t, 1);
    } else if (c.rank() == 1) {
      c.recv(t, 0);
      c.send(t, 0);
    }
  }
}

void Communicator::barrier() {
  quiesce();
  Tensor none = Tensor::empty({0}, DType::Int32);
  begin("barrier", kBarrier, none, -1, -1);
  CollScope s{this};
  if (size() > 1) barrier_dissemination();
}

void Communicator::broadcast(Tensor& t, int root, Algo algo) {
  quiesce();
  MLS_CHECK(t.defined(), "broadcast: the tensor is undefined");
  check_peer(root, size(), "broadcast", "root");
  begin("broadcast", kBroadcast, t, root, -1);
  CollScope s{this};
  Tensor buf = flat_of(t);
  if (algo == Algo::Auto) algo = choose("broadcast", nbytes(buf));
  switch (algo) {
    case Algo::Tree: broadcast_tree(buf, root); break;
    case Algo::Linear: broadcast_linear(buf, root); break;
    case Algo::Native:
      MLS_CHECK(t_->native_broadcast(buf.numel() ? buf.data_ptr() : nullptr, nbytes(buf), root),
                "broadcast: the ", backend(), " backend has no native broadcast");
      break;
    default: fail("broadcast: algorithm ", to_string(algo), " is not one of tree, linear, native, auto");
  }
  if (!t.is_contiguous()) t.copy_(buf.view(t.shape()));
}

void Communicator::reduce(Tensor& t, ReduceOp op, int root, Algo algo) {
  quiesce();
  MLS_CHECK(t.defined(), "reduce: the tensor is undefined");
  check_reducible(t, "reduce");
  check_peer(root, size(), "reduce", "root");
  begin("reduce", kReduce, t, root, static_cast<int>(op));
  CollScope s{this};
  Tensor buf = flat_of(t);
  if (algo == Algo::Auto) algo = Algo::Tree;
  MLS_CHECK(algo == Algo::Tree, "reduce: algorithm ", to_string(algo), " is not one of tree, auto");
  reduce_tree(buf, op, root);
  if (op == ReduceOp::Avg && rank() == root) divide_by(buf, size());
  if (!t.is_contiguous()) t.copy_(buf.view(t.shape()));
}

void Communicator::allreduce(Tensor& t, ReduceOp op, Algo algo) {
  quiesce();
  MLS_CHECK(t.defined(), "allreduce: the tensor is undefined");
  check_reducible(t, "allreduce");
  begin("allreduce", kAllreduce, t, -1, static_cast<int>(op));
  CollScope s{this};
  Tensor buf = flat_of(t);
  if (algo == Algo::Auto) algo = choose("allreduce", nbytes(buf));
  switch (algo) {
    case Algo::Ring: allreduce_ring(buf, op); break;
    case Algo::RecursiveDoubling: allreduce_recursive_doubling(buf, op); break;
    case Algo::Rabenseifner: allreduce_rabenseifner(buf, op); break;
    case Algo::Native:
      MLS_CHECK(t_->native_allreduce(buf.numel() ? buf.data_ptr() : nullptr, buf.numel(), buf.dtype(),
                                     op == ReduceOp::Avg ? ReduceOp::Sum : op),
                "allreduce: the ", backend(), " backend has no native allreduce");
      break;
    default:
      fail("allreduce: algorithm ", to_string(algo), " is not one of ring, recursive_doubling, rabenseifner, native, auto");
  }
  if (op == ReduceOp::Avg) divide_by(buf, size());
  if (!t.is_contiguous()) t.copy_(buf.view(t.shape()));
}

namespace {
Shape stacked(int n, const Shape& s) {
  Shape out{n};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}
}  // namespace

Tensor Communicator::gather(const Tensor& t, int root) {
  quiesce();
  MLS_CHECK(t.defined(), "gather: the tensor is undefined");
  check_peer(root, size(), "gather", "root");
  begin("gather", kGather, t, root, -1);
  CollScope s{this};
  Tensor mine = flat_of(t);
  const auto bounds = chunk_bounds(t.numel() * size(), size());
  Tensor out = rank() == root ? Tensor::empty(stacked(size(), t.shape()), t.dtype()) : Tensor::empty({0}, t.dtype());
  Tensor flat = out.view({out.numel()});
  gather_linear(mine, flat, bounds, root);
  return out;
}

Tensor Communicator::allgather(const Tensor& t, Algo algo) {
  quiesce();
  MLS_CHECK(t.defined(), "allgather: the tensor is undefined");
  begin("allgather", kAllgather, t, -1, -1);
  CollScope s{this};
  Tensor out = Tensor::empty(stacked(size(), t.shape()), t.dtype());
  Tensor flat = out.view({out.numel()});
  const auto bounds = chunk_bounds(out.numel(), size());
  flat.slice(0, bounds[rank()], bounds[rank() + 1]).copy_(flat_of(t));
  if (algo == Algo::Auto) algo = Algo::Ring;
  MLS_CHECK(algo == Algo::Ring, "allgather: algorithm ", to_string(algo), " is not one of ring, auto");
  allgather_ring(flat, bounds);
  return out;
}

void Communicator::allgather_inplace(Tensor& buf, const std::vector<std::int64_t>& bounds) {
  quiesce();
  MLS_CHECK(buf.defined() && buf.ndim() == 1 && buf.is_contiguous(),
            "allgather_inplace: the buffer must be a defined contiguous 1-D tensor, got ",
            buf.defined() ? shape_str(buf.shape()) : std::string("undefined"));
  MLS_CHECK(static_cast<int>(bounds.size()) == size() + 1 && bounds.front() == 0 &&
                bounds.back() == buf.numel() && std::is_sorted(bounds.begin(), bounds.end()),
            "allgather_inplace: bounds must be ", size() + 1, " sorted offsets from 0 to ", buf.numel(),
            ", got ", bounds.size(), " offsets");
  begin("allgather", kAllgather, buf, -1, -1);
  CollScope s{this};
  allgather_ring(buf, bounds);
}

Tensor Communicator::scatter(const Tensor& t, int root) {
  quiesce();
  MLS_CHECK(t.defined(), "scatter: the tensor is undefined");
  MLS_CHECK(t.ndim() >= 1 && t.size(0) == size(), "scatter: the tensor must have shape [", size(),
            ", ...] (one row per rank), got ", shape_str(t.shape()));
  check_peer(root, size(), "scatter", "root");
  begin("scatter", kScatter, t, root, -1);
  CollScope s{this};
  Shape row(t.shape().begin() + 1, t.shape().end());
  Tensor out = Tensor::empty(row, t.dtype());
  Tensor mine = out.view({out.numel()});
  const auto bounds = chunk_bounds(t.numel(), size());
  Tensor all = rank() == root ? flat_of(t) : Tensor::empty({0}, t.dtype());
  scatter_linear(all, mine, bounds, root);
  return out;
}

Tensor Communicator::reduce_scatter(const Tensor& t, ReduceOp op, Algo algo) {
  quiesce();
  MLS_CHECK(t.defined(), "reduce_scatter: the tensor is undefined");
  check_reducible(t, "reduce_scatter");
  MLS_CHECK(t.ndim() >= 1, "reduce_scatter: the tensor must have at least one dimension (split along dim 0), got a scalar");
  begin("reduce_scatter", kReduceScatter, t, -1, static_cast<int>(op));
  CollScope s{this};
  const std::int64_t rows = t.size(0), row = rows ? t.numel() / rows : 0;
  const auto row_bounds = chunk_bounds(rows, size());
  std::vector<std::int64_t> bounds(row_bounds.size());
  for (std::size_t i = 0; i < bounds.size(); ++i) bounds[i] = row_bounds[i] * row;
  Tensor buf = t.clone().compact();
  buf = buf.view({buf.numel()});
  if (algo == Algo::Auto) algo = Algo::Ring;
  MLS_CHECK(algo == Algo::Ring, "reduce_scatter: algorithm ", to_string(algo), " is not one of ring, auto");
  reduce_scatter_ring(buf, bounds, op);
  Shape shape = t.shape();
  shape[0] = row_bounds[rank() + 1] - row_bounds[rank()];
  Tensor out = buf.slice(0, bounds[rank()], bounds[rank() + 1]).clone();
  if (op == ReduceOp::Avg) divide_by(out, size());
  return out.view(shape);
}

Tensor Communicator::all_to_all(const Tensor& t) {
  quiesce();
  MLS_CHECK(t.defined(), "all_to_all: the tensor is undefined");
  MLS_CHECK(t.ndim() >= 1 && t.size(0) == size(), "all_to_all: the tensor must have shape [", size(),
            ", ...] (one row per rank), got ", shape_str(t.shape()));
  begin("all_to_all", kAllToAll, t, -1, -1);
  CollScope s{this};
  Tensor in = flat_of(t);
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  Tensor flat = out.view({out.numel()});
  all_to_all_pairwise(in, flat, chunk_bounds(t.numel(), size()));
  return out;
}

Tensor Communicator::all_to_allv(const Tensor& t, const std::vector<std::int64_t>& send_counts,
                                 const std::vector<std::int64_t>& recv_counts, Algo algo) {
  quiesce();
  MLS_CHECK(t.defined(), "all_to_allv: the tensor is undefined");
  MLS_CHECK(t.ndim() == 1, "all_to_allv: the tensor must be 1-D, got shape ", shape_str(t.shape()));
  const auto n = static_cast<std::size_t>(size());
  MLS_CHECK(send_counts.size() == n && recv_counts.size() == n, "all_to_allv: ", send_counts.size(),
            " send counts and ", recv_counts.size(), " receive counts, expected one per rank (", n, ")");
  auto offsets = [&](const std::vector<std::int64_t>& c, const char* which) {
    std::vector<std::int64_t> b(n + 1, 0);
    for (std::size_t r = 0; r < n; ++r) {
      MLS_CHECK(c[r] >= 0, "all_to_allv: ", which, "[", r, "] = ", c[r], " on rank ", rank(), ", expected >= 0");
      b[r + 1] = b[r] + c[r];
    }
    return b;
  };
  const std::vector<std::int64_t> sb = offsets(send_counts, "send_counts"), rb = offsets(recv_counts, "recv_counts");
  MLS_CHECK(sb[n] == t.numel(), "all_to_allv: the send counts sum to ", sb[n], " on rank ", rank(),
            ", the tensor has ", t.numel(), " elements");
  const auto me = static_cast<std::size_t>(rank());
  MLS_CHECK(send_counts[me] == recv_counts[me], "all_to_allv: the counts disagree between ranks: rank ", rank(),
            " sends itself send_counts[", me, "] = ", send_counts[me], " elements but expects recv_counts[", me,
            "] = ", recv_counts[me]);
  begin("all_to_allv", kAllToAllv, t, -1, -1);
  coll_->numel = -1;  // every rank's total differs: the message sizes are checked one by one
  CollScope s{this};
  Tensor in = flat_of(t);
  Tensor out = Tensor::empty({rb[n]}, t.dtype());
  if (algo == Algo::Auto) algo = Algo::Pairwise;
  if (algo == Algo::Native) {
    const std::int64_t item = static_cast<std::int64_t>(t.itemsize());
    std::vector<std::int64_t> sbytes(n), rbytes(n);
    for (std::size_t r = 0; r < n; ++r) sbytes[r] = send_counts[r] * item, rbytes[r] = recv_counts[r] * item;
    MLS_CHECK(t_->native_all_to_allv(in.numel() ? in.data_ptr() : nullptr, sbytes,
                                     out.numel() ? out.data_ptr() : nullptr, rbytes),
              "all_to_allv: the ", backend(), " backend has no native all_to_allv");
    for (std::size_t r = 0; r < n; ++r)  // the payload MPI delivers, counted as ours
      if (static_cast<int>(r) != rank()) count_send(sbytes[r], true), count_recv(rbytes[r], false);
    return out;
  }
  MLS_CHECK(algo == Algo::Pairwise, "all_to_allv: algorithm ", to_string(algo), " is not one of pairwise, native, auto");
  try {
    all_to_allv_pairwise(in, sb, out, rb);
  } catch (const NotImplemented&) {
    throw;
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("message size mismatch") == std::string::npos) throw;
    fail("all_to_allv: the counts disagree between ranks (send_counts[s] on rank r must equal recv_counts[r] on rank "
         "s): ", what);
  }
  return out;
}

Communicator Communicator::split(int color, int key) {
  quiesce();
  // Every rank learns every rank's (color, key) by a direct exchange (plumbing, not an algorithm
  // a student writes), checks them, and asks the transport for the sub-transport.
  Tensor mine = Tensor::from_vector(std::vector<std::int64_t>{color, key});
  begin("split", kSplit, mine, -1, -1);
  std::vector<int> colors(size()), keys(size());
  {
    CollScope s{this};
    Tensor all = Tensor::empty({size(), 2}, DType::Int64);
    std::vector<Request> sends;
    for (int r = 0; r < size(); ++r)
      if (r != rank()) {
        sends.push_back(t_->isend(mine.data_ptr(), coll_header(16), r, kCollTag));
        count_send(16, false);
      }
    for (int r = 0; r < size(); ++r) {
      Tensor row = all.select(0, r);
      if (r == rank()) {
        row.copy_(mine);
      } else {
        t_->recv(row.data_ptr(), coll_header(16), r, kCollTag, "split");
        count_recv(16, false);
      }
    }
    for (auto& q : sends) q.wait();
    const std::int64_t* p = all.data<std::int64_t>();
    for (int r = 0; r < size(); ++r) {
      colors[r] = static_cast<int>(p[2 * r]);
      keys[r] = static_cast<int>(p[2 * r + 1]);
    }
  }
  for (int r = 0; r < size(); ++r)
    MLS_CHECK(colors[r] >= 0, "split: rank ", r, " passed color ", colors[r], ", expected a color >= 0");
  Communicator child(t_->split(color, key, colors, keys));
  child.cost_ = cost_;
  child.tracing_ = tracing_;
  return child;
}

// ---- asynchronous collectives: the queue and the communication thread (the loop: async.cpp) ----

namespace {
/// The communicator whose communication thread this is (null on every other thread).
thread_local const Communicator* tl_progress_of = nullptr;

/// What the latest communication thread got from prefer_prompt_wakeups.
std::atomic<const char*> g_comm_thread_policy{"none started"};

/// Asks the scheduler to run the calling thread (the communication thread) as soon as it wakes.
/// It shares its rank's core with the compute it hides behind and wakes often (a collective
/// issued, a poll after a nap, a paced message due) for a few microseconds of work; every wake-up
/// that waits for the compute thread's time slice to end (milliseconds) delays the collective by
/// that much, and a step of many small collectives (ZeRO-3's per-unit all-gathers and
/// reduce-scatters) then hides nothing. Measured on a busy 2-core machine (other builds running;
/// a thread sleeping 200 us in a loop next to a spinning one on the same core): p50 16 us late
/// whatever the policy, but p99 4-5 ms late as SCHED_OTHER (with or without the short slice
/// below), 37 us as SCHED_FIFO. Not yet measured on a quiet machine.
///   `realtime` (the MPI backend, unless MLS_COMM_THREAD_RT=0): SCHED_FIFO priority 1 where the
///   process may (root, CAP_SYS_NICE or RLIMIT_RTPRIO >= 1): it preempts the compute the moment
///   it wakes. Safe because it never spins for long: its waits poll for 20 us, then sleep
///   (mpi_transport.cpp), and the emulated link's pacing sleeps; the kernel's real-time
///   throttling (sched_rt_runtime_us) bounds it anyway. Not for NCCL (cudaStreamSynchronize
///   spins) or the simulated ranks (their threads block on condition variables; no core to share).
///   Otherwise, or where refused: SCHED_OTHER with a 100 us slice (sched_setattr's sched_runtime,
///   Linux 6.12+; older kernels ignore it): an earlier deadline, the same priority and share of
///   the CPU; the thread's nice value is kept (sched_setattr sets it too).
/// Best effort: where everything is refused, nothing changes. Returns the policy it got ("fifo",
/// "slice", "default").
const char* prefer_prompt_wakeups(bool realtime) {
#if defined(__linux__) && defined(SYS_sched_setattr)
  if (realtime) {
    const char* env = std::getenv("MLS_COMM_THREAD_RT");
    sched_param sp{};
    sp.sched_priority = 1;
    if ((!env || std::string(env) != "0") && pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0) return "fifo";
  }
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  struct {
    std::uint32_t size, sched_policy;
    std::uint64_t sched_flags;
    std::int32_t sched_nice;
    std::uint32_t sched_priority;
    std::uint64_t sched_runtime, sched_deadline, sched_period;
  } attr{};
  attr.size = sizeof attr;  // SCHED_ATTR_SIZE_VER0: 48 bytes
  attr.sched_policy = 0;    // SCHED_OTHER
  attr.sched_nice = errno == 0 ? nice : 0;  // keep the nice value (under `nice -n`, CI's)
  attr.sched_runtime = 100'000;  // ns: the slice
  if (syscall(SYS_sched_setattr, 0, &attr, 0u) == 0) return "slice";
#else
  (void)realtime;
#endif
  return "default";
}
}  // namespace

const char* Communicator::comm_thread_policy() { return g_comm_thread_policy.load(); }

std::shared_ptr<AsyncOp> Communicator::AsyncQueue::next() {
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return !queued.empty() || stopping; });
  if (queued.empty()) return nullptr;
  current = queued.front();
  queued.pop_front();
  return current;
}

std::exception_ptr Communicator::AsyncQueue::failure() {
  std::lock_guard<std::mutex> lk(mu);
  return failed;
}

void Communicator::AsyncQueue::run(Communicator& c, AsyncOp& op) {
  struct Reset {
    Communicator& c;
    ~Reset() { c.async_running_ = false, c.issued_at_ = -1.0; }
  } reset{c};
  c.async_running_ = true;
  c.issued_at_ = op.issued_at;
  c.issued_wall_ = op.issued_wall;
  const mem::TagScope as_issuer(op.mem_tag, op.mem_rank);  // memory counted as the issuer's
  const ThreadRankScope as_rank(op.thread_rank);
  if (transport) transport->order_after_compute(op.index);  // after the compute issued before it (NCCL)
  op.run();
  op.finished_at = c.finished_at_;
}

void Communicator::AsyncQueue::complete(AsyncOp& op, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (op.done) return;
    op.done = true;
    op.error = error;
    if (error && !failed) failed = error;
    if (!error) last_finished = std::max(last_finished, op.finished_at);
    --in_flight;
    if (current.get() == &op) current.reset();
  }
  cv.notify_all();
}

void Communicator::AsyncQueue::abandon(std::exception_ptr why) {
  std::vector<std::shared_ptr<AsyncOp>> left;
  {
    std::lock_guard<std::mutex> lk(mu);
    dead = true;
    if (current) left.push_back(current);
    left.insert(left.end(), queued.begin(), queued.end());
    queued.clear();
    if (!why && !left.empty())
      why = std::make_exception_ptr(Error(mls::detail::cat(
          "progress_loop: the communication thread's loop returned with ", left.size(),
          " collective(s) not complete (it must run until next() returns nullptr)")));
    if (why && !failed) failed = why;
  }
  for (auto& op : left) complete(*op, failed);
}

Request Communicator::enqueue(const char* name, std::function<void()> run) {
  auto op = std::make_shared<AsyncOp>();
  op->name = name;
  op->run = std::move(run);
  op->issued_at = t_->modelled_seconds();
  op->issued_wall = wall_now();
  op->mem_tag = mem::current_tag();
  op->mem_rank = mem::current_rank();
  op->thread_rank = this_thread_rank();
  if (!t_->thread_safe()) {  // no communication thread possible: run it now (same result, no overlap)
    quiesce();
    try {
      op->run();
    } catch (...) {
      op->error = std::current_exception();
    }
    op->done = true;
    return Request([op] {
      if (op->error) std::rethrow_exception(op->error);
    }, [] { return true; }, name);
  }
  if (!async_) {
    async_ = std::make_shared<AsyncQueue>();
    async_->transport = t_.get();
    AsyncQueue* q = async_.get();
    const bool realtime = t_->backend() == "mpi";
    q->worker = std::thread([this, q, realtime] {
      tl_progress_of = this;
      detail::this_thread_waits_nap() = true;
      g_comm_thread_policy.store(prefer_prompt_wakeups(realtime));
      std::exception_ptr why;
      try {
        progress_loop(*q);
      } catch (...) {
        why = std::current_exception();
      }
      q->abandon(why);
    });
  }
  std::shared_ptr<AsyncQueue> q = async_;
  {
    std::lock_guard<std::mutex> lk(q->mu);
    op->index = seq_async_++;
    ++q->in_flight;
    if (q->dead) {
      op->done = true;
      op->error = q->failed ? q->failed
                            : std::make_exception_ptr(Error(mls::detail::cat(name, ": the communication thread has stopped")));
      --q->in_flight;
    } else {
      t_->async_issued(op->index);  // NCCL: an event on the compute stream, where it stands now
      q->queued.push_back(op);
    }
  }
  q->cv.notify_all();
  return Request(
      [q, op] {
        std::unique_lock<std::mutex> lk(q->mu);
        q->cv.wait(lk, [&] { return op->done; });
        Transport* t = q->transport;
        lk.unlock();
        if (op->error) std::rethrow_exception(op->error);
        if (t) t->lane_join(op->finished_at);
      },
      [q, op] {
        std::lock_guard<std::mutex> lk(q->mu);
        return op->done;
      },
      mls::detail::cat(name, " #", op->index));
}

void Communicator::quiesce() {
  if (!async_ || tl_progress_of == this) return;
  std::unique_lock<std::mutex> lk(async_->mu);
  async_->cv.wait(lk, [&] { return async_->in_flight == 0; });
  if (async_->failed) {
    std::exception_ptr e = async_->failed;
    lk.unlock();
    std::rethrow_exception(e);
  }
}

void Communicator::wait_all() {
  if (!async_) return;
  MLS_CHECK(tl_progress_of != this, "wait_all: called from the communication thread");
  quiesce();
  std::lock_guard<std::mutex> lk(async_->mu);
  t_->lane_join(async_->last_finished);
}

int Communicator::in_flight() const {
  if (!async_) return 0;
  std::lock_guard<std::mutex> lk(async_->mu);
  return async_->in_flight;
}

void Communicator::stop_async() noexcept {
  if (!async_) return;
  {
    std::lock_guard<std::mutex> lk(async_->mu);
    async_->stopping = true;
  }
  async_->cv.notify_all();
  if (async_->worker.joinable()) async_->worker.join();
  {
    std::lock_guard<std::mutex> lk(async_->mu);
    async_->transport = nullptr;
  }
  async_.reset();
}

namespace {
void check_algo_of(const char* what, Algo algo, std::initializer_list<Algo> ok, const char* names) {
  for (Algo a : ok)
    if (a == algo) return;
  fail(what, ": algorithm ", to_string(algo), " is not one of ", names);
}
}  // namespace

Request Communicator::iallreduce(Tensor& t, ReduceOp op, Algo algo) {
  MLS_CHECK(t.defined(), "iallreduce: the tensor is undefined");
  check_reducible(t, "iallreduce");
  check_algo_of("iallreduce", algo, {Algo::Auto, Algo::Ring, Algo::RecursiveDoubling, Algo::Rabenseifner, Algo::Native},
                "ring, recursive_doubling, rabenseifner, native, auto");
  return enqueue("iallreduce", [this, t, op, algo]() mutable { allreduce(t, op, algo); });
}

Request Communicator::ibroadcast(Tensor& t, int root, Algo algo) {
  MLS_CHECK(t.defined(), "ibroadcast: the tensor is undefined");
  check_peer(root, size(), "ibroadcast", "root");
  check_algo_of("ibroadcast", algo, {Algo::Auto, Algo::Tree, Algo::Linear, Algo::Native}, "tree, linear, native, auto");
  return enqueue("ibroadcast", [this, t, root, algo]() mutable { broadcast(t, root, algo); });
}

Request Communicator::ireduce_scatter(const Tensor& t, Tensor& out, ReduceOp op, Algo algo) {
  MLS_CHECK(t.defined(), "ireduce_scatter: the tensor is undefined");
  check_reducible(t, "ireduce_scatter");
  MLS_CHECK(t.ndim() >= 1, "ireduce_scatter: the tensor must have at least one dimension (split along dim 0), got a scalar");
  check_algo_of("ireduce_scatter", algo, {Algo::Auto, Algo::Ring}, "ring, auto");
  const auto rows = chunk_bounds(t.size(0), size());
  Shape shape = t.shape();
  shape[0] = rows[rank() + 1] - rows[rank()];
  out = Tensor::empty(shape, t.dtype());
  return enqueue("ireduce_scatter", [this, t, o = out, op, algo]() mutable { o.copy_(reduce_scatter(t, op, algo)); });
}

Request Communicator::iallgather(const Tensor& t, Tensor& out, Algo algo) {
  MLS_CHECK(t.defined(), "iallgather: the tensor is undefined");
  check_algo_of("iallgather", algo, {Algo::Auto, Algo::Ring}, "ring, auto");
  out = Tensor::empty(stacked(size(), t.shape()), t.dtype());
  return enqueue("iallgather", [this, t, o = out, algo]() mutable { o.copy_(allgather(t, algo)); });
}

Request Communicator::iallgather_inplace(Tensor& buf, const std::vector<std::int64_t>& bounds) {
  MLS_CHECK(buf.defined() && buf.ndim() == 1 && buf.is_contiguous(),
            "iallgather_inplace: the buffer must be a defined contiguous 1-D tensor, got ",
            buf.defined() ? shape_str(buf.shape()) : std::string("undefined"));
  MLS_CHECK(static_cast<int>(bounds.size()) == size() + 1 && bounds.front() == 0 &&
                bounds.back() == buf.numel() && std::is_sorted(bounds.begin(), bounds.end()),
            "iallgather_inplace: bounds must be ", size() + 1, " sorted offsets from 0 to ", buf.numel(),
            ", got ", bounds.size(), " offsets");
  return enqueue("iallgather_inplace", [this, buf, bounds]() mutable { allgather_inplace(buf, bounds); });
}

}  // namespace mls::parallel
