#pragma once
/// Lab 4 part 2, ML compilation: the loop-nest IR that `lower` (mls/kernels/schedule.hpp) makes
/// of a scheduled tensor expression, its printer and its interpreter (the reference semantics).
///
/// A statement is an immutable tree of `StmtNode`s, each a `std::variant` of plain structs
/// (For, Store, Allocate, Seq, IfThenElse, Call); expressions are mls/kernels/te.hpp's `Expr`
/// (Load reads a buffer; Reduce never appears in the IR). Invariants of what `lower` emits:
///   - every For has min 0 and a constant extent (IntImm >= 2: a loop of one iteration is left
///     out, its variable replaced by 0); its variable is bound by no other For around it;
///   - tails (an extent that a split factor does not divide) are IfThenElse guards without an
///     else branch, placed just inside the loop of the last variable they read; a guard that
///     bounds analysis proves always true is left out;
///   - every buffer is a function argument (placeholders, then outputs) or made by an Allocate
///     (intermediates at the top, cache tiles of Scope::Local or Shared inside the loop they live in),
///     read and written only inside that Allocate;
///   - a Call is a tensorized tile: each operand an affine window of a buffer (see TileArg).
/// Loop kinds are hints to a code generator; the interpreter runs every loop serially in order.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "mls/kernels/te.hpp"

namespace mls::kernels::te {

/// How a loop is to run. ThreadBinding: the loop is a GPU index (For::thread says which): each
/// iteration runs on its own thread or block (generate_cuda); the interpreter runs it serially,
/// which is its reference semantics.
enum class ForKind { Serial, Parallel, Vectorized, Unrolled, ThreadBinding };

/// The GPU index a ThreadBinding loop stands for (CUDA's blockIdx.x/y/z and threadIdx.x/y/z).
enum class ThreadTag { None, BlockX, BlockY, BlockZ, ThreadX, ThreadY, ThreadZ };
/// "blockIdx.x", ..., "threadIdx.z"; "none" for ThreadTag::None.
const char* thread_tag_name(ThreadTag tag);
/// Whether `tag` is one of threadIdx.x/y/z (a thread of a block; else a block of the grid).
inline bool is_thread_index(ThreadTag tag) {
  return tag == ThreadTag::ThreadX || tag == ThreadTag::ThreadY || tag == ThreadTag::ThreadZ;
}

/// Which computation a tensor intrinsic performs on its tile.
///   Gemm (tile {M, N, K}): operands (out, a, b); out[i, j] += sum_k a[i, j, k] * b[i, j, k]
///     (an operand's view gives each tile axis a stride; out's stride along k is 0), the compute
///     being a sum of a product of two loads. Its reset sets out[i, j] = 0.
///   Copy (tile {M, N, ...}): operands (dst, src); dst[i, j, ...] = src[i, j, ...], the compute
///     being one load.
enum class IntrinsicPattern { Gemm, Copy };

/// The C-callable reference implementation of an intrinsic: `ptrs[a]` is operand a's first
/// element, `strides[a * rank + t]` its stride in floats along tile axis t, `extents[t]` the
/// tile's extent along t (rank = tile.size()).
using IntrinsicFn = void (*)(float* const* ptrs, const std::int64_t* strides,
                             const std::int64_t* extents);

/// A tensor intrinsic (the slide's `fused_gemm8x8_add`, `dma_copy2d`): what a code generator
/// maps to one hardware instruction or library call, and what `Stage::tensorize` puts in place of
/// a loop nest whose tile has exactly this shape.
struct Intrinsic {
  std::string name;
  IntrinsicPattern pattern = IntrinsicPattern::Copy;
  std::vector<std::int64_t> tile;  // Gemm: {M, N, K}; Copy: one extent per tile axis
  IntrinsicFn update = nullptr;    // the computation on one tile
  std::string reset_name;          // Gemm: the zero-fill of the output tile ("" = none)
  IntrinsicFn reset = nullptr;
  /// C++ statements a code generator (mls/kernels/codegen.hpp) makes the body of `name`: they read
  /// `ptrs`, `strides` and `extents` exactly as `update` does (the call site passes the strides and
  /// extents as compile-time constants, so a body may test them and specialise). "" = the code
  /// generator's plain loops of the pattern. The interpreter always runs `update`.
  std::string update_source;
  /// The same for `reset` ("" = plain loops).
  std::string reset_source;
};

/// out[i, j] += sum_k a[i, j, k] b[i, j, k] on an M x N x K tile, reset "fill_zero<M>x<N>".
/// Default name "gemm<M>x<N>x<K>_add". Extents >= 1.
Intrinsic gemm_intrinsic(std::int64_t m, std::int64_t n, std::int64_t k, std::string name = "");
/// dst = src on a tile of `extents` (1 to 4 axes). Default name "copy<M>x<N>...".
Intrinsic copy_intrinsic(std::vector<std::int64_t> extents, std::string name = "");

struct StmtNode;
/// Handle to an immutable statement; copies share the tree.
class Stmt {
 public:
  Stmt() = default;
  explicit Stmt(std::shared_ptr<const StmtNode> node) : node_(std::move(node)) {}
  const StmtNode& operator*() const { return *node_; }
  const StmtNode* operator->() const { return node_.get(); }
  const StmtNode* get() const { return node_.get(); }
  bool defined() const { return node_ != nullptr; }
  /// The node's alternative, or null.
  template <class T>
  const T* as() const;

