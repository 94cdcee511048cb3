// The simulated backend (plumbing, not student code): N ranks as threads of one process.
//
// Every rank has a mailbox; a message is matched by (communicator context, source, tag) in
// FIFO order. Sends are buffered (the payload is copied into the destination's mailbox), so a
// send never blocks. A receive waits until its message arrives, the world is aborted (another
// rank failed: it throws at once) or the timeout passes (it aborts the world and throws).
//
// The simulated clock (α-β-γ): a send of m bytes leaves at the sender's clock and keeps the
// sender busy for α + m·β; a receive completes at max(receiver's clock, max(departure,
// receiver's inbound link free) + α + m·β) — the inbound link serialises messages arriving at
// one rank; reducing k elements costs k·γ. Every update happens in the program order of the
// rank that owns the clock, so modelled times are deterministic.
//
// Two lanes per rank (asynchronous collectives): the compute lane (clock, what
// modelled_seconds() reports: user messages and Communicator::model_compute advance it) and one
// communication lane per communicator (lane_: every message and reduction of a collective).
// A collective starts on its lane at max(lane, the compute-lane time it was issued at); a
// blocking one joins the compute lane at once (compute = max(compute, lane)), an asynchronous
// one when its request is waited on: compute issued in between overlaps it, so the modelled
// step is the overlapped schedule, not the sum. With only blocking calls the lanes coincide
// (the model of before). The inbound link stays one per rank (shared by its communicators).
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <tuple>

#include "detail.hpp"
#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/timer.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/parallel/link.hpp"
#include "mls/parallel/sim.hpp"

namespace mls::parallel {

namespace {

/// A payload buffer (uninitialised bytes), recycled through the world's pool.
struct Buffer {
  std::unique_ptr<std::byte[]> p;
  std::size_t capacity = 0;
};

struct Message {
  Header h;
  Buffer data;
};

using Key = std::tuple<std::uint64_t, int, int>;  // (context, source global rank, tag)

struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<Key, std::deque<Message>> queues;
};

}  // namespace

struct SimWorld {
  int n = 0;
  SimOptions opts;
  std::vector<std::unique_ptr<Mailbox>> boxes;
  std::vector<double> clock, inbound;  // per global rank: clock touched only by that rank's thread
  std::deque<std::mutex> inbound_mu;  // per global rank: inbound is shared by its communication threads
  std::deque<std::atomic<bool>> done;  // per global rank: its body returned
  std::mutex pool_mu;
  std::multimap<std::size_t, Buffer> pool;  // free payload buffers by capacity

  /// A buffer of at least `n` bytes: a free one no more than twice as large, else a new one
  /// (fresh allocations of large buffers page-fault on every first touch: reuse saves that).
  Buffer take(std::size_t n) {
    if (n == 0) return {};
    {
      std::lock_guard<std::mutex> lk(pool_mu);
      auto it = pool.lower_bound(n);
      if (it != pool.end() && it->first <= 2 * n) {
        Buffer b = std::move(it->second);
        pool.erase(it);
        return b;
      }
    }
    return Buffer{std::make_unique_for_overwrite<std::byte[]>(n), n};
  }
  void give(Buffer b) {
    if (!b.p) return;
    std::lock_guard<std::mutex> lk(pool_mu);
    if (pool.size() >= 64) pool.erase(pool.begin());  // bound the pool: drop the smallest
    pool.emplace(b.capacity, std::move(b));
  }
  std::atomic<bool> aborted{false};
  std::mutex abort_mu;
  std::string abort_msg;
  int abort_rank = -1;

