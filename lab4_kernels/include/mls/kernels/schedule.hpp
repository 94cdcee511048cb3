#pragma once
/// Lab 4 part 2, ML compilation: schedules (TVM's `te.create_schedule`) and lowering.
///
/// A schedule keeps, for every computed tensor, a stage: its loop axes and how they were
/// transformed (split, fuse, reorder), loop kinds, where it is computed (compute_at), and tiles
/// replaced by intrinsics (tensorize). None of this changes what is computed, only the loop nest
/// `lower` emits. The slide's tiled matmul:
///
///     Schedule s({C});
///     auto t = s[C].tile(C.axis(0), C.axis(1), 8, 8);      // yo, xo, yi, xi
///     auto [ko, ki] = s[C].split(C.reduce_axis(0), 8);
///     s[C].reorder({t.outer0, t.outer1, ko, t.inner0, t.inner1, ki});
///     LoweredFunc f = lower(s, "matmul");
///
/// Every illegal request is an mls::Error "<primitive>: ... axis '<name>' of stage '<stage>' ...
/// <reason>". Copies of a Schedule share its stages; Stage handles keep them alive. An axis given
/// to a primitive must be a current leaf of that stage. Split factors need not divide extents:
/// the tail is guarded.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mls/kernels/loop_ir.hpp"
#include "mls/kernels/te.hpp"

namespace mls::kernels::te {

/// Where a tensorized reduction whose first loop lies outside the tile starts from its init (the
/// intrinsic's reset): ResetAt::Nest, a nest of its own over the output before that loop (one more
/// pass over the output); ResetAt::Tile, inside the tile's loops right before the call, guarded by
/// every reduction loop outside the tile at its first iteration (`if ko == 0: fill_zero(...)`), so
/// the tile is zeroed in cache just before the intrinsic reads it (BLAS's beta = 0 for the first
/// KC block). For a fixed tile the reduction loops run in lexicographic order, so that iteration is
/// its first.
enum class ResetAt { Nest, Tile };

class Schedule;
struct ScheduleImpl;
struct StageImpl;

/// The four axes of `Stage::tile`.
struct TileAxes {
  IterVar outer0, outer1, inner0, inner1;
};

/// Handle to one stage of a schedule.
class Stage {
 public:
  /// The stage's name (its tensor's).
  const std::string& name() const;
  /// Its current loop axes, outermost first.
  std::vector<IterVar> leaf_axes() const;
  /// Its root axes: data-parallel ones, then reduction ones.
  std::vector<IterVar> root_axes() const;

