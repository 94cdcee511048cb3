// The generated code's own exp (CodegenOptions::fast_exp): mls::fast_expf's algorithm
// (mls/common/fastmath.hpp) in GCC vector extensions, so that a vectorized loop computing exp stays
// vectorized without -ffast-math (expf is a libm call per lane); its non-temporal stores
// (CodegenOptions::stream_stores), reassociated reductions (CodegenOptions::fast_reduce) and software
// prefetches (CodegenOptions::prefetch).
#include <algorithm>
#include <string>
#include <string_view>

#include "codegen_internal.hpp"
#include "mls/common/fastmath.hpp"

namespace mls::kernels::te::codegen_detail {

const Dialect& cpp_fast_exp_dialect() {
  static const Dialect d = [] {
    Dialect x = cpp_dialect();
    x.exp = "mls_expf";
    return x;
  }();
  return d;
}

const std::string& fast_exp_prelude(bool exp2) {
  // The polynomials' texts; exp2's coefficients are mls::kExp2Poly's (the hand-written kernels').
  static const std::string head = R"(// ---- exp as a polynomial (CodegenOptions::fast_exp) -----------------------------------------
// Plain float arithmetic on vectors, so it stays in SIMD registers; with AVX-512 the 16-lane
// version scales with vscalefps (overflow and underflow for free).
#if defined(__AVX512F__)
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's _mm512_undefined_ps() reads itself on purpose ("__m512 __Y = __Y"): not our variable.
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#endif
typedef std::int32_t mls_i32x4 __attribute__((vector_size(16)));
typedef std::int32_t mls_i32x8 __attribute__((vector_size(32)));
typedef std::int32_t mls_i32x16 __attribute__((vector_size(64)));
template <class V>
struct mls_int_vec;
template <>
struct mls_int_vec<mls_f32x4> { typedef mls_i32x4 type; };
template <>
struct mls_int_vec<mls_f32x8> { typedef mls_i32x8 type; };
template <>
struct mls_int_vec<mls_f32x16> { typedef mls_i32x16 type; };
// Both exps' generic versions: +inf above log(FLT_MAX), 0 below log(FLT_MIN) (the lanes there
// hold garbage), NaN kept.
template <class V>
static inline V mls_exp_range(V x, V out) {
    out = x > mls_splat<V>(88.7228394f) ? mls_splat<V>(__builtin_inff()) : out;
    out = x < mls_splat<V>(-87.3365479f) ? mls_splat<V>(0.0f) : out;
    return x != x ? x : out;
}
#if defined(__AVX512F__)
// Both exps' 16-lane versions: x clamped to [-104, 104], then vscalefps: 2^n past the float range
// gives a denormal, 0 or +inf by itself (the clamp keeps +-inf finite and n * ln2's split exact).
// With AVX512DQ one vrangeps (imm 2: the operand of smaller magnitude with its own sign; it returns
// 104 for a NaN, so the final masked vscalefps keeps x in the NaN lanes, *number); else vmaxps and
// vminps (they return their second operand for a NaN: x's lane, which stays NaN through the arithmetic).
[[maybe_unused]] static inline __m512 mls_exp_clamp(mls_f32x16 x, __mmask16* number) {
#if defined(__AVX512DQ__)
    *number = _mm512_cmp_ps_mask((__m512)x, (__m512)x, _CMP_ORD_Q);
    return _mm512_range_ps((__m512)x, _mm512_set1_ps(104.0f), 2);
#else
    *number = 0xffff;
    return _mm512_min_ps(_mm512_set1_ps(104.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), (__m512)x));
#endif
}
#endif
)";
  static const std::string cephes = R"(// mls::fast_expf's algorithm: x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (Cody-Waite:
