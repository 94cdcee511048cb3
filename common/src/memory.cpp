#include "mls/common/memory.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/svg.hpp"

namespace mls::mem {
namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

thread_local Tag tl_tag = Tag::Other;
thread_local int tl_rank = 0;
thread_local bool tl_untracked = false;

Token counted_alloc(Tag tag, std::int64_t bytes, int rank) {
  if (tl_untracked) return {};
  return global().alloc(tag, bytes, rank);
}

}  // namespace

const char* to_string(Tag t) {
  switch (t) {
    case Tag::Parameter: return "parameter";
    case Tag::Gradient: return "gradient";
    case Tag::OptimizerState: return "optimizer_state";
    case Tag::Activation: return "activation";
    case Tag::Workspace: return "workspace";
    case Tag::Communication: return "communication";
    case Tag::Other: return "other";
  }
  return "?";
}

Tracker::Tracker() : t0_(now_s()) {}

void Tracker::set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

Tracker::Cell& Tracker::cell(Tag tag, int rank) {
  if (static_cast<std::size_t>(rank) >= cells_.size()) {
    cells_.resize(static_cast<std::size_t>(rank) + 1, std::vector<Cell>(kNumTags));
    totals_.resize(static_cast<std::size_t>(rank) + 1);
  }
  return cells_[static_cast<std::size_t>(rank)][static_cast<std::size_t>(tag)];
}

const Tracker::Cell* Tracker::find(Tag tag, int rank) const {
  if (rank < 0 || static_cast<std::size_t>(rank) >= cells_.size()) return nullptr;
  return &cells_[static_cast<std::size_t>(rank)][static_cast<std::size_t>(tag)];
}

Token Tracker::alloc(Tag tag, std::int64_t bytes, int rank) {
  if (!enabled()) return {};
  MLS_CHECK(bytes >= 0, "mem::Tracker::alloc: bytes = ", bytes, ", expected >= 0");
  MLS_CHECK(rank >= 0 && rank < kMaxRanks, "mem::Tracker::alloc: rank = ", rank,
            ", expected 0 <= rank < ", kMaxRanks);
  MLS_CHECK(static_cast<int>(tag) < kNumTags, "mem::Tracker::alloc: unknown tag ", static_cast<int>(tag));
  std::lock_guard<std::mutex> lock(mutex_);
  Cell& c = cell(tag, rank);
  Cell& tot = totals_[static_cast<std::size_t>(rank)];
  c.cur += bytes;
  c.peak = std::max(c.peak, c.cur);
  tot.cur += bytes;
  tot.peak = std::max(tot.peak, tot.cur);
  if (events_.size() < max_events_)
    events_.push_back({now_s() - t0_, rank, tag, bytes, c.cur, tot.cur});
  else
    ++dropped_;
  return {generation_.load(std::memory_order_relaxed), static_cast<std::int16_t>(rank), tag};
}

void Tracker::release(const Token& token, std::int64_t bytes) {
  if (!token.tracked()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (token.generation != generation_.load(std::memory_order_relaxed)) return;  // before reset()
  Cell& c = cell(token.tag, token.rank);
  Cell& tot = totals_[static_cast<std::size_t>(token.rank)];
  c.cur -= bytes;
  tot.cur -= bytes;
  if (events_.size() < max_events_)
    events_.push_back({now_s() - t0_, token.rank, token.tag, -bytes, c.cur, tot.cur});
  else
    ++dropped_;
}

std::int64_t Tracker::current(Tag tag, int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Cell* c = find(tag, rank);
  return c ? c->cur : 0;
}

std::int64_t Tracker::peak(Tag tag, int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Cell* c = find(tag, rank);
  return c ? c->peak : 0;
}

std::int64_t Tracker::current_total(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rank >= 0 && static_cast<std::size_t>(rank) < totals_.size() ? totals_[static_cast<std::size_t>(rank)].cur : 0;
}

std::int64_t Tracker::peak_total(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rank >= 0 && static_cast<std::size_t>(rank) < totals_.size() ? totals_[static_cast<std::size_t>(rank)].peak : 0;
}

int Tracker::ranks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(cells_.size());
}