  /// axis -> (outer, inner) with inner of extent `factor` (> 0) and outer ceil(extent / factor);
  /// names default to <axis>o, <axis>i (y -> yo, yi).
  std::pair<IterVar, IterVar> split(const IterVar& axis, std::int64_t factor,
                                    std::string outer_name = "", std::string inner_name = "");
  /// Splits `a` by fa and `b` by fb and orders the four as (ao, bo, ai, bi) where they were.
  TileAxes tile(const IterVar& a, const IterVar& b, std::int64_t fa, std::int64_t fb);
  /// Puts `axes` in this order in the positions they occupy now (the others stay where they are).
  /// The axes: distinct leaves of this stage.
  void reorder(const std::vector<IterVar>& axes);
  /// One axis of extent ea * eb for `outer` immediately followed by `inner` (both leaves, next
  /// to each other, both data-parallel or both reduction).
  IterVar fuse(const IterVar& outer, const IterVar& inner, std::string name = "");
  void unroll(const IterVar& axis);
  /// Data-parallel axes only (a reduction axis: rfactor it first).
  void vectorize(const IterVar& axis);
  /// Data-parallel axes only (a reduction axis: rfactor it first).
  void parallel(const IterVar& axis);
  /// Makes loop `axis` a GPU index (CUDA: blockIdx.x/y/z, threadIdx.x/y/z): generate_cuda runs
  /// each iteration on its own block or thread; the interpreter runs it as a serial loop; the C++
  /// generator refuses it ("bind is for CUDA"). mls::Error "bind: ..." for a reduction axis
  /// (rfactor it first), ThreadTag::None, a tag this stage already binds to another axis, a stage
  /// that is a shared-memory copy (the code generator spreads its iterations over the block's
  /// threads). The launch rule, checked when lowering: a stage's bound loops are its outermost
  /// loops (no unbound loop of more than one iteration around a bound one), and a stage computed
  /// inside another (compute_at, cache_read) binds none: it runs inside its consumer's threads.
  void bind(const IterVar& axis, ThreadTag tag);
  /// Computes this stage inside `consumer`'s loop `axis`, only the region that one iteration of
  /// it reads (its buffer stays where it is, unless set_scope made it a local tile of that region).
  /// This stage must be read by `consumer`; any other stage reading it must already be computed
  /// inside that loop (compute_at of the other readers first, at `axis` or a loop inside it, at any
  /// depth), and `lower` checks that each of their loads falls in the region one iteration
  /// computed. An output may be computed at a loop when the regions of the loop's iterations cover
  /// it (a row computed per iteration of the row loop: checked by `lower`).
  void compute_at(const Stage& consumer, const IterVar& axis);
  /// Fuses this stage's loop nest into `host`'s (Halide's compute_with): this stage's outermost
  /// leaves, as many as `host` has loops down to and including its leaf `axis`, become those loops
  /// of `host` (the shared loops: one loop each, with `host`'s variables and loop kinds), and the
  /// rest of this stage's nest runs inside `host`'s loop `axis`, after `host`'s own statements there
  /// (guests in the order of the stages). A reduction's init runs where it would in its own nest:
  /// just before its first reduction loop (a shared one: in `host`'s loop around it). So two row
  /// reductions read a row once, and a column sum over blocks of rows accumulates inside the row
  /// loop that writes each row: one pass over memory instead of two.
  ///     s[sum_b].compute_with(s[sum_a], l);   // both partial sums in one loop over the row
  /// A guest at the root that is not an output goes to its host's place (compute_at the host's loop,
  /// now, or when the host is computed at a loop later):
  /// its window there is the host's in each dimension whose axis is a shared loop that is a root axis
  /// of the host too, the whole extent in the others (softmax: the sum of a row's exp values, fused
  /// with the loop that writes them into a held row). A guest may read the host only at the element
  /// the host has just computed, sharing all of the host's loops (checked when lowering).
  /// mls::Error "compute_with: ..." for another schedule, a stage fused with itself, a host that is
  /// itself fused into another (fuse with that one), a stage already a host, a stage with fewer loops
  /// than it would share, a stage and host computed at different places (both at the root, or
  /// compute_at the same loop of the same stage, or a root guest that can move: a reader of it
  /// outside the host's loop is named), a host reading its guest (the guest runs after the host in
  /// each shared iteration), or a tensorized stage. Checked when lowering: the shared loops have the
  /// same extents, the same tails (guards) in both, no stage is computed at a shared loop of the
  /// guest, a guest reads its host only where the host has just stored.
  void compute_with(const Stage& host, const IterVar& axis);
  /// Where the stage's values live (TVM's set_scope): Scope::Local makes a stage computed at a loop
  /// (compute_at) a local tile of the region one iteration computes, allocated inside that loop
  /// (a stack array in generated code), instead of a region of a whole buffer in main memory;
  /// Scope::Global (the default) is the whole buffer. mls::Error for an output (it lives in main
  /// memory) and for Scope::Shared (a shared tile is a cache_read).
  void set_scope(Scope scope);
  /// Replaces the loops from `axis` inwards by one call of `intrinsic` per tile. Checked when
  /// the schedule is lowered: the tile's axes (kinds and extents, in order) must be the
  /// intrinsic's, the compute its pattern, every index affine in the tile's axes, no tail and
  /// no stage computed inside the tile.
  void tensorize(const IterVar& axis, const Intrinsic& intrinsic);
  /// Keeps this shared tile (a cache_read with Scope::Shared) in two copies (TVM's double_buffer):
  /// generate_cuda fills the copy of iteration i + 1 of the loop it is computed at while the
  /// block's threads read the copy of iteration i, one __syncthreads() per iteration instead of
  /// two; where the loop's body is not fills then statements that read them, the usual single copy.
  /// The interpreter and the C++ generator ignore it. mls::Error "double_buffer: ..." for a stage
  /// that is not a shared-memory copy.
  void double_buffer();
  /// The same, the reduction's init where `reset` says (ResetAt above; the overload above is
  /// ResetAt::Nest). A reduction without an init (sum_into: it adds to the output) has nothing to
  /// reset either way. Checked when lowering: ResetAt::Tile on a reduction with an init needs an
  /// intrinsic with a reset.
  void tensorize(const IterVar& axis, const Intrinsic& intrinsic, ResetAt reset);

 private:
  friend class Schedule;
  Stage(std::shared_ptr<ScheduleImpl> s, StageImpl* node) : s_(std::move(s)), node_(node) {}
  std::shared_ptr<ScheduleImpl> s_;
  StageImpl* node_;
};

/// The stages of every computed tensor `outputs` depend on, each with the default schedule:
/// its data-parallel axes, then its reduction axes, as loops in that order.
class Schedule {
 public:
  explicit Schedule(const std::vector<Tensor>& outputs);
  /// The stage computing `t` (a tensor of this schedule, not a placeholder).
  Stage operator[](const Tensor& t) const;
  /// The output tensors.
  const std::vector<Tensor>& outputs() const;