  SimWorld(int n_, SimOptions o) : n(n_), opts(o), clock(n_, 0.0), inbound(n_, 0.0) {
    for (int i = 0; i < n; ++i) boxes.push_back(std::make_unique<Mailbox>());
    for (int i = 0; i < n; ++i) done.emplace_back(false);
    for (int i = 0; i < n; ++i) inbound_mu.emplace_back();
  }
  /// Rank `g` returned from its body: wake everyone (a wait for a message it never sent fails).
  void finish(int g) {
    done[g].store(true);
    for (auto& b : boxes) {
      std::lock_guard<std::mutex> lk(b->mu);
      b->cv.notify_all();
    }
  }

  /// Marks the world failed (the first reason wins) and wakes every waiting rank.
  void abort(int rank, const std::string& why) {
    {
      std::lock_guard<std::mutex> lk(abort_mu);
      if (!aborted.load()) {
        abort_msg = why;
        abort_rank = rank;
        aborted.store(true);
      }
    }
    for (auto& b : boxes) {
      std::lock_guard<std::mutex> lk(b->mu);
      b->cv.notify_all();
    }
  }
  std::string reason() {
    std::lock_guard<std::mutex> lk(abort_mu);
    return abort_msg;
  }
};

namespace {

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  return x;
}

class SimTransport final : public Transport {
 public:
  SimTransport(std::shared_ptr<SimWorld> w, std::uint64_t ctx, std::vector<int> members, int me)
      : w_(std::move(w)), ctx_(ctx), members_(std::move(members)), me_(me) {}

  int rank() const override { return me_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string backend() const override { return "sim"; }

  void send(const void* data, const Header& h0, int dst, int tag) override {
    check_alive("send");
    const int g = members_[me_];
    const double t = cost_(h0.bytes);
    double& clk = now_();
    Message m;
    m.h = h0;
    m.h.t_depart = clk;
    clk += t;
    m.data = w_->take(static_cast<std::size_t>(h0.bytes));
    if (h0.bytes) std::memcpy(m.data.p.get(), data, static_cast<std::size_t>(h0.bytes));
    Mailbox& box = *w_->boxes[members_[dst]];
    {
      std::lock_guard<std::mutex> lk(box.mu);
      box.queues[Key{ctx_, g, tag}].push_back(std::move(m));
    }
    box.cv.notify_all();
  }

  Header recv(void* data, const Header& expect, int src, int tag, const char* what) override {
    const int g = members_[me_], gs = members_[src];
    Mailbox& box = *w_->boxes[g];
    Message m;
    {
      std::unique_lock<std::mutex> lk(box.mu);
      const Key key{ctx_, gs, tag};
      const auto deadline = std::chrono::steady_clock::now() + w_->opts.timeout;
      auto ready = [&] {
        if (w_->aborted.load() || w_->done[gs].load()) return true;
        auto it = box.queues.find(key);
        return it != box.queues.end() && !it->second.empty();
      };
      if (!box.cv.wait_until(lk, deadline, ready)) {
        lk.unlock();
        std::string why = mls::detail::cat(what, ": rank ", me_, " timed out after ", w_->opts.timeout.count(),
                              " ms waiting for a message from rank ", src, " (tag ", tag_name(tag),
                              "): the peer never sent it (a missing call, mismatched collectives, or a dead rank)");
        w_->abort(g, why);
        throw Error(why);
      }
      if (w_->aborted.load()) {
        lk.unlock();
        check_alive(what);
      }
      auto it = box.queues.find(key);
      if (it == box.queues.end() || it->second.empty()) {  // the source returned without sending
        lk.unlock();
        std::string why = mls::detail::cat(what, ": rank ", me_, " waits for a message from rank ", src, " (tag ", tag_name(tag),
                              "), but rank ", src, " returned without sending it");
        w_->abort(g, why);
        throw Error(why);
      }
      m = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) box.queues.erase(it);
    }
    std::string bad = detail::header_mismatch(expect, m.h, what, me_, src);
    if (!bad.empty()) {
      w_->abort(g, bad);
      throw Error(bad);
    }
    if (m.h.bytes) std::memcpy(data, m.data.p.get(), static_cast<std::size_t>(m.h.bytes));
    w_->give(std::move(m.data));
    double arrive = 0;
    {
      std::lock_guard<std::mutex> lk(w_->inbound_mu[g]);
      arrive = std::max(m.h.t_depart, w_->inbound[g]) + cost_(m.h.bytes);
      w_->inbound[g] = arrive;
    }
    double& clk = now_();
    clk = std::max(clk, arrive);
    return m.h;
  }

