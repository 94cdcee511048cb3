// The CUDA code generator (mls/kernels/codegen_cuda.hpp): one __global__ function per top-level loop
// nest, its bound loops as the launch, shared tiles filled by the block's threads together between
// barriers. Expressions are printed by the C++ generator's printer (codegen_detail::c_expr) in the
// CUDA dialect; plain C++, no CUDA header.
#include "mls/kernels/codegen_cuda.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "codegen_internal.hpp"
#include "mls/common/error.hpp"

namespace mls::kernels::te {

namespace cd = codegen_detail;

std::string LaunchDims::to_string() const {
  auto three = [](const std::array<std::int64_t, 3>& a) {
    return "(" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ", " + std::to_string(a[2]) + ")";
  };
  return "grid " + three(grid) + " x block " + three(block);
}

LaunchDims launch_dims(const std::vector<std::pair<ThreadTag, std::int64_t>>& bound, const std::string& kernel) {
  LaunchDims d;
  std::set<ThreadTag> seen;
  for (const auto& [tag, ext] : bound) {
    MLS_CHECK(tag != ThreadTag::None, "generate_cuda: kernel '", kernel, "' has a bound loop without a GPU index");
    MLS_CHECK(ext >= 1, "generate_cuda: kernel '", kernel, "' binds ", thread_tag_name(tag), " to a loop of extent ",
              ext, ", expected >= 1");
    MLS_CHECK(seen.insert(tag).second, "generate_cuda: kernel '", kernel, "' binds ", thread_tag_name(tag),
              " twice (one loop per GPU index in a kernel)");
    const std::size_t axis = (tag == ThreadTag::BlockX || tag == ThreadTag::ThreadX)   ? 0
                             : (tag == ThreadTag::BlockY || tag == ThreadTag::ThreadY) ? 1
                                                                                       : 2;
    (is_thread_index(tag) ? d.block : d.grid)[axis] = ext;
  }
  MLS_CHECK(d.threads_per_block() <= 1024, "generate_cuda: kernel '", kernel, "' has ", d.threads_per_block(),
            " threads per block (", d.to_string(), "); CUDA allows at most 1024: bind smaller loops to threadIdx");
  MLS_CHECK(d.block[2] <= 64, "generate_cuda: kernel '", kernel, "' binds threadIdx.z to ", d.block[2],
            " threads; CUDA allows at most 64");
  MLS_CHECK(d.grid[0] <= 2147483647, "generate_cuda: kernel '", kernel, "' binds blockIdx.x to ", d.grid[0],
            " blocks; CUDA allows at most 2^31 - 1");
  MLS_CHECK(d.grid[1] <= 65535 && d.grid[2] <= 65535, "generate_cuda: kernel '", kernel, "' binds blockIdx.y/z to ",
            d.grid[1], "/", d.grid[2], " blocks; CUDA allows at most 65535 (bind the largest loop to blockIdx.x)");
  return d;
}

namespace {

constexpr std::int64_t kMaxSharedBytes = 48 * 1024;  // static __shared__ memory of one block

/// The first loop bound to a GPU index in `s` (null if none).
const For* first_bound(const Stmt& s) {
  const For* found = nullptr;
  for_each_stmt(s, [&](const Stmt& x) {
    if (const auto* f = x.as<For>(); f && !found && f->kind == ForKind::ThreadBinding) found = f;
  });
  return found;
}

/// The buffers `s` stores into, in order of first store.
std::vector<Buffer> stored(const Stmt& s) {
  std::vector<Buffer> out;
  for_each_stmt(s, [&](const Stmt& x) {
    const Buffer* b = nullptr;
    if (const auto* st = x.as<Store>()) b = &st->buffer;
    if (const auto* c = x.as<Call>(); c && !c->args.empty()) b = &c->args[0].buffer;
    if (b && std::find(out.begin(), out.end(), *b) == out.end()) out.push_back(*b);
  });
  return out;
}

/// A shared tile's fill: a statement that stores, and only into shared buffers.
bool is_fill(const Stmt& s) {
  const auto bufs = stored(s);
  return !bufs.empty() && std::all_of(bufs.begin(), bufs.end(), [](const Buffer& b) { return b->scope == Scope::Shared; });
}
bool contains_fill(const Stmt& s) {
  for (const auto& b : stored(s))
    if (b->scope == Scope::Shared) return true;
  return false;
}

/// The conjunction of `conds`, each once (a tile's guard often repeats its consumer's).
Expr conjunction(const std::vector<Expr>& conds) {
  Expr all;
  std::set<std::string> seen;
  for (const auto& c : conds)
    if (seen.insert(detail::structural_key(c)).second) all = all.defined() ? (all && c) : c;
  return all;
}

/// A name CUDA gives a meaning of its own gets a '_' after it.
std::string cuda_identifier(const std::string& name) {
  static const std::set<std::string> builtin = {"threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",
                                                "__syncthreads"};
  std::string s = c_identifier(name);
  return builtin.count(s) ? s + "_" : s;
}

std::string indent(int depth) { return std::string(static_cast<std::size_t>(4 * depth), ' '); }

/// The helpers every generated unit starts with (all prefixed mls_).
const char* const kCudaPrelude = R"(// Index arithmetic of the generated code: integer division and modulo rounding towards minus
// infinity (Python's // and %), min, max, abs.
__device__ __forceinline__ long long mls_floordiv(long long a, long long b) {
    const long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ long long mls_floormod(long long a, long long b) {
    const long long r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
__device__ __forceinline__ long long mls_min(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long mls_max(long long a, long long b) { return a > b ? a : b; }
__device__ __forceinline__ long long mls_abs(long long a) { return a < 0 ? -a : a; }

)";

struct BufState {
  std::string ident;
  std::vector<std::int64_t> shape;
  std::int64_t size = 1;
  bool live = false;
  std::vector<std::int64_t> strides = {};  // buffer_strides
  std::string copy = {};  // a double-buffered tile: the offset of the copy in use ("(ko & 1)*256 + ")
};

/// Emits one kernel: a top-level nest of the function.
class CudaEmitter {
 public:
  CudaEmitter(const LoweredFunc& f, const std::vector<Buffer>& params, const std::vector<std::string>& param_idents,
              std::string name)
      : f_(f), params_(params), param_idents_(param_idents) {
    info_.name = std::move(name);
  }
  /// The kernel's definition; info() is filled.
  std::string kernel(const Stmt& nest);
  const CudaKernelInfo& info() const { return info_; }

 private:
  std::string fresh(const std::string& base) const;
  std::string bind(const VarNode* v, std::int64_t extent);
  void unbind(const VarNode* v);
  BufState& buf(const BufferNode* b, const char* what);
  cd::CText expr(const Expr& e);
  std::string element(const BufferNode* b, const std::vector<Expr>& idx, const char* what);
  void line(int depth, const std::string& text) { out_ += indent(depth) + text + "\n"; }
  void check_disjoint_writes(const Stmt& body, const std::vector<const For*>& bound);
  void stmt(const Stmt& s, int depth, const std::vector<Expr>& guard);
  void seq(const std::vector<Stmt>& stmts, int depth, const std::vector<Expr>& guard);
  void loop(const For& f, int depth, const std::vector<Expr>& guard);
  bool pipelined_loop(const For& f, int depth, const std::vector<Expr>& guard);
  void set_copy(const std::vector<const BufferNode*>& tiles, const std::string& var);
  void allocate(const Allocate& a, int depth, const std::vector<Expr>& guard);
  void store(const Store& st, int depth);
  void fill(const Stmt& s, int depth);
  void fill_vector(const std::vector<const For*>& loops, const std::vector<Expr>& conds, const Store& st, int va,
                   std::int64_t total, int depth);
  Expr flat_index(const BufferNode* b, const std::vector<Expr>& idx, const char* what);
  int vector_axis(const std::vector<const For*>& loops, const Store& st);
  bool aligned4(const Expr& flat, const VarNode* v) const;

  const LoweredFunc& f_;
  const std::vector<Buffer>& params_;
  const std::vector<std::string>& param_idents_;
  CudaKernelInfo info_;
  std::string out_;
  std::map<const BufferNode*, BufState> bufs_;
  std::map<const VarNode*, std::vector<std::string>> names_;
  std::set<std::string> active_;  // variable names in scope
  detail::Ranges ranges_;
  int serial_loops_ = 0;  // serial loops around the statement being emitted
  std::set<const VarNode*> thread_vars_;  // the variables of the loops bound to threadIdx
};

std::string CudaEmitter::fresh(const std::string& base) const {
  std::string s = base;
  auto taken = [&](const std::string& x) {
    if (active_.count(x)) return true;
    for (const auto& [node, b] : bufs_)
      if (b.ident == x) return true;
    return false;
  };
  for (int i = 1; taken(s); ++i) s = base + "_" + std::to_string(i);
  return s;
}

std::string CudaEmitter::bind(const VarNode* v, std::int64_t extent) {
  auto it = names_.find(v);
  MLS_CHECK(it == names_.end() || it->second.empty(), "generate_cuda: loop variable '", v->name, "' of kernel '",
            info_.name, "' is bound twice in nested loops");
  const std::string id = fresh(cuda_identifier(v->name));
  names_[v].push_back(id);
  active_.insert(id);
  ranges_[v] = {0, extent - 1};
  return id;
}

void CudaEmitter::unbind(const VarNode* v) {
  active_.erase(names_.at(v).back());
  names_.at(v).pop_back();
  ranges_.erase(v);
}

BufState& CudaEmitter::buf(const BufferNode* b, const char* what) {
  auto it = bufs_.find(b);
  MLS_CHECK(it != bufs_.end(), "generate_cuda: buffer '", b->name, "' (", what, " in kernel '", info_.name,
            "') is neither a parameter nor allocated in the kernel");
  MLS_CHECK(it->second.live, "generate_cuda: buffer '", b->name, "' (", what, " in kernel '", info_.name,
            "') is used outside its allocation");
  return it->second;
}

cd::CText CudaEmitter::expr(const Expr& e) {
  cd::ExprContext cx;
  cx.dialect = &cd::cuda_dialect();
  cx.var = [this](const VarNode* v) {
    auto it = names_.find(v);
    MLS_CHECK(it != names_.end() && !it->second.empty(), "generate_cuda: variable '", v->name, "' of kernel '",
              info_.name, "' is used outside its loop");
    return it->second.back();
  };
  cx.load = [this](const Load& l) { return element(l.buffer.get(), l.indices, "load"); };
  cx.ranges = &ranges_;
  cx.func = info_.name;
  return cd::c_expr(e, cx);
}

Expr CudaEmitter::flat_index(const BufferNode* b, const std::vector<Expr>& idx, const char* what) {
  BufState& bs = buf(b, what);
  MLS_CHECK(idx.size() == bs.shape.size(), "generate_cuda: ", idx.size(), " indices for buffer '", b->name,
            "' of shape ", detail::shape_text(bs.shape));
  Expr flat = idx.empty() ? Expr(0) : idx[0] * Expr(bs.strides[0]);
  for (std::size_t d = 1; d < idx.size(); ++d) flat = flat + idx[d] * Expr(bs.strides[d]);
  return detail::simplify(flat);
}

std::string CudaEmitter::element(const BufferNode* b, const std::vector<Expr>& idx, const char* what) {
  const Expr flat = flat_index(b, idx, what);
  const BufState& bs = buf(b, what);
  return bs.ident + "[" + bs.copy + expr(flat).s + "]";
}

/// Whether the flat index `flat` is a multiple of 4 whenever `v` is: affine, `v` with coefficient 1,
/// every other term's coefficient and the constant multiples of 4 (every variable an integer).
bool CudaEmitter::aligned4(const Expr& flat, const VarNode* v) const {
  const detail::Affine a = detail::to_affine(flat);
  if (a.constant % 4 != 0) return false;
  bool has_v = false;
  for (const auto& t : a.terms) {
    if (!t.var) return false;  // a floor division, a product: not followed
    if (t.var == v) {
      if (t.coeff != 1) return false;
      has_v = true;
    } else if (t.coeff % 4 != 0) {
      return false;
    }
  }
  return has_v;
}

/// The loop of a shared tile's fill whose four consecutive iterations read four consecutive, 16-byte
/// aligned floats of the source (a float4 load), or -1: the fill copies (its value is a load of a
/// global buffer), the loop's extent is a multiple of 4, and the load's flat index is aligned4 in it.
int CudaEmitter::vector_axis(const std::vector<const For*>& loops, const Store& st) {
  const auto* l = st.value.as<Load>();
  if (!l || l->buffer->scope != Scope::Global) return -1;
  const Expr src = flat_index(l->buffer.get(), l->indices, "load");
  for (std::size_t i = loops.size(); i-- > 0;) {
    if (loops[i]->extent.as<IntImm>()->value % 4 != 0) continue;
    if (aligned4(src, loops[i]->var.get())) return static_cast<int>(i);
  }
  return -1;
}

/// Threads of a kernel must not write one element of a global buffer. Certain: a store whose indices do not
/// read a bound variable (all the threads along it write the same elements). Proven safe: for each bound
/// loop, two of its iterations write disjoint elements while the loops inside it vary (writes_disjoint).
/// In between (indices the analysis cannot follow, e.g. of a fused loop), the schedule is trusted.
void CudaEmitter::check_disjoint_writes(const Stmt& body, const std::vector<const For*>& bound) {
  detail::Ranges path;
  std::function<void(const Stmt&)> walk = [&](const Stmt& s) {
    if (!s.defined()) return;
    if (const auto* x = s.as<For>()) {
      const auto* ex = x->extent.as<IntImm>();
      if (ex) path[x->var.get()] = {0, ex->value - 1};
      walk(x->body);
      path.erase(x->var.get());
    } else if (const auto* x = s.as<Allocate>()) {
      walk(x->body);
    } else if (const auto* x = s.as<Seq>()) {
      for (const auto& c : x->stmts) walk(c);
    } else if (const auto* x = s.as<IfThenElse>()) {
      walk(x->then_case);
      walk(x->else_case);
    } else if (const auto* x = s.as<Store>()) {
      if (x->buffer->scope != Scope::Global) return;  // a thread's own tile, or the block's (filled apart)
      for (std::size_t k = 0; k < bound.size(); ++k) {
        detail::Ranges inner = path;
        for (std::size_t j = k + 1; j < bound.size(); ++j)
          inner[bound[j]->var.get()] = {0, bound[j]->extent.as<IntImm>()->value - 1};
        const VarNode* v = bound[k]->var.get();
        const bool reads_v = std::any_of(x->indices.begin(), x->indices.end(),
                                         [&](const Expr& e) { return detail::uses_any(e, {v}); });
        MLS_CHECK(reads_v || cd::writes_disjoint(x->indices, {}, v, inner), "generate_cuda: the threads of loop '",
                  bound[k]->var.name(), "' (", thread_tag_name(bound[k]->thread), ") of kernel '", info_.name,
                  "' may write the same element of '", x->buffer->name, "' (", to_string(s),
                  "): bind the loops that index it, or compute it at a loop inside the bound ones");
      }
    }
  };
  walk(body);
}

void CudaEmitter::stmt(const Stmt& s, int depth, const std::vector<Expr>& guard) {
  if (is_fill(s)) {  // never guarded: every thread of the block takes its part
    fill(s, depth);
    line(depth, "__syncthreads();  // filled: every thread of the block may read it");
    return;
  }
  if (!guard.empty() && !contains_fill(s)) {
    line(depth, "if (" + expr(conjunction(guard)).s + ") {");
    stmt(s, depth + 1, {});
    line(depth, "}");
    return;
  }
  if (const auto* f = s.as<For>()) {
    loop(*f, depth, guard);
  } else if (const auto* st = s.as<Store>()) {
    store(*st, depth);
  } else if (const auto* a = s.as<Allocate>()) {
    allocate(*a, depth, guard);
  } else if (const auto* q = s.as<Seq>()) {
    seq(q->stmts, depth, guard);
  } else if (const auto* i = s.as<IfThenElse>()) {
    if (contains_fill(s)) {  // the condition moves inside, past the barriers every thread must reach
      MLS_CHECK(!i->else_case.defined(), "generate_cuda: an if/else around a shared tile's fill in kernel '",
                info_.name, "': the lowering makes none");
      std::vector<Expr> g = guard;
      g.push_back(i->cond);
      return stmt(i->then_case, depth, g);
    }
    line(depth, "if (" + expr(i->cond).s + ") {");
    stmt(i->then_case, depth + 1, {});
    if (i->else_case.defined()) {
      line(depth, "} else {");
      stmt(i->else_case, depth + 1, {});
    }
    line(depth, "}");
  } else if (const auto* c = s.as<Call>()) {
    fail("generate_cuda: kernel '", info_.name, "' calls intrinsic '", c->intrinsic->name,
         "' (a tensorized tile): intrinsics are CPU code; do not tensorize a schedule for CUDA");
  }
}

void CudaEmitter::seq(const std::vector<Stmt>& stmts, int depth, const std::vector<Expr>& guard) {
  std::vector<std::string> filled;
  for (std::size_t i = 0; i < stmts.size();) {
    if (!is_fill(stmts[i])) {
      stmt(stmts[i++], depth, guard);
      continue;
    }
    std::string names;
    for (; i < stmts.size() && is_fill(stmts[i]); ++i) {
      fill(stmts[i], depth);
      for (const auto& b : stored(stmts[i])) {
        names += (names.empty() ? "" : ", ") + b->name;
        filled.push_back(b->name);
      }
    }
    line(depth, "__syncthreads();  // " + names + " filled: every thread of the block may read them");
  }
  if (!filled.empty() && serial_loops_ > 0) {
    std::string names;
    for (const auto& n : filled) names += (names.empty() ? "" : ", ") + n;
    line(depth, "__syncthreads();  // every thread is done with " + names + ": the next fill may overwrite them");
  }
}

void CudaEmitter::loop(const For& f, int depth, const std::vector<Expr>& guard) {
  const auto* mn = f.min.as<IntImm>();
  const auto* ex = f.extent.as<IntImm>();
  MLS_CHECK(mn && ex && mn->value == 0, "generate_cuda: loop '", f.var.name(), "' of kernel '", info_.name,
            "' has a non-constant range; the lowering makes loops from 0 to a constant");
  if (pipelined_loop(f, depth, guard)) return;
  const std::string v = bind(f.var.get(), ex->value);
  const char* kind = f.kind == ForKind::Parallel     ? "parallel: "
                     : f.kind == ForKind::Vectorized ? "vectorized: "
                                                     : "";
  if (f.kind == ForKind::Unrolled) line(depth, "#pragma unroll");
  line(depth, "for (long long " + v + " = 0; " + v + " < " + cd::c_int_literal(ex->value) + "; ++" + v + ") {" +
                  (*kind ? std::string("  // ") + kind + "a serial loop of each thread" : ""));
  ++serial_loops_;
  stmt(f.body, depth + 1, guard);
  --serial_loops_;
  line(depth, "}");
  unbind(f.var.get());
}

/// The copy of double-buffered `tiles` the statements emitted next use: that of iteration `var` (a
/// C++ expression) of their loop, or copy 0 when `var` is empty.
void CudaEmitter::set_copy(const std::vector<const BufferNode*>& tiles, const std::string& var) {
  for (const BufferNode* b : tiles) {
    BufState& bs = bufs_.at(b);
    bs.copy = var.empty() ? "" : "((" + var + ") & 1)*" + std::to_string(bs.size) + " + ";
  }
}

/// A serial loop whose body is the allocation of shared tiles, some double-buffered
/// (Stage::double_buffer), around fills of only those tiles followed by statements that read them
/// and fill nothing: software-pipelined. Iteration 0's fills before the loop; in iteration i, the
/// fills of iteration i + 1 into the other copy, then the statements reading copy i & 1, then one
/// barrier. Copy (i + 1) & 1 was last read in iteration i - 1, before that iteration's barrier, so
/// nobody reads what is being filled; copy i & 1 was filled before the barrier of iteration i - 1
/// (or the prologue's). False (nothing emitted) for any other loop.
bool CudaEmitter::pipelined_loop(const For& f, int depth, const std::vector<Expr>& guard) {
  if (f.kind != ForKind::Serial && f.kind != ForKind::Unrolled) return false;
  std::vector<const Allocate*> allocs;
  Stmt body = f.body;
  while (const auto* a = body.as<Allocate>()) {
    if (a->buffer->scope != Scope::Shared) return false;
    allocs.push_back(a);
    body = a->body;
  }
  std::vector<const BufferNode*> tiles;  // the double-buffered ones
  for (const Allocate* a : allocs)
    if (a->buffer->double_buffer) tiles.push_back(a->buffer.get());
  if (tiles.empty()) return false;
  const std::vector<Stmt> stmts = body.as<Seq>() ? body.as<Seq>()->stmts : std::vector<Stmt>{body};
  std::size_t nfill = 0;
  for (; nfill < stmts.size() && is_fill(stmts[nfill]); ++nfill)
    for (const auto& b : stored(stmts[nfill]))
      if (!b->double_buffer) return false;  // a fill of a single-copy tile: the usual order
  if (nfill == 0) return false;
  for (std::size_t i = nfill; i < stmts.size(); ++i)
    if (contains_fill(stmts[i])) return false;
  const std::int64_t extent = f.extent.as<IntImm>()->value;
  std::string names;
  for (const BufferNode* b : tiles) names += (names.empty() ? "" : ", ") + b->name;
  for (const Allocate* a : allocs) bufs_.at(a->buffer.get()).live = true;
  // Iteration 0's tiles, into copy 0.
  {
    const std::string v = bind(f.var.get(), extent);
    line(depth, "{  // " + names + " (double-buffered): the first iteration's copy");
    line(depth + 1, "const long long " + v + " = 0;");
    set_copy(tiles, "");
    for (std::size_t i = 0; i < nfill; ++i) fill(stmts[i], depth + 1);
    line(depth, "}");
    unbind(f.var.get());
  }
  line(depth, "__syncthreads();  // " + names + " filled: every thread of the block may read them");
  const std::string v = bind(f.var.get(), extent);
  if (f.kind == ForKind::Unrolled) line(depth, "#pragma unroll");
  line(depth, "for (long long " + v + " = 0; " + v + " < " + cd::c_int_literal(extent) + "; ++" + v + ") {");
  ++serial_loops_;
  line(depth + 1, "if (" + v + " + 1 < " + cd::c_int_literal(extent) + ") {  // the next iteration's " + names +
                      ", into the other copy");
  {
    const std::string next = fresh(v + "_next");
    names_[f.var.get()].push_back(next);
    active_.insert(next);
    line(depth + 2, "const long long " + next + " = " + v + " + 1;");
    set_copy(tiles, next);
    for (std::size_t i = 0; i < nfill; ++i) fill(stmts[i], depth + 2);
    names_[f.var.get()].pop_back();
    active_.erase(next);
  }
  line(depth + 1, "}");
  set_copy(tiles, v);
  for (std::size_t i = nfill; i < stmts.size(); ++i) stmt(stmts[i], depth + 1, guard);
  set_copy(tiles, "");
  line(depth + 1, "__syncthreads();  // copy " + v + " & 1 read, the other filled: the next iteration may start");
  --serial_loops_;
  line(depth, "}");
  unbind(f.var.get());
  for (const Allocate* a : allocs) bufs_.at(a->buffer.get()).live = false;
  return true;
}

void CudaEmitter::allocate(const Allocate& a, int depth, const std::vector<Expr>& guard) {
  BufState& bs = bufs_.at(a.buffer.get());
  MLS_CHECK(a.buffer->scope != Scope::Global, "generate_cuda: intermediate '", a.buffer->name, "' of kernel '",
            info_.name, "' (Scope::Global) is allocated inside a loop nest; the lowering puts those at the top");
  MLS_CHECK(!bs.live, "generate_cuda: buffer '", a.buffer->name, "' of kernel '", info_.name,
            "' is allocated inside its own allocation");
  if (a.buffer->scope == Scope::Local)  // shared tiles are declared at the top of the kernel
    line(depth, "float " + bs.ident + "[" + std::to_string(bs.size) + "];  // " + a.buffer->name + ": " +
                    detail::shape_text(bs.shape) + ", local (this thread's)");
  bs.live = true;
  stmt(a.body, depth, guard);
  bufs_.at(a.buffer.get()).live = false;
}

void CudaEmitter::store(const Store& st, int depth) {
  const std::string lhs = element(st.buffer.get(), st.indices, "store");
  if (const auto* b = st.value.as<Binary>(); b && (b->op == BinaryOp::Add || b->op == BinaryOp::Mul)) {
    if (const auto* l = b->a.as<Load>(); l && l->buffer == st.buffer && element(l->buffer.get(), l->indices, "load") == lhs)
      return line(depth, lhs + (b->op == BinaryOp::Add ? " += " : " *= ") + expr(b->b).s + ";");
  }
  line(depth, lhs + " = " + expr(st.value).s + ";");
}

/// A shared tile's fill: its loop nest (loops and guards around one store) as one loop over the
/// nest's points, strided by the block's size: thread t does points t, t + T, t + 2T, ...
void CudaEmitter::fill(const Stmt& s, int depth) {
  std::vector<const For*> loops;
  std::vector<Expr> conds;
  const Store* st = nullptr;
  for (Stmt cur = s; !st;) {
    if (const auto* f = cur.as<For>()) {
      const auto* mn = f->min.as<IntImm>();
      const auto* ex = f->extent.as<IntImm>();
      MLS_CHECK(mn && ex && mn->value == 0, "generate_cuda: loop '", f->var.name(), "' of a shared tile's fill in kernel '",
                info_.name, "' has a non-constant range");
      loops.push_back(f);
      cur = f->body;
    } else if (const auto* i = cur.as<IfThenElse>(); i && !i->else_case.defined()) {
      conds.push_back(i->cond);
      cur = i->then_case;
    } else if (const auto* x = cur.as<Store>()) {
      st = x;
    } else {
      const auto bufs = stored(s);
      fail("generate_cuda: the fill of shared tile '", bufs.empty() ? std::string("?") : bufs[0]->name, "' in kernel '",
           info_.name, "' is not a plain loop nest around one store:\n", to_string(s));
    }
  }
  // The block fills one tile: nothing of it may depend on which thread copies which element.
    std::vector<Expr> parts = st->indices;
  parts.push_back(st->value);
  parts.insert(parts.end(), conds.begin(), conds.end());
  for (const auto& e : parts)
    for (const auto* v : detail::vars_of(e))
      MLS_CHECK(!thread_vars_.count(v), "generate_cuda: the fill of shared tile '", st->buffer->name, "' in kernel '",
                info_.name, "' reads the thread index '", v->name, "' (", to_string(e),
                "): a shared tile is the block's, one window for all its threads");
  std::int64_t total = 1;
  for (const For* f : loops) total *= f->extent.as<IntImm>()->value;
  const std::int64_t threads = info_.dims.threads_per_block();
  if (const int va = vector_axis(loops, *st); va >= 0) return fill_vector(loops, conds, *st, va, total, depth);
  line(depth, "// " + st->buffer->name + ": the block's " + std::to_string(threads) + " threads copy its " +
                  std::to_string(total) + " elements together");
  line(depth, "for (long long mls_e = mls_tid; mls_e < " + cd::c_int_literal(total) + "; mls_e += " +
                  cd::c_int_literal(threads) + ") {");
  std::int64_t stride = total;
  for (std::size_t i = 0; i < loops.size(); ++i) {
    const std::int64_t ext = loops[i]->extent.as<IntImm>()->value;
    stride /= ext;
    const std::string v = bind(loops[i]->var.get(), ext);
    std::string value = "mls_e";
    if (stride > 1) value = i == 0 ? "mls_e / " + cd::c_int_literal(stride) : "mls_e / " + cd::c_int_literal(stride) + " % " + cd::c_int_literal(ext);
    else if (i > 0) value = "mls_e % " + cd::c_int_literal(ext);
    line(depth + 1, "const long long " + v + " = " + value + ";");
  }
  if (!conds.empty()) {
    line(depth + 1, "if (" + expr(conjunction(conds)).s + ") {");
    store(*st, depth + 2);
    line(depth + 1, "}");
  } else {
    store(*st, depth + 1);
  }
  line(depth, "}");
  for (auto it = loops.rbegin(); it != loops.rend(); ++it) unbind((*it)->var.get());
}

/// A shared tile's fill by float4 loads: the fill's points in groups of four consecutive iterations of
/// loop `va` (vector_axis), the groups enumerated with `va` innermost (consecutive threads read
/// consecutive float4s of a row of the source). A group whose four guards hold, from a 16-byte
/// aligned source, is one float4 load and one float4 store (when the tile's four elements are
/// consecutive and aligned too) or four scalar stores (a transposing tile); any other group (a tail,
/// an unaligned pointer) is copied element by element, each guarded, as the scalar fill does.
void CudaEmitter::fill_vector(const std::vector<const For*>& loops, const std::vector<Expr>& conds, const Store& st,
                              int va, std::int64_t total, int depth) {
  const auto& l = *st.value.as<Load>();
  const std::int64_t threads = info_.dims.threads_per_block();
  const std::int64_t groups = total / 4;
  line(depth, "// " + st.buffer->name + ": the block's " + std::to_string(threads) + " threads copy its " +
                  std::to_string(total) + " elements together, a float4 of " + l.buffer->name + " at a time");
  line(depth, "for (long long mls_e = mls_tid; mls_e < " + cd::c_int_literal(groups) + "; mls_e += " +
                  cd::c_int_literal(threads) + ") {");
  // The enumeration order: the other loops in their order, then `va` (its extent in groups of 4).
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < loops.size(); ++i)
    if (static_cast<int>(i) != va) order.push_back(i);
  order.push_back(static_cast<std::size_t>(va));
  std::int64_t stride = groups;
  for (std::size_t n = 0; n < order.size(); ++n) {
    const For* f = loops[order[n]];
    const std::int64_t ext = f->extent.as<IntImm>()->value / (f == loops[static_cast<std::size_t>(va)] ? 4 : 1);
    stride /= ext;
    const std::string v = bind(f->var.get(), f->extent.as<IntImm>()->value);
    std::string value = "mls_e";
    if (stride > 1) value = n == 0 ? "mls_e / " + cd::c_int_literal(stride) : "mls_e / " + cd::c_int_literal(stride) + " % " + cd::c_int_literal(ext);
    else if (n > 0) value = "mls_e % " + cd::c_int_literal(ext);
    if (f == loops[static_cast<std::size_t>(va)]) value = "4 * (" + value + ")";
    line(depth + 1, "const long long " + v + " = " + value + ";");
  }
  const For* vf = loops[static_cast<std::size_t>(va)];
  const VarNode* vv = vf->var.get();
  auto lane = [&](const Expr& e, int q) { return q == 0 ? e : detail::simplify(detail::substitute(e, {{vv, Expr(vf->var) + Expr(q)}})); };
  std::vector<Expr> all;  // the guards of the four elements
  for (int q = 0; q < 4; ++q)
    for (const auto& c : conds) all.push_back(lane(c, q));
  const std::string src = buf(l.buffer.get(), "load").ident;
  std::string cond = "(reinterpret_cast<unsigned long long>(" + src + ") & 15) == 0";
  if (!all.empty()) cond += " && " + expr(conjunction(all)).s;
  line(depth + 1, "if (" + cond + ") {");
  line(depth + 2, "const float4 mls_v = *reinterpret_cast<const float4*>(&" + element(l.buffer.get(), l.indices, "load") + ");");
  const Expr dst = flat_index(st.buffer.get(), st.indices, "store");
  const BufState& dbs = buf(st.buffer.get(), "store");
  if (aligned4(dst, vv) && (dbs.copy.empty() || dbs.size % 4 == 0)) {
    line(depth + 2, "*reinterpret_cast<float4*>(&" + element(st.buffer.get(), st.indices, "store") + ") = mls_v;");
  } else {
    const char* part[4] = {"x", "y", "z", "w"};
    for (int q = 0; q < 4; ++q) {
      std::vector<Expr> idx;
      for (const auto& e : st.indices) idx.push_back(lane(e, q));
      line(depth + 2, element(st.buffer.get(), idx, "store") + " = mls_v." + part[q] + ";");
    }
  }
  line(depth + 1, "} else {  // a tail or an unaligned source: element by element");
  line(depth + 2, "for (long long mls_q = 0; mls_q < 4; ++mls_q) {");
  {
    // The element's own name for the loop variable, inside the lane loop.
    const std::string group = names_.at(vv).back();
    unbind(vv);
    active_.insert(group);  // still declared outside: keep its name taken
    const std::string v = bind(vv, vf->extent.as<IntImm>()->value);
    line(depth + 3, "const long long " + v + " = " + group + " + mls_q;");
    if (!conds.empty()) {
      line(depth + 3, "if (" + expr(conjunction(conds)).s + ") {");
      store(st, depth + 4);
      line(depth + 3, "}");
    } else {
      store(st, depth + 3);
    }
    unbind(vv);
    names_[vv].push_back(group);  // the group's name again, for the unbind below
    ranges_[vv] = {0, vf->extent.as<IntImm>()->value - 1};
  }
  line(depth + 2, "}");
  line(depth + 1, "}");
  line(depth, "}");
  for (auto it = loops.rbegin(); it != loops.rend(); ++it) unbind((*it)->var.get());
}

std::string CudaEmitter::kernel(const Stmt& nest) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    BufState bs{param_idents_[i], params_[i]->shape, buffer_span(*params_[i]), true, buffer_strides(*params_[i])};
    bufs_[params_[i].get()] = bs;
  }
  // The launch: the bound loops at the top of the nest, and the guards between them.
  std::vector<const For*> bound;
  std::vector<Expr> guard;
  Stmt body = nest;
  for (;;) {
    if (const auto* f = body.as<For>(); f && f->kind == ForKind::ThreadBinding) {
      const auto* mn = f->min.as<IntImm>();
      MLS_CHECK(f->extent.as<IntImm>(), "generate_cuda: loop '", f->var.name(), "' of kernel '", info_.name,
                "' is bound to ", thread_tag_name(f->thread), " with a non-constant extent ", to_string(f->extent),
                ": a launch needs a constant");
      MLS_CHECK(mn && mn->value == 0, "generate_cuda: loop '", f->var.name(), "' of kernel '", info_.name,
                "' is bound to ", thread_tag_name(f->thread), " but starts at ", to_string(f->min), ", expected 0");
      bound.push_back(f);
      body = f->body;
    } else if (const auto* i = body.as<IfThenElse>(); i && !i->else_case.defined() && first_bound(i->then_case)) {
      guard.push_back(i->cond);
      body = i->then_case;
    } else {
      break;
    }
  }
  if (const For* inner = first_bound(body))
    fail("generate_cuda: loop '", inner->var.name(), "' of kernel '", info_.name, "' is bound to ",
         thread_tag_name(inner->thread), " but lies inside an unbound loop or another statement of its nest: bound "
         "loops must be the outermost loops (the launch rule of Stage::bind); compute stages at the innermost bound "
         "loop or inside it. The nest:\n", to_string(nest));
  std::vector<std::pair<ThreadTag, std::int64_t>> tags;
  for (const For* f : bound) tags.emplace_back(f->thread, f->extent.as<IntImm>()->value);
  info_.dims = launch_dims(tags, info_.name);
  for (const auto& b : stored(nest)) info_.writes.push_back(b->name);
  check_disjoint_writes(body, bound);
  // Local and shared tiles: names; shared ones are declared here.
  std::vector<std::string> decls;
  for_each_stmt(body, [&](const Stmt& s) {
    const auto* a = s.as<Allocate>();
    if (!a || bufs_.count(a->buffer.get())) return;
    BufState bs{fresh(cuda_identifier(a->buffer->name)), a->buffer->shape, buffer_span(*a->buffer), false,
                buffer_strides(*a->buffer)};
    if (a->buffer->scope == Scope::Shared) {
      const std::int64_t copies = a->buffer->double_buffer ? 2 : 1;
      info_.shared_bytes += 4 * bs.size * copies;
      decls.push_back("__shared__ __align__(16) float " + bs.ident + "[" + std::to_string(bs.size * copies) + "];  // " +
                      a->buffer->name + ": " + detail::shape_text(bs.shape) + ", shared by the block's threads" +
                      (copies == 2 ? ", two copies (double-buffered)" : ""));
    }
    bufs_[a->buffer.get()] = bs;
  });
  MLS_CHECK(info_.shared_bytes <= kMaxSharedBytes, "generate_cuda: kernel '", info_.name, "' needs ", info_.shared_bytes,
            " bytes of __shared__ memory; a block has at most ", kMaxSharedBytes, " (smaller tiles)");
  const LaunchDims& d = info_.dims;
  out_.clear();
  for (const auto& s : decls) line(1, s);
  if (!decls.empty()) {
    std::string tid = "threadIdx.x";
    if (d.block[1] > 1 || d.block[2] > 1) tid += " + " + std::to_string(d.block[0]) + " * threadIdx.y";
    if (d.block[2] > 1) tid += " + " + std::to_string(d.block[0] * d.block[1]) + " * threadIdx.z";
    line(1, "const long long mls_tid = " + tid + ";  // this thread's number in its block");
  }
  if (bound.empty()) line(1, "// No loop is bound to a GPU index: one thread runs the whole nest.");
  for (const For* f : bound) {
    if (is_thread_index(f->thread)) thread_vars_.insert(f->var.get());
    const std::string v = bind(f->var.get(), f->extent.as<IntImm>()->value);
    line(1, "const long long " + v + " = " + thread_tag_name(f->thread) + ";  // " + f->var.name() +
                " in thread_binding(" + to_string(f->extent) + ")");
  }
  stmt(body, 1, guard);
  std::string head = "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(d.threads_per_block()) + ") " +
                     info_.name + "(";
  for (std::size_t i = 0; i < params_.size(); ++i)
    head += std::string(i ? ", " : "") + "float* __restrict__ " + param_idents_[i];
  head += ") {\n";
  for (std::size_t i = 0; i < params_.size(); ++i)
    head += indent(1) + "// " + param_idents_[i] + ": float32" + detail::shape_text(params_[i]->shape) +
            (i < f_.args.size() ? "" : ", workspace") + "\n";
  for (auto it = bound.rbegin(); it != bound.rend(); ++it) unbind((*it)->var.get());
  return head + out_ + "}\n";
}

}  // namespace