  /// A local copy `<t>L` of the window of `t` that one iteration of `consumer`'s loop `axis`
  /// reads (the slide's dma_copy2d into AL), computed at that loop; `consumer` reads the copy
  /// instead. Returns the copy's tensor (a handle for `s[...]`; its buffer's real shape is the
  /// window, known when lowering).
  Tensor cache_read(const Tensor& t, const Stage& consumer, const IterVar& axis,
                    std::string name = "");
  /// The same with the copy's scope: Scope::Local (the default above) or Scope::Shared (default
  /// name `<t>_shared`): a GPU block's shared tile. Its window is what one iteration of `axis`
  /// reads across all the threads of the block: the consumer's loops bound to threadIdx around
  /// `axis` count as varying, like the loops inside it. generate_cuda declares it __shared__, has
  /// the block's threads fill it together (a loop strided by the block's size over the window's
  /// elements), with __syncthreads() after the fill (before anyone reads it) and after the
  /// consumer's statements that read it (before the next fill). On the CPU it is a local tile.
  /// mls::Error for Scope::Global (not a cache).
  Tensor cache_read(const Tensor& t, const Stage& consumer, const IterVar& axis, Scope scope,
                    std::string name = "");
  /// The same with the copy's dimensions in another order: dimension d of the copy is dimension
  /// layout[d] of `t` (a permutation of 0..ndim-1; empty: the same order). The copy transposes as it
  /// packs: `cache_read(B, s[C], ko, Scope::Local, {1, 0}, "BL")` of a B read as B[x][k] stores BL[k][x],
  /// rows of k, so an intrinsic that wants B's columns contiguous reads them so, and the consumer's
  /// loads B[x][k] become BL[k - k0][x - x0]. mls::Error "cache_read: layout ..." for a list that is
  /// not a permutation.
  Tensor cache_read(const Tensor& t, const Stage& consumer, const IterVar& axis, Scope scope, std::vector<int> layout,
                    std::string name = "");
  /// The same, the copy's last dimension stored in panels of `panel` (BLIS's packed micro-panels):
  /// a window of R x W (after `layout`) is stored [ceil(W / panel)][R][panel], so copy[r][c] lives at
  /// [c / panel][r][c % panel] and one panel (all its rows) is contiguous. `cache_read(B, s[C], ko,
  /// Scope::Local, {0, 1}, NR, "BL")` packs B's KC x NC block as [NC / NR][KC][NR]: the micro-kernel
  /// reads its KC x NR panel with a row stride of NR. The consumer's loads and the copy's stores
  /// become [hi][...][lo] with hi = index / panel, lo = index % panel, written without division where
  /// the index is affine and its remainder provably stays in [0, panel) (xr*NR + xi: [xr][...][xi]),
  /// so a tensorized tile still sees affine indices. The copy's own loops are the schedule's: split its
  /// last axis by `panel` and put the outer part first to write the panels in order. 0: no panels
  /// (the overload above). mls::Error "cache_read: panel ..." for a width < 0, and for Scope::Shared.
  Tensor cache_read(const Tensor& t, const Stage& consumer, const IterVar& axis, Scope scope, std::vector<int> layout,
                    std::int64_t panel, std::string name = "");
  /// Computes `t` into a local buffer `<t>L` (the slide's CL) and makes `t`'s own stage a copy of
  /// it; `t`'s data-parallel axes stay with that copy stage, its reduction axes move to the new
  /// stage. Call it before scheduling `t`'s reduction axes. Returns the local tensor.
  Tensor cache_write(const Tensor& t, std::string name = "");
  /// Makes the reduction leaf `axis` of `t`'s stage (a reduction axis, or a split part of one)
  /// data-parallel: a new stage `<t>_rf`, with `axis` as its first dimension, computes the partial
  /// results, and `t`'s stage reduces them over that dimension. Returns the `_rf` tensor.
  Tensor rfactor(const Tensor& t, const IterVar& axis);

 private:
  friend LoweredFunc lower(const Schedule& s, const std::string& name);
  std::shared_ptr<ScheduleImpl> s_;
};

/// The loop nest of a schedule, as the function `name(inputs..., outputs...)`.
LoweredFunc lower(const Schedule& s, const std::string& name = "main");

}  // namespace mls::kernels::te