// ln2 in two parts, the first exact in n * hi), Cephes' polynomial for exp(r) (in Horner form),
// then the result scaled by 2^n. Within 2 ulp of expf over the normal range; +inf above log(FLT_MAX), 0 (AVX-512:
// a denormal, then 0) below log(FLT_MIN), NaN kept. Plain float arithmetic on vectors, so it stays in SIMD registers; with
// AVX-512 the 16-lane version scales with vscalefps (overflow and underflow for free).
// exp(r) for |r| <= ln2 / 2: Cephes' coefficients, evaluated as one degree-7 polynomial in Horner
// form (seven multiply-adds; the last two add r and 1).
template <class V>
static inline V mls_exp_reduced(V r) {
    V p = mls_splat<V>(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r + 1.0f;
    return p * r + 1.0f;
}
template <class V>
[[maybe_unused]] static inline V mls_vexp_fast(V x) {
    typedef typename mls_int_vec<V>::type I;
    // n = round(x / ln2) by the 1.5 * 2^23 trick: the sum's low mantissa bits hold n.
    const V s = x * 1.44269504088896341f + 12582912.0f;
    const V n = s - 12582912.0f;
    V r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    V out = (V)((I)mls_exp_reduced(r) + ((I)s << 23));
    return mls_exp_range(x, out);
}
#if defined(__AVX512F__)
template <>
[[maybe_unused]] inline mls_f32x16 mls_vexp_fast(mls_f32x16 x) {
    __mmask16 number;
    const __m512 xc = mls_exp_clamp(x, &number);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    return (mls_f32x16)_mm512_mask_scalef_ps((__m512)x, number, (__m512)mls_exp_reduced((mls_f32x16)r), n);
}
#endif
)";
  static const std::string tail = R"(// The same on one float (scalar code, a vectorized loop's tail).
[[maybe_unused]] static inline float mls_expf(float x) { return mls_vexp_fast(mls_splat<mls_f32x4>(x))[0]; }

)";
  static const std::string with_cephes = head + cephes + tail;
  static const std::string with_exp2 = [] {
    std::string t = R"(// exp(x) = 2^t, t = x log2e = n + f with n = round(t) and |f| <= 1/2 (CodegenOptions::fast_exp2):
// 2^f by lab 4's hand-written exp2_16's degree-5 polynomial (mls::kExp2Poly, Horner: five
// multiply-adds), times 2^n. Relative error within 2.5e-7 + 1e-7 |x| (t's rounding); +inf above
// log(FLT_MAX), 0 (AVX-512: a denormal, then 0) below log(FLT_MIN), NaN kept.
template <class V>
static inline V mls_exp2_reduced(V f) {
    V p = mls_splat<V>(@C0@);
    p = p * f + @C1@;
    p = p * f + @C2@;
    p = p * f + @C3@;
    p = p * f + @C4@;
    return p * f + @C5@;
}
template <class V>
[[maybe_unused]] static inline V mls_vexp_fast(V x) {
    typedef typename mls_int_vec<V>::type I;
    const V t = x * 1.44269504088896341f;
    const V s = t + 12582912.0f;  // n = round(t) by the 1.5 * 2^23 trick: the sum's low mantissa bits hold n
    const V n = s - 12582912.0f;
    V out = (V)((I)mls_exp2_reduced(t - n) + ((I)s << 23));
    return mls_exp_range(x, out);
}
#if defined(__AVX512DQ__)
// 16 lanes with AVX512DQ: f = t - round(t) in one vreduceps, beside n = round(t) (not after it), and
// no clamp: vreduceps gives +0 for +-inf and for |t| >= 2^23 (already an integer), so p = 1 there and
// vscalefps(1, n) is 0 or +inf; a NaN stays NaN through every step. 9 vector operations per 16
// floats (the mul, vrndscaleps, vreduceps, five multiply-adds, vscalefps), 7 of them on the FMA
// pipes, where the clamped version below takes 12; the same result in the float range (f is exact either way).
template <>
[[maybe_unused]] inline mls_f32x16 mls_vexp_fast(mls_f32x16 x) {
    const __m512 t = _mm512_mul_ps((__m512)x, _mm512_set1_ps(1.44269504088896341f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return (mls_f32x16)_mm512_scalef_ps((__m512)mls_exp2_reduced((mls_f32x16)f), n);
}
#elif defined(__AVX512F__)
template <>
[[maybe_unused]] inline mls_f32x16 mls_vexp_fast(mls_f32x16 x) {
    __mmask16 number;
    const __m512 xc = mls_exp_clamp(x, &number);
    const __m512 t = _mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    return (mls_f32x16)_mm512_mask_scalef_ps((__m512)x, number, (__m512)mls_exp2_reduced((mls_f32x16)f), n);
}
#endif
)";
    for (int k = 0; k < 6; ++k) {
      const std::string key = "@C" + std::to_string(k) + "@";
      t.replace(t.find(key), key.size(), c_float_literal(mls::kExp2Poly[k]));
    }
    return head + t + tail;
  }();
  return exp2 ? with_exp2 : with_cephes;
}

