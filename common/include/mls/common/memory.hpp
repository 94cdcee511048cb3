#pragma once
/// Where training memory goes: a tracker of bytes per kind of state (tag) and per rank.
///
///   mls::mem::Tracker& t = mls::mem::global();
///   t.set_enabled(true);                       // off by default: then it costs one atomic load
///   {
///     mls::mem::TagScope scope(mls::mem::Tag::Activation, /*rank=*/1);
///     Tensor x = Tensor::empty({1024});        // lab 1's Storage reads the scope: 4 KiB of
///   }                                          // activations on rank 1, released with x
///   t.peak(Tag::Activation, 1);  t.report();  t.timeline_svg("...");
///
/// Every lab 1 tensor allocation is tagged through the thread-local scope (default: Tag::Other on
/// rank 0); the fused GPT path tags its flat buffers (parameters, gradients, optimizer state,
/// activations) with `Block`s. A simulated rank is a thread: it opens a TagScope with its rank.
/// An allocation made while tracking is off, or before the last reset(), is never counted (its
/// release is ignored too), so enabling or resetting mid-run never makes a count negative.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mls::mem {

/// The kinds of memory. Parameter, Gradient and OptimizerState are the model states the ZeRO
/// paper partitions; Activation, Workspace (scratch, upcast copies) and Communication (buffers of
/// collectives, gradient buckets) are the residual states.
enum class Tag : std::uint8_t { Parameter, Gradient, OptimizerState, Activation, Workspace, Communication, Other };
constexpr int kNumTags = 7;
/// "parameter", "gradient", "optimizer_state", "activation", "workspace", "communication", "other".
const char* to_string(Tag t);
/// The most ranks a tracker counts (ranks 0 .. kMaxRanks-1); a larger rank is an mls::Error.
constexpr int kMaxRanks = 1024;

/// One allocation or release, as the timeline records it.
struct Event {
  double t = 0;               // seconds since the tracker's last reset()
  int rank = 0;
  Tag tag = Tag::Other;
  std::int64_t delta = 0;     // +bytes for an allocation, -bytes for a release
  std::int64_t current = 0;   // this tag's bytes on this rank after the event
  std::int64_t total = 0;     // all tags' bytes on this rank after the event
};

/// What alloc() hands back; give it to release(). A default Token (generation 0) is untracked.
struct Token {
  std::uint32_t generation = 0;
  std::int16_t rank = 0;
  Tag tag = Tag::Other;
  bool tracked() const { return generation != 0; }
};

/// Current and peak bytes per (tag, rank), the peak of each rank's total, and a timeline.
/// Thread-safe. Disabled, alloc() returns an untracked Token after one relaxed atomic load.
class Tracker {
 public:
  Tracker();
  void set_enabled(bool on);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  /// Counts `bytes` (>= 0) of `tag` on `rank` (0 <= rank < kMaxRanks).
  Token alloc(Tag tag, std::int64_t bytes, int rank = 0);
  /// Gives back what `alloc` counted (an untracked or stale token is ignored).
  void release(const Token& token, std::int64_t bytes);
  std::int64_t current(Tag tag, int rank = 0) const;
  std::int64_t peak(Tag tag, int rank = 0) const;
  /// Current / peak of the sum over tags on `rank` (the peak of the sum, not the sum of peaks).
  std::int64_t current_total(int rank = 0) const;
  std::int64_t peak_total(int rank = 0) const;
  /// Ranks that have seen an allocation since the last reset (1 + the highest such rank).
  int ranks() const;
  /// Forgets every count and event; allocations made before are never released into the new
  /// counts. Keeps enabled().
  void reset();
  /// Sets every peak to the current value (to measure the peak of one phase).
  void reset_peaks();
  /// The timeline (at most `max_events` are kept, default 200000; later ones are dropped and
  /// counted in dropped_events()).
  std::vector<Event> events() const;
  std::int64_t dropped_events() const;
  void set_max_events(std::size_t n);
  /// A text table: one row per rank, columns current/peak per tag and the peak total (MiB with
  /// 3 decimals, or bytes with `bytes = true`).
  std::string report(bool bytes = false) const;
  /// The timeline as an SVG line plot: the bytes of each tag on `rank` (and the total) against
  /// time. `title` goes above the plot.
  std::string timeline_svg(int rank, const std::string& title) const;