 private:
  std::shared_ptr<const StmtNode> node_;
};

/// for var in range(min, min + extent): body. `thread`: the GPU index of a ThreadBinding loop
/// (ThreadTag::None for every other kind).
struct For {
  Var var;
  Expr min;
  Expr extent;
  ForKind kind = ForKind::Serial;
  Stmt body;
  ThreadTag thread = ThreadTag::None;
};
/// buffer[indices...] = value.
struct Store { Buffer buffer; std::vector<Expr> indices; Expr value; };
/// `buffer` exists (uninitialised) while `body` runs.
struct Allocate { Buffer buffer; Stmt body; };
struct Seq { std::vector<Stmt> stmts; };
/// if cond: then_case else: else_case (else_case may be undefined).
struct IfThenElse { Expr cond; Stmt then_case; Stmt else_case; };

/// One operand of a Call: the window of `buffer` whose element at tile point (t_0, t_1, ...) is
/// buffer[base[d] + sum_t coeff[d][t] * t_t for each dimension d].
struct TileArg {
  Buffer buffer;
  std::vector<Expr> base;                         // one Int per buffer dimension
  std::vector<std::vector<std::int64_t>> coeff;   // [dimension][tile axis]
};
enum class CallPart { Update, Reset };
/// A tensor intrinsic on one tile: `intrinsic->update` (or `reset`, operand 0 only).
struct Call {
  std::shared_ptr<const Intrinsic> intrinsic;
  CallPart part = CallPart::Update;
  std::vector<TileArg> args;
  std::vector<std::int64_t> extents;  // the tile (= intrinsic->tile)
};

struct StmtNode {
  std::variant<For, Store, Allocate, Seq, IfThenElse, Call> v;
};

template <class T>
const T* Stmt::as() const {
  return node_ ? std::get_if<T>(&node_->v) : nullptr;
}

/// Node builders. make_for: `thread` is required for ForKind::ThreadBinding (and only there).
Stmt make_for(Var var, Expr min, Expr extent, ForKind kind, Stmt body, ThreadTag thread = ThreadTag::None);
Stmt make_store(Buffer buffer, std::vector<Expr> indices, Expr value);
Stmt make_allocate(Buffer buffer, Stmt body);
/// A Seq of the defined statements (nested Seqs flattened); the statement itself when one.
Stmt make_seq(std::vector<Stmt> stmts);
Stmt make_if(Expr cond, Stmt then_case, Stmt else_case = Stmt());

/// A lowered tensor function: its arguments (placeholders read, then outputs) and its body.
struct LoweredFunc {
  std::string name;
  std::vector<Buffer> args;
  Stmt body;
};

/// Pre-order walk of every statement (the callback sees a node before its children).
void for_each_stmt(const Stmt& s, const std::function<void(const Stmt&)>& f);
/// Pre-order walk of every expression in `e` (sub-expressions included).
void for_each_expr(const Expr& e, const std::function<void(const Expr&)>& f);
/// Every expression of every statement of `s` (For bounds, indices, values, conditions, bases).
void for_each_expr(const Stmt& s, const std::function<void(const Expr&)>& f);

/// Readable Python-like text, four spaces per level, e.g.
///     for y in range(1024):
///         for x in range(1024):
///             C[y][x] = 0.0
///             for k in range(1024):
///                 C[y][x] += A[k][y] * B[k][x]
/// Loop kinds print as parallel(n), vectorized(n), unrolled(n), thread_binding(n, "threadIdx.x");
/// a Call as `name(CL[0:8][0:8], ...)`; an Allocate as `AL = allocate((8, 8), local)` (or shared). A loop whose
/// variable's name an enclosing loop already uses prints it as name_1 (name_2, ...).
std::string to_string(const Stmt& s);
/// The signature line, then the body.
std::string to_string(const LoweredFunc& f);

/// Runs `body` (reference semantics; parallel loops in order). Every buffer it uses that no
/// Allocate inside it makes must be bound in `buffers` with the right size. Allocated buffers
/// start as NaN. mls::Error for an unbound or wrongly sized buffer, an out-of-bounds load, store
/// or call window, Int division by zero, or a loop variable bound twice.
void interpret(const Stmt& body, const Bindings& buffers);
/// The same, checking first that every argument of `f` is bound.
void interpret(const LoweredFunc& f, const Bindings& buffers);

}  // namespace mls::kernels::te