void Tracker::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint32_t g = generation_.load() + 1;
  if (g == 0) g = 1;
  generation_.store(g);
  cells_.clear();
  totals_.clear();
  events_.clear();
  dropped_ = 0;
  t0_ = now_s();
}

void Tracker::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& row : cells_)
    for (auto& c : row) c.peak = c.cur;
  for (auto& c : totals_) c.peak = c.cur;
}

std::vector<Event> Tracker::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

std::int64_t Tracker::dropped_events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

void Tracker::set_max_events(std::size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  max_events_ = n;
}

std::string Tracker::report(bool bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream o;
  char buf[64];
  auto fmt = [&](std::int64_t b) {
    if (bytes)
      std::snprintf(buf, sizeof buf, "%14lld", static_cast<long long>(b));
    else
      std::snprintf(buf, sizeof buf, "%12.3f", static_cast<double>(b) / (1024.0 * 1024.0));
    return std::string(buf);
  };
  o << "memory per rank, peak " << (bytes ? "bytes" : "MiB") << " (current in parentheses where not 0)\n";
  o << "rank";
  for (int t = 0; t < kNumTags; ++t) {
    std::snprintf(buf, sizeof buf, " %16s", to_string(static_cast<Tag>(t)));
    o << buf;
  }
  std::snprintf(buf, sizeof buf, " %16s\n", "peak_total");
  o << buf;
  for (std::size_t r = 0; r < cells_.size(); ++r) {
    std::snprintf(buf, sizeof buf, "%4zu", r);
    o << buf;
    for (int t = 0; t < kNumTags; ++t) {
      const Cell& c = cells_[r][static_cast<std::size_t>(t)];
      std::string s = fmt(c.peak);
      o << "  " << (s.size() < 15 ? std::string(15 - s.size(), ' ') : "") << s;
    }
    o << "  " << fmt(totals_[r].peak) << "\n";
  }
  return o.str();
}

std::string Tracker::timeline_svg(int rank, const std::string& title) const {
  const std::vector<Event> ev = events();
  const double W = 760, H = 420, ml = 80, mr = 170, mt = 36, mb = 46;
  double tmax = 1e-9, ymax = 1;
  for (const Event& e : ev)
    if (e.rank == rank) {
      tmax = std::max(tmax, e.t);
      ymax = std::max(ymax, static_cast<double>(e.total));
    }
  const double scale = ymax >= (1 << 30) ? 1024.0 * 1024 * 1024 : ymax >= (1 << 20) ? 1024.0 * 1024 : 1024.0;
  const char* unit = scale >= 1024.0 * 1024 * 1024 ? "GiB" : scale >= 1024.0 * 1024 ? "MiB" : "KiB";
  // The y axis counts units (KiB, MiB or GiB), so its ticks fall on round numbers of them.
  const svg::Scale X(0, tmax, ml, W - mr), Y(0, ymax / scale, H - mb, mt);
  static const char* colors[kNumTags + 1] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                              "#9467bd", "#8c564b", "#7f7f7f", "#000000"};
  svg::Document d(W, H, {.font_size = 11});
  d.text((ml + W - mr) / 2, 22, title, {.anchor = svg::Anchor::Middle, .size = 14});
  d.x_axis(X, H - mb, {.title = "seconds", .title_gap = mb - 10});
  d.y_axis(Y, ml, {.title = std::string(unit) + " on rank " + std::to_string(rank), .title_gap = ml - 16});
  // One step line per tag (value held until the next event of that tag), and the total.
  std::vector<svg::LegendEntry> legend;
  for (int t = 0; t <= kNumTags; ++t) {
    std::vector<svg::Point> pts{{X(0), Y(0)}};
    double last = 0;
    for (const Event& e : ev) {
      if (e.rank != rank) continue;
      if (t < kNumTags && static_cast<int>(e.tag) != t) continue;
      const double v = static_cast<double>(t < kNumTags ? e.current : e.total) / scale;
      pts.push_back({X(e.t), Y(last)});
      pts.push_back({X(e.t), Y(v)});
      last = v;
    }
    if (pts.size() == 1) continue;
    pts.push_back({X(tmax), Y(last)});
    d.polyline(pts, {.stroke = colors[t], .stroke_width = t == kNumTags ? 2 : 1.3});
    legend.push_back({t < kNumTags ? to_string(static_cast<Tag>(t)) : "total", colors[t]});
  }
  d.legend(W - mr + 10, mt + 14, legend);
  return d.str();
}