 private:
  struct Cell {
    std::int64_t cur = 0, peak = 0;
  };
  Cell& cell(Tag tag, int rank);
  const Cell* find(Tag tag, int rank) const;
  std::atomic<bool> enabled_{false};
  std::atomic<std::uint32_t> generation_{1};
  mutable std::mutex mutex_;
  std::vector<std::vector<Cell>> cells_;  // [rank][tag]
  std::vector<Cell> totals_;              // [rank]
  std::vector<Event> events_;
  std::size_t max_events_ = 200000;
  std::int64_t dropped_ = 0;
  double t0_ = 0;
};

/// The process-wide tracker lab 1's Storage and the GPT buffers report to. Disabled at start
/// unless the environment sets MLS_MEM_TRACK=1.
Tracker& global();

/// The tag and rank that allocations on this thread are counted under (Tag::Other, rank 0 by
/// default).
Tag current_tag();
int current_rank();

/// Sets this thread's tag (and rank) until the scope ends; scopes nest.
class TagScope {
 public:
  explicit TagScope(Tag tag);
  TagScope(Tag tag, int rank);
  ~TagScope();
  TagScope(const TagScope&) = delete;
  TagScope& operator=(const TagScope&) = delete;

 private:
  Tag prev_tag_;
  int prev_rank_;
};

/// While it lives, nothing this thread allocates is counted (a buffer that is not part of what
/// is being measured, e.g. the initial parameters a trainer copies from); scopes nest.
class UntrackedScope {
 public:
  UntrackedScope();
  ~UntrackedScope();
  UntrackedScope(const UntrackedScope&) = delete;
  UntrackedScope& operator=(const UntrackedScope&) = delete;

 private:
  bool prev_;
};

/// Sets this thread's rank only (the tag stays) until the scope ends.
class RankScope {
 public:
  explicit RankScope(int rank);
  ~RankScope();
  RankScope(const RankScope&) = delete;
  RankScope& operator=(const RankScope&) = delete;

 private:
  int prev_;
};

/// Counts an allocation on the global tracker under this thread's scope (what Storage calls).
Token on_alloc(std::int64_t bytes);
inline void on_release(const Token& t, std::int64_t bytes) {
  if (t.tracked()) global().release(t, bytes);
}

/// RAII: `bytes` of `tag` counted on the global tracker while the Block lives. Copying counts
/// the bytes again (a copied buffer is a second buffer); moving transfers them.
class Block {
 public:
  Block() = default;
  Block(Tag tag, std::int64_t bytes);            // this thread's rank
  Block(Tag tag, std::int64_t bytes, int rank);
  Block(const Block& o);
  Block& operator=(const Block& o);
  Block(Block&& o) noexcept;
  Block& operator=(Block&& o) noexcept;
  ~Block();
  /// Re-counts as `bytes` (same tag and rank), e.g. after the buffer was resized.
  void resize(std::int64_t bytes);
  std::int64_t bytes() const { return bytes_; }
  Tag tag() const { return tag_; }

 private:
  void drop();
  Token token_{};
  Tag tag_ = Tag::Other;
  int rank_ = 0;
  std::int64_t bytes_ = 0;
};

/// A vector of T whose bytes are counted under `tag` (the buffers of the ZeRO engine).
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Tag tag, std::int64_t n, int rank)
      : data_(static_cast<std::size_t>(n)), block_(tag, n * static_cast<std::int64_t>(sizeof(T)), rank) {}
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  std::int64_t size() const { return static_cast<std::int64_t>(data_.size()); }
  T& operator[](std::int64_t i) { return data_[static_cast<std::size_t>(i)]; }
  const T& operator[](std::int64_t i) const { return data_[static_cast<std::size_t>(i)]; }
  std::vector<T>& vec() { return data_; }
  const std::vector<T>& vec() const { return data_; }
  /// Frees the memory (and the count).
  void clear() {
    std::vector<T>().swap(data_);
    block_ = Block();
  }
  bool empty() const { return data_.empty(); }

 private:
  std::vector<T> data_;
  Block block_;
};

/// "1.9 GB"-style: bytes / 1e9 with `digits` decimals (the slides' decimal gigabytes).
std::string gb(double bytes, int digits = 1);
/// Binary units: "12.000 MiB" (B, KiB, MiB, GiB; 3 decimals).
std::string human_bytes(double bytes);

}  // namespace mls::mem