  Request isend(const void* data, const Header& h, int dst, int tag) override {
    send(data, h, dst, tag);  // buffered: complete at once
    return Request([] {});
  }

  Request irecv(void* data, const Header& expect, int src, int tag, const char* what) override {
    return Request([this, data, expect, src, tag, what] { recv(data, expect, src, tag, what); });
  }

  std::unique_ptr<Transport> split(int color, int key, const std::vector<int>& colors,
                                   const std::vector<int>& keys) override {
    std::vector<int> idx;
    for (int r = 0; r < size(); ++r)
      if (colors[r] == color) idx.push_back(r);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return std::tie(keys[a], a) < std::tie(keys[b], b); });
    std::vector<int> members;
    int me = -1;
    for (int r : idx) {
      if (r == me_) me = static_cast<int>(members.size());
      members.push_back(members_[r]);
    }
    const std::uint64_t ctx = mix(mix(ctx_, ++splits_), static_cast<std::uint64_t>(color) + 1);
    (void)key;
    return std::make_unique<SimTransport>(w_, ctx, std::move(members), me);
  }

  void charge_compute(std::int64_t elements) override {
    now_() += static_cast<double>(elements) * w_->opts.cost.gamma;
  }
  void charge_seconds(double s) override {
    MLS_CHECK(std::isfinite(s) && s >= 0, "model_compute: seconds = ", s, ", expected a finite number >= 0");
    w_->clock[members_[me_]] += s;
  }
  void lane_begin(double issued) override {
    lane_ = std::max(lane_, issued < 0 ? w_->clock[members_[me_]] : issued);
    in_coll_ = true;
  }
  double lane_end() override {
    in_coll_ = false;
    return lane_;
  }
  void lane_join(double t) override {
    double& c = w_->clock[members_[me_]];
    c = std::max(c, t);
  }
  double modelled_seconds() const override { return w_->clock[members_[me_]]; }
  void abort(const std::string& why) override { w_->abort(members_[me_], why); }

 private:
  /// The clock this thread's messages advance: the communication lane inside a collective.
  double& now_() { return in_coll_ ? lane_ : w_->clock[members_[me_]]; }
  double cost_(std::int64_t bytes) const {
    return w_->opts.cost.alpha + static_cast<double>(bytes) * w_->opts.cost.beta;
  }
  static std::string tag_name(int tag) {
    return tag > Communicator::kMaxUserTag ? std::string("collective") : std::to_string(tag);
  }
  void check_alive(const char* what) const {
    if (w_->aborted.load())
      throw Error(mls::detail::cat(what, ": rank ", me_, " stopped because another rank failed: ", w_->reason()));
  }

  std::shared_ptr<SimWorld> w_;
  std::uint64_t ctx_;
  std::vector<int> members_;  // global ranks of this communicator, in rank order
  int me_;
  std::uint64_t splits_ = 0;
  double lane_ = 0.0;     // this communicator's communication lane (simulated seconds)
  bool in_coll_ = false;  // a collective is in progress (its messages use lane_)
};

}  // namespace