Tracker& global() {
  static Tracker* t = [] {
    auto* tr = new Tracker();  // never destroyed: buffers freed at exit may still report
    const char* env = std::getenv("MLS_MEM_TRACK");
    if (env && std::strcmp(env, "0") != 0 && *env) tr->set_enabled(true);
    return tr;
  }();
  return *t;
}

Tag current_tag() { return tl_tag; }
int current_rank() { return tl_rank; }

TagScope::TagScope(Tag tag) : prev_tag_(tl_tag), prev_rank_(tl_rank) { tl_tag = tag; }
TagScope::TagScope(Tag tag, int rank) : prev_tag_(tl_tag), prev_rank_(tl_rank) {
  MLS_CHECK(rank >= 0 && rank < kMaxRanks, "mem::TagScope: rank = ", rank, ", expected 0 <= rank < ",
            kMaxRanks);
  tl_tag = tag;
  tl_rank = rank;
}
TagScope::~TagScope() {
  tl_tag = prev_tag_;
  tl_rank = prev_rank_;
}

UntrackedScope::UntrackedScope() : prev_(tl_untracked) { tl_untracked = true; }
UntrackedScope::~UntrackedScope() { tl_untracked = prev_; }

RankScope::RankScope(int rank) : prev_(tl_rank) {
  MLS_CHECK(rank >= 0 && rank < kMaxRanks, "mem::RankScope: rank = ", rank, ", expected 0 <= rank < ",
            kMaxRanks);
  tl_rank = rank;
}
RankScope::~RankScope() { tl_rank = prev_; }

Token on_alloc(std::int64_t bytes) {
  Tracker& t = global();
  if (!t.enabled() || tl_untracked) return {};
  return t.alloc(tl_tag, bytes, tl_rank);
}

Block::Block(Tag tag, std::int64_t bytes) : Block(tag, bytes, tl_rank) {}
Block::Block(Tag tag, std::int64_t bytes, int rank) : tag_(tag), rank_(rank), bytes_(bytes) {
  token_ = counted_alloc(tag, bytes, rank);
}
Block::Block(const Block& o) : Block(o.tag_, o.bytes_, o.rank_) {}
Block& Block::operator=(const Block& o) {
  if (this != &o) {
    drop();
    tag_ = o.tag_;
    rank_ = o.rank_;
    bytes_ = o.bytes_;
    token_ = counted_alloc(tag_, bytes_, rank_);
  }
  return *this;
}
Block::Block(Block&& o) noexcept : token_(o.token_), tag_(o.tag_), rank_(o.rank_), bytes_(o.bytes_) {
  o.token_ = {};
  o.bytes_ = 0;
}
Block& Block::operator=(Block&& o) noexcept {
  if (this != &o) {
    drop();
    token_ = o.token_;
    tag_ = o.tag_;
    rank_ = o.rank_;
    bytes_ = o.bytes_;
    o.token_ = {};
    o.bytes_ = 0;
  }
  return *this;
}
Block::~Block() { drop(); }
void Block::drop() {
  on_release(token_, bytes_);
  token_ = {};
}
void Block::resize(std::int64_t bytes) {
  drop();
  bytes_ = bytes;
  token_ = counted_alloc(tag_, bytes_, rank_);
}

std::string gb(double bytes, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f GB", digits, bytes / 1e9);
  return b;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char b[64];
  std::snprintf(b, sizeof b, "%.3f %s", bytes, units[u]);
  return b;
}

}  // namespace mls::mem