const char* stream_prelude() {
  return R"(// ---- non-temporal stores (CodegenOptions::stream_stores) ----------------------------------------
#if defined(__SSE__)
#include <immintrin.h>
#endif
// Stores a chunk with a non-temporal store where its address is aligned to the chunk's width (and
// the CPU has that width), else with an ordinary one.
template <class V>
static inline void mls_stream(float* p, V v) {
#if defined(__AVX512F__)
    if constexpr (sizeof(V) == 64) {
        if ((reinterpret_cast<std::uintptr_t>(p) & 63) == 0) return _mm512_stream_ps(p, (__m512)v);
    }
#endif
#if defined(__AVX__)
    if constexpr (sizeof(V) == 32) {
        if ((reinterpret_cast<std::uintptr_t>(p) & 31) == 0) return _mm256_stream_ps(p, (__m256)v);
    }
#endif
#if defined(__SSE__)
    if constexpr (sizeof(V) == 16) {
        if ((reinterpret_cast<std::uintptr_t>(p) & 15) == 0) return _mm_stream_ps(p, (__m128)v);
    }
#endif
    mls_store(p, v);
}
// Orders this thread's non-temporal stores before what follows (another thread may read them next).
[[maybe_unused]] static inline void mls_stream_fence() {
#if defined(__SSE__)
    _mm_sfence();
#endif
}

)";
}

bool Emitter::streamed(const Store& st) const {
  const auto& names = m_.options.stream_stores;
  if (std::find(names.begin(), names.end(), st.buffer->name) == names.end()) return false;
  const auto it = bufs_.find(st.buffer.get());
  if (it == bufs_.end() || !it->second.is_arg) return false;
  bool reads_it = false;  // a reduction's update reads the element back: not streamed
  for_each_expr(st.value, [&](const Expr& e) {
    if (const auto* l = e.as<Load>()) reads_it = reads_it || l->buffer == st.buffer;
  });
  return !reads_it;
}

bool Emitter::streams_in(const Stmt& s) const {
  if (m_.options.stream_stores.empty()) return false;
  bool any = false;
  for_each_stmt(s, [&](const Stmt& x) {
    if (const auto* st = x.as<Store>()) any = any || streamed(*st);
  });
  return any;
}

void Emitter::vstore_streamed(const Store& st, int depth) {
  pre_.clear();
  const std::string lhs = element(st.buffer.get(), st.indices, "store");
  bool vec = false;
  const CText rhs = vexpr(st.value, vec);
  const std::string value = splat(rhs, vec);
  for (const auto& p : pre_) line(depth, p);
  pre_.clear();
  line(depth, "mls_stream(&" + lhs + ", " + value + ");");
  uses_stream_ = true;
}