namespace {
/// The emulated link (MLS_LINK_GBPS, MLS_LINK_US) replaces the model's α and β; said once per process.
SimOptions with_link(SimOptions opts) {
  const LinkEmulation l = link_from_env();
  if (!l.active()) return opts;
  if (l.has_us) opts.cost.alpha = l.us * 1e-6;
  if (l.has_gbps) opts.cost.beta = 8.0 / (l.gbps * 1e9);
  static std::once_flag said;
  std::call_once(said, [&] { std::fprintf(stderr, "mls: sim backend: %s\n", l.label().c_str()); });
  return opts;
}

std::vector<std::unique_ptr<Transport>> make_world(int n, const SimOptions& opts0, std::shared_ptr<SimWorld>* world) {
  MLS_CHECK(n >= 1, "run_simulated: the number of ranks must be >= 1, got ", n);
  MLS_CHECK(opts0.timeout.count() > 0, "run_simulated: the timeout must be > 0 ms, got ", opts0.timeout.count());
  const SimOptions opts = with_link(opts0);
  auto w = std::make_shared<SimWorld>(n, opts);
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<SimTransport>(w, 1, all, r));
  if (world) *world = w;
  return out;
}
}  // namespace

std::vector<std::unique_ptr<Transport>> make_sim_world(int n, const SimOptions& opts) {
  return make_world(n, opts, nullptr);
}

SimReport run_simulated(int n, const std::function<void(Communicator&)>& body, SimOptions opts) {
  std::shared_ptr<SimWorld> world;
  auto transports = make_world(n, opts, &world);
  std::vector<Communicator> comms;
  comms.reserve(transports.size());
  for (auto& t : transports) {
    comms.emplace_back(std::move(t));
    comms.back().set_cost_model(world->opts.cost);
    comms.back().set_tracing(opts.trace);
  }
  std::vector<std::exception_ptr> failures(n);
  Timer timer;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const ThreadRankScope as_rank(r);  // observations of tests, kept in rank order
      try {
        body(comms[r]);
        comms[r].wait_all();  // asynchronous collectives still in flight belong to the body
        world->finish(r);
      } catch (const std::exception& e) {
        failures[r] = std::current_exception();
        world->abort(r, mls::detail::cat("rank ", r, " failed: ", e.what()));
      } catch (...) {
        failures[r] = std::current_exception();
        world->abort(r, mls::detail::cat("rank ", r, " failed with a non-standard exception"));
      }
    });
  for (auto& t : threads) t.join();
  SimReport rep;
  rep.wall_seconds = timer.seconds();
  if (world->aborted.load()) {
    // The root cause: the rank that aborted the world first (the others stopped because of it).
    int first = world->abort_rank;
    if (first < 0 || first >= n || !failures[first]) {
      first = -1;
      for (int r = 0; r < n && first < 0; ++r)
        if (failures[r]) first = r;
    }
    if (first < 0) throw Error(mls::detail::cat("run_simulated: ", world->reason()));
    try {
      std::rethrow_exception(failures[first]);
    } catch (const NotImplemented& e) {
      throw NotImplemented(e.what());
    } catch (const std::exception& e) {
      throw Error(mls::detail::cat("run_simulated: rank ", first, " of ", n, ": ", e.what()));
    } catch (...) {
      throw Error(mls::detail::cat("run_simulated: rank ", first, " of ", n, " threw a non-standard exception"));
    }
  }
  // Every message must have been received: a leftover one means the ranks' programs disagreed
  // (e.g. different roots), which would hang or corrupt a real run.
  for (int g = 0; g < n; ++g)
    for (auto& [key, q] : world->boxes[g]->queues)
      if (!q.empty()) {
        const Header& h = q.front().h;
        fail("run_simulated: rank ", g, " never received ", q.size(), " message(s) that rank ", std::get<1>(key),
             " sent it (", detail::coll_name(h.op), h.seq >= 0 ? mls::detail::cat(" call #", h.seq) : std::string(),
             ", ", h.bytes, " bytes): every send needs a matching receive (do the ranks agree on roots and sizes?)");
      }
  for (auto& c : comms) {
    rep.traffic.push_back(c.traffic());
    rep.modelled_seconds.push_back(c.modelled_seconds());
    rep.trace.push_back(c.trace());
  }
  return rep;
}

}  // namespace mls::parallel