CudaSource generate_cuda(const LoweredFunc& f) {
  MLS_CHECK(f.body.defined(), "generate_cuda: function '", f.name, "' has no body");
  CudaSource out;
  out.func = f.name;
  out.params = f.args;
  out.num_args = f.args.size();
  Stmt s = f.body;
  while (const auto* a = s.as<Allocate>()) {  // intermediates of Scope::Global: the workspace
    MLS_CHECK(a->buffer->scope == Scope::Global, "generate_cuda: tile '", a->buffer->name, "' of '", f.name,
              "' is allocated outside every loop nest; compute it at a loop of its consumer");
    out.params.push_back(a->buffer);
    s = a->body;
  }
  std::vector<Stmt> parts = s.as<Seq>() ? s.as<Seq>()->stmts : std::vector<Stmt>{s};
  std::vector<std::string> idents;
  std::set<std::string> taken;
  for (const auto& b : out.params) {
    std::string id = cuda_identifier(b->name);
    for (int i = 1; taken.count(id); ++i) id = cuda_identifier(b->name) + "_" + std::to_string(i);
    taken.insert(id);
    idents.push_back(id);
  }
  std::string kernels;
  std::set<std::string> names;
  for (const auto& part : parts) {
    std::string name = c_identifier(f.name);
    if (parts.size() > 1) {
      const auto w = stored(part);
      name = c_identifier(f.name + "_" + (w.empty() ? std::string("nest") : w[0]->name));
    }
    const std::string base = name;
    for (int i = 2; names.count(name); ++i) name = base + "_" + std::to_string(i);
    names.insert(name);
    CudaEmitter e(f, out.params, idents, name);
    std::string text = e.kernel(part);
    std::string nest = to_string(part), comment;
    for (std::size_t pos = 0; pos < nest.size();) {
      std::size_t nl = nest.find('\n', pos);
      if (nl == std::string::npos) nl = nest.size();
      comment += "//   " + nest.substr(pos, nl - pos) + "\n";
      pos = nl + 1;
    }
    kernels += "// Kernel " + name + ": " + e.info().dims.to_string() + ", " + std::to_string(e.info().shared_bytes) +
               " bytes of shared memory. Its loop nest:\n" + comment + text + "\n";
    out.kernels.push_back(e.info());
  }
  std::string head = "// Generated by mls::kernels::te::generate_cuda (lab 4 part 2, ML compilation).\n";
  head += "// Function '" + f.name + "': " + std::to_string(parts.size()) + " kernel" + (parts.size() > 1 ? "s" : "") +
          ", launched in this order:";
  for (const auto& k : out.kernels) head += " " + k.name;
  head += ".\n// Parameters of every kernel (float32, row-major): ";
  for (std::size_t i = 0; i < out.params.size(); ++i)
    head += (i ? ", " : "") + idents[i] + detail::shape_text(out.params[i]->shape) + (i < out.num_args ? "" : " (workspace)");
  head += ".\n\n";
  out.source = head + kCudaPrelude + kernels;
  return out;
}

}  // namespace mls::kernels::te