const char* fast_reduce_prelude() {
  return R"(// ---- reductions in lanes (CodegenOptions::fast_reduce) and prefetches (CodegenOptions::prefetch) ----
// The max (min) update of a reduction's accumulator a by e: one vmaxps (vminps), e skipped when NaN.
template <class V>
[[maybe_unused]] static inline V mls_vmax_acc(V a, V e) { return e > a ? e : a; }
template <class V>
[[maybe_unused]] static inline V mls_vmin_acc(V a, V e) { return e < a ? e : a; }
// The lanes of a vector added up (max, min) in a tree of register shuffles: halves, then
// quarters, ... (not through memory: a row's statistic is on the path to its next pass).
[[maybe_unused]] static inline void mls_halves(mls_f32x16 v, mls_f32x8& lo, mls_f32x8& hi) {
    lo = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
    hi = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
}
[[maybe_unused]] static inline void mls_halves(mls_f32x8 v, mls_f32x4& lo, mls_f32x4& hi) {
    lo = __builtin_shufflevector(v, v, 0, 1, 2, 3);
    hi = __builtin_shufflevector(v, v, 4, 5, 6, 7);
}
// The last four lanes as scalars (their branches predict well: measured faster than masked compares).
[[maybe_unused]] static inline float mls_hsum(mls_f32x4 v) { return (v[0] + v[2]) + (v[1] + v[3]); }
[[maybe_unused]] static inline float mls_hsum(mls_f32x8 v) { mls_f32x4 a, b; mls_halves(v, a, b); return mls_hsum(a + b); }
[[maybe_unused]] static inline float mls_hsum(mls_f32x16 v) { mls_f32x8 a, b; mls_halves(v, a, b); return mls_hsum(a + b); }
[[maybe_unused]] static inline float mls_hmax(mls_f32x4 v) { return mls_fmaxf(mls_fmaxf(v[0], v[2]), mls_fmaxf(v[1], v[3])); }
[[maybe_unused]] static inline float mls_hmax(mls_f32x8 v) { mls_f32x4 a, b; mls_halves(v, a, b); return mls_hmax(mls_vmax_acc(a, b)); }
[[maybe_unused]] static inline float mls_hmax(mls_f32x16 v) { mls_f32x8 a, b; mls_halves(v, a, b); return mls_hmax(mls_vmax_acc(a, b)); }
[[maybe_unused]] static inline float mls_hmin(mls_f32x4 v) { return mls_fminf(mls_fminf(v[0], v[2]), mls_fminf(v[1], v[3])); }
[[maybe_unused]] static inline float mls_hmin(mls_f32x8 v) { mls_f32x4 a, b; mls_halves(v, a, b); return mls_hmin(mls_vmin_acc(a, b)); }
[[maybe_unused]] static inline float mls_hmin(mls_f32x16 v) { mls_f32x8 a, b; mls_halves(v, a, b); return mls_hmin(mls_vmin_acc(a, b)); }
// Prefetches (into L1) the float `d` elements past p; never faults.
[[maybe_unused]] static inline void mls_prefetch(const float* p, std::int64_t d) {
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(d) * 4u));
}
// The same into L2 (CodegenOptions::prefetch_level 2: prefetcht1).
[[maybe_unused]] static inline void mls_prefetch_l2(const float* p, std::int64_t d) {
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(d) * 4u), 0, 2);
}

)";
}

namespace {
std::string indices_key(const std::vector<Expr>& idx) {
  std::string k;
  for (const auto& i : idx) k += detail::structural_key(i) + "|";
  return k;
}
/// The update `X[k] = X[k] op e` (op +, max, min): e, else null.
const Binary* reduction_update(const Store& st) {
  const auto* b = st.value.as<Binary>();
  if (!b || (b->op != BinaryOp::Add && b->op != BinaryOp::Max && b->op != BinaryOp::Min)) return nullptr;
  const auto* l = b->a.as<Load>();
  if (!l || l->buffer != st.buffer || indices_key(l->indices) != indices_key(st.indices)) return nullptr;
  return b;
}
}  // namespace

void Emitter::prefetches(const Store& st, int depth) {
  if (m_.options.prefetch.empty() || !vec_var_) return;
  std::set<std::string> done;
  for_each_expr(st.value, [&](const Expr& e) {
    const auto* l = e.as<Load>();
    if (!l || !contiguous_in(l->indices, vec_var_)) return;
    const auto it = std::find_if(m_.options.prefetch.begin(), m_.options.prefetch.end(),
                                 [&](const auto& p) { return p.first == l->buffer->name; });
    const auto b = bufs_.find(l->buffer.get());
    if (it == m_.options.prefetch.end() || b == bufs_.end() || !b->second.is_arg) return;
    const std::string at = element(l->buffer.get(), l->indices, "load");
    auto& passes = prefetch_passes_[l->buffer->name];  // this loop's pass over the buffer (prefetch_pass_step)
    const std::int64_t pass = passes.emplace(vec_var_, static_cast<std::int64_t>(passes.size())).first->second;
    const std::int64_t distance = it->second + pass * m_.options.prefetch_pass_step;
    const std::string text = std::string(m_.options.prefetch_level == 2 ? "mls_prefetch_l2(&" : "mls_prefetch(&") + at +
                             ", " + c_int_literal(distance) + ");";
    if (done.insert(at).second && !in_this_block(depth, text)) line(depth, text);
  });
}

