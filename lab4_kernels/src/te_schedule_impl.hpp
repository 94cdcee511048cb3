#pragma once
// The state behind Schedule and Stage (shared by te_schedule.cpp and te_lower.cpp).
#include <map>
#include <memory>
#include <variant>
#include <vector>

#include "mls/kernels/schedule.hpp"

namespace mls::kernels::te {

/// parent -> (outer, inner): parent = outer * factor + inner.
struct SplitRel {
  IterVar parent, outer, inner;
  std::int64_t factor;
};
/// (outer, inner) -> fused: outer = fused // extent(inner), inner = fused % extent(inner).
struct FuseRel {
  IterVar outer, inner, fused;
};
using Relation = std::variant<SplitRel, FuseRel>;

struct StageImpl {
  std::string name;
  Buffer buffer;               // the stage's tensor (nominal shape; a cache tile's real shape is its window)
  std::vector<IterVar> root;   // data-parallel root axes, one per buffer dimension
  std::vector<IterVar> reduce; // reduction root axes (empty: no reduction)
  Expr body;                   // over the root variables; a Reduce over `reduce` when that is non-empty
  std::vector<IterVar> leaves; // current loops, outermost first
  std::vector<Relation> relations;  // in the order they were made
  std::vector<IterVar> all;    // every axis the stage has had (to tell "split away" from "not ours")
  std::map<const IterVarNode*, ForKind> kinds;
  std::map<const IterVarNode*, ThreadTag> tags;  // bind: valid where kinds says ThreadBinding
  IterVar tensorize_axis;
  std::shared_ptr<const Intrinsic> intrinsic;
  ResetAt reset_at = ResetAt::Nest;  // tensorize: where a reduction starting outside the tile resets
  StageImpl* attach = nullptr;  // computed inside this stage's loop `attach_axis`
  IterVar attach_axis;
  StageImpl* with = nullptr;    // compute_with: its loops down to `with_axis` of this stage are shared
  IterVar with_axis;
  std::map<const BufferNode*, StageImpl*> redirect;  // loads of a buffer read this cache instead
  const BufferNode* cache_of = nullptr;  // cache_read: the buffer it copies
  std::vector<int> layout;     // cache_read: dimension d of the copy is dimension layout[d] of the tensor (empty: same order)
  std::int64_t panel = 0;      // cache_read: the copy's last dimension stored in panels of this width (0: none)
  bool is_output = false;
  Scope scope = Scope::Global;  // set_scope (a cache's scope is its buffer's)
  bool double_buffer = false;   // Stage::double_buffer (a shared copy)
};

/// Where a stage's values live: its cache's scope (cache_read, cache_write), else set_scope's.
inline Scope stage_scope(const StageImpl& st) {
  return st.buffer->scope != Scope::Global ? st.buffer->scope : st.scope;
}

struct ScheduleImpl {
  std::vector<Tensor> outputs;
  std::vector<std::unique_ptr<StageImpl>> stages;  // producers before consumers
};

/// The stage whose loads of `b` it reads: its cache when `s` redirects `b`, else the stage
/// computing `b` (null for a placeholder).
StageImpl* producer_of(const ScheduleImpl& sched, const StageImpl& s, const BufferNode* b);
/// The thread tag of leaf `axis` of `st` (ThreadTag::None unless it is bound).
ThreadTag bound_tag(const StageImpl& st, const IterVar& axis);
/// Whether `s` reads stage `p`.
bool reads(const ScheduleImpl& sched, const StageImpl& s, const StageImpl& p);

}  // namespace mls::kernels::te