bool Emitter::in_this_block(int depth, const std::string& text) const {
  // The lines of the block being written, back from the end while indented `depth` levels or more
  // (a line at `depth` exactly runs whenever the next one there does).
  const std::string pad(static_cast<std::size_t>(4 * depth), ' '), want = pad + text;
  std::size_t end = out_.size();  // out_ ends with a newline
  while (end > 0) {
    std::size_t start = end >= 2 ? out_.rfind('\n', end - 2) : std::string::npos;
    start = start == std::string::npos ? 0 : start + 1;
    const std::string_view ln(out_.data() + start, end - 1 - start);
    if (ln.substr(0, pad.size()) != pad) return false;  // the block's header: not this block
    if (ln == want) return true;
    end = start;
  }
  return false;
}

bool Emitter::vstore_minmax(const Store& st, int depth) {
  if (!m_.options.fast_reduce) return false;
  const Binary* b = reduction_update(st);
  if (!b || b->op == BinaryOp::Add) return false;
  pre_.clear();
  const std::string lhs = element(st.buffer.get(), st.indices, "store");
  bool vec = false;
  const CText rhs = vexpr(b->b, vec);
  for (const auto& p : pre_) line(depth, p);
  pre_.clear();
  line(depth, "mls_store(&" + lhs + ", " + (b->op == BinaryOp::Max ? "mls_vmax_acc(" : "mls_vmin_acc(") + "mls_load<" +
                  vtype() + ">(&" + lhs + "), " + splat(rhs, vec) + "));");
  return true;
}

bool Emitter::reduce_loop(const For& f, int depth, const std::string& v) {
  if (!m_.options.fast_reduce || m_.lanes < 4 || vec_var_ || in_vectorized_) return false;
  const auto* mn = f.min.as<IntImm>();
  const auto* ex = f.extent.as<IntImm>();
  const auto* st = f.body.as<Store>();
  if (!mn || !ex || !st) return false;
  const Binary* b = reduction_update(*st);
  const VarNode* u = f.var.get();
  if (!b || b->b.dtype() != DType::Float || !detail::uses_any(b->b, {u})) return false;
  for (const auto& i : st->indices)
    if (detail::uses_any(i, {u})) return false;
  bool ok = true;  // every load contiguous in u or not reading it, none of the accumulator's buffer
  for_each_expr(b->b, [&](const Expr& e) {
    if (const auto* l = e.as<Load>()) {
      if (l->buffer == st->buffer) ok = false;
      bool reads = false;
      for (const auto& i : l->indices) reads = reads || detail::uses_any(i, {u});
      if (reads && !contiguous_in(l->indices, u)) ok = false;
    }
  });
  int w = m_.lanes;
  while (w > 4 && w > ex->value) w /= 2;
  if (!ok || ex->value < w) return false;
  const std::int64_t lo = mn->value, e = ex->value, chunked = e - e % w;
  // K independent accumulators (CodegenOptions::reduce_chains), at most one per whole chunk: a step
  // of the blocked loop updates each once, so K updates are in flight, not one chain of dependent
  // adds (3-4 cycles each); the chunks past the last whole block go to the first accumulator.
  const std::int64_t chains = std::clamp<std::int64_t>(m_.options.reduce_chains, 1, chunked / w);
  const std::int64_t blocked = chains > 1 ? chunked - chunked % (chains * w) : 0;
  const std::string vt = "mls_f32x" + std::to_string(w);
  std::vector<std::string> acc;
  for (std::int64_t k = 0; k < chains; ++k) acc.push_back(fresh("mls_acc"));
  const std::string r = fresh("mls_r");
  const char* ident = b->op == BinaryOp::Add ? "0.0f" : b->op == BinaryOp::Max ? "-__builtin_inff()" : "__builtin_inff()";
  line(depth, "{  // " + v + " in range(" + std::to_string(e) + "): a reduction in " + std::to_string(w) + " lanes" +
                  (chains > 1 ? " x " + std::to_string(chains) + " accumulators" : std::string()) +
                  ", then a tree over the lanes (CodegenOptions::fast_reduce)");
  for (const auto& a : acc) line(depth + 1, vt + " " + a + " = mls_splat<" + vt + ">(" + ident + ");");
  vec_var_ = u;
  vec_loop_var_ = f.var;
  vec_lanes_ = w;
  pre_.clear();
  bool vec = false;
  const CText rhs = vexpr(b->b, vec);
  const std::vector<std::string> pre = pre_;
  pre_.clear();
  const CText value{splat(rhs, vec), vec ? rhs.prec : 16};  // a select keeps its low precedence
  vec_var_ = nullptr;
  auto update = [&](const std::string& a, int d) {  // a = a op value(v)
    for (const auto& p : pre) line(d, p);
    if (b->op == BinaryOp::Add)
      line(d, a + " = " + a + " + " + wrap(value, 13) + ";");
    else
      line(d, a + " = " + (b->op == BinaryOp::Max ? "mls_vmax_acc(" : "mls_vmin_acc(") + a + ", " + value.s + ");");
  };
  if (chains > 1) {  // each accumulator's chunk in a block of its own, v bound there to the chunk's start
    const std::string base = fresh("mls_b");
    line(depth + 1, "for (std::int64_t " + base + " = " + c_int_literal(lo) + "; " + base + " < " +
                        c_int_literal(lo + blocked) + "; " + base + " += " + std::to_string(chains * w) + ") {");
    for (std::int64_t k = 0; k < chains; ++k) {
      line(depth + 2, "{");
      line(depth + 3, "const std::int64_t " + v + " = " + base + (k ? " + " + std::to_string(k * w) : std::string()) + ";");
      update(acc[static_cast<std::size_t>(k)], depth + 3);
      line(depth + 2, "}");
    }
    line(depth + 1, "}");
  }
  if (blocked < chunked) {
    line(depth + 1, "for (std::int64_t " + v + " = " + c_int_literal(lo + blocked) + "; " + v + " < " +
                        c_int_literal(lo + chunked) + "; " + v + " += " + std::to_string(w) + ") {");
    update(acc[0], depth + 2);
    line(depth + 1, "}");
  }
  // The accumulators combined in a tree: (a0 + a1) + (a2 + a3), ...
  auto vcombine = [&](const std::string& x, const std::string& y) {
    return b->op == BinaryOp::Add ? x + " + " + y
                                  : std::string(b->op == BinaryOp::Max ? "mls_vmax_acc(" : "mls_vmin_acc(") + x + ", " + y + ")";
  };
  for (std::size_t step = 1; step < acc.size(); step *= 2)
    for (std::size_t k = 0; k + step < acc.size(); k += 2 * step)
      line(depth + 1, acc[k] + " = " + vcombine(acc[k], acc[k + step]) + ";");
  const char* h = b->op == BinaryOp::Add ? "mls_hsum(" : b->op == BinaryOp::Max ? "mls_hmax(" : "mls_hmin(";
  line(depth + 1, "float " + r + " = " + h + acc[0] + ");");
  auto combine = [&](const std::string& a, const std::string& x) {
    return b->op == BinaryOp::Add ? a + " + " + x : std::string(b->op == BinaryOp::Max ? "mls_fmaxf(" : "mls_fminf(") + a + ", " + x + ")";
  };
  if (chunked < e) {
    line(depth + 1, "for (std::int64_t " + v + " = " + c_int_literal(lo + chunked) + "; " + v + " < " +
                        c_int_literal(lo + e) + "; ++" + v + ") {");
    line(depth + 2, r + " = " + combine(r, wrap(expr(b->b), 13)) + ";");
    line(depth + 1, "}");
  }
  const std::string lhs = element(st->buffer.get(), st->indices, "store");
  line(depth + 1, lhs + " = " + combine(lhs, r) + ";");
  line(depth, "}");
  return true;
}

}  // namespace mls::kernels::te::codegen_detail
