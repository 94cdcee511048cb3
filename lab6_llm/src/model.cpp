// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6: the fused GPT path — parameters, activations, layers, forward, backward, AdamW.
// Learnt from llm.c's train_gpt2.c (flat functions, explicit shapes); written for this project.
#include "mls/llm/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "mls/common/error.hpp"
#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "mls/kernels/attention.hpp"
#include "mls/kernels/fused.hpp"
#include "mls/kernels/sgemm.hpp"
#include "mls/llm/moe.hpp"
#include "mls/llm/remat.hpp"

#include "lab6_clones.hpp"  // MLS_LAB6_CLONES: the hot loops for AVX-512, AVX2/FMA and x86-64

namespace mls::llm {

namespace {

constexpr float kLnEps = 1e-5f;
constexpr std::int64_t kRowChunk = 64;      // rows per chunk of a reduction over rows
constexpr std::int64_t kElemChunk = 16384;  // elements per chunk of an elementwise loop

void ensure_kernels() {
  static std::once_flag once;
  std::call_once(once, [] { mls::kernels::register_kernels(); });
}

/// acc[0:n] += sum over `rows` rows of x (row stride ld): a bias gradient, rows in order.
MLS_LAB6_CLONES void sum_rows(float* acc, const float* x, std::int64_t rows, std::int64_t ld,
                              std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* d = x + r * ld;
#pragma GCC ivdep
    for (std::int64_t o = 0; o < n; ++o) acc[o] += d[o];
  }
}

SgemmFn gemm() {
  ensure_kernels();
  return sgemm_kernel().fn;
}

}  // namespace

// ---- layout -------------------------------------------------------------------------------------

std::array<std::int64_t, kNumParamTensors> param_offsets(const GPTConfig& cfg) {
  const auto shapes = param_shapes(cfg);
  std::array<std::int64_t, kNumParamTensors> off{};
  std::int64_t o = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    off[i] = o;
    std::int64_t n = 1;
    for (auto d : shapes[i]) n *= d;
    o += n;
  }
  return off;
}

std::array<std::int64_t, kNumMoeTensors> moe_param_offsets(const GPTConfig& cfg) {
  const auto shapes = moe_param_shapes(cfg);
  std::array<std::int64_t, kNumMoeTensors> off{};
  std::int64_t o = param_offsets(cfg)[kLnfb] + cfg.n_embd;  // right after lnfb
  for (int i = 0; i < kNumMoeTensors; ++i) {
    off[i] = o;
    std::int64_t n = 1;
    for (auto d : shapes[i]) n *= d;
    o += n;
  }
  return off;
}

std::vector<TensorRange> param_ranges(const GPTConfig& cfg) {
  const auto off = param_offsets(cfg);
  const auto moff = moe_param_offsets(cfg);
  std::vector<TensorRange> r;
  for (int k = 0; k < kNumParamTensors; ++k)
    r.push_back({off[k], k + 1 < kNumParamTensors ? off[k + 1] : moff[0], param_decays(k)});
  if (!is_moe(cfg)) return r;
  for (int k = 0; k < kNumMoeTensors; ++k)
    r.push_back({moff[k], k + 1 < kNumMoeTensors ? moff[k + 1] : num_params(cfg),
                 k == kMoeRouter || k == kMoeFcw || k == kMoeFcprojw});
  return r;
}

ParamPtrs param_views(float* flat, const GPTConfig& cfg) {
  const auto o = param_offsets(cfg);
  ParamPtrs p{flat + o[0],  flat + o[1],  flat + o[2],  flat + o[3],
              flat + o[4],  flat + o[5],  flat + o[6],  flat + o[7],
              flat + o[8],  flat + o[9],  flat + o[10], flat + o[11],
              flat + o[12], flat + o[13], flat + o[14], flat + o[15],
              nullptr,      nullptr,      nullptr,      nullptr,      nullptr};
  if (is_moe(cfg)) {
    const auto m = moe_param_offsets(cfg);
    p.moe_router = flat + m[kMoeRouter];
    p.moe_fcw = flat + m[kMoeFcw];
    p.moe_fcb = flat + m[kMoeFcb];
    p.moe_fcprojw = flat + m[kMoeFcprojw];
    p.moe_fcprojb = flat + m[kMoeFcprojb];
  }
  return p;
}

FlatParams::FlatParams(const GPTConfig& cfg, mem::Tag tag) : cfg_(cfg) {
  cfg.validate();
  data_.assign(static_cast<std::size_t>(num_params(cfg)), 0.f);
  mem_ = mem::Block(tag, 4 * num_params(cfg));
}

float* FlatParams::tensor(int i) {
  MLS_CHECK(i >= 0 && i < kNumParamTensors, "FlatParams::tensor: index ", i, ", expected 0..",
            kNumParamTensors - 1);
  return data_.data() + param_offsets(cfg_)[i];
}
const float* FlatParams::tensor(int i) const { return const_cast<FlatParams*>(this)->tensor(i); }
void FlatParams::zero() { std::fill(data_.begin(), data_.end(), 0.f); }

GPTParams init_params(const GPTConfig& cfg, std::uint64_t seed) {
  GPTParams p(cfg);
  Rng rng(seed, "gpt-init");
  const auto shapes = param_shapes(cfg);
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.n_layer));
  for (int i = 0; i < kNumParamTensors; ++i) {
    std::int64_t n = 1;
    for (auto d : shapes[i]) n *= d;
    float* t = p.tensor(i);
    const std::string name = param_names()[i];
    if (name == "ln1w" || name == "ln2w" || name == "lnfw") {
      std::fill(t, t + n, 1.f);
    } else if (param_decays(i)) {
      const double sd = (name == "attprojw" || name == "fcprojw") ? resid_std : 0.02;
      for (std::int64_t j = 0; j < n; ++j) t[j] = static_cast<float>(rng.normal(0.0, sd));
    }  // biases stay 0
  }
  if (is_moe(cfg)) {  // after the 16 (a dense config draws exactly what it drew before)
    const auto mshapes = moe_param_shapes(cfg);
    for (int i = 0; i < kNumMoeTensors; ++i) {
      if (i == kMoeFcb || i == kMoeFcprojb) continue;  // biases stay 0
      std::int64_t n = 1;
      for (auto d : mshapes[i]) n *= d;
      float* t = p.data() + moe_param_offsets(cfg)[i];
      const double sd = i == kMoeFcprojw ? resid_std : 0.02;
      // A sharded layout (expert parallelism) keeps its experts' draws of the whole model's stream.
      const std::int64_t E = cfg.moe_experts, El = i == kMoeRouter ? E : moe_local_experts(cfg),
                         per = n / (num_moe_blocks(cfg) * El), e0 = i == kMoeRouter ? 0 : cfg.moe_shard * El;
      for (std::int64_t j = 0, kept = 0; j < n / El * E; ++j) {
        const float v = static_cast<float>(rng.normal(0.0, sd));
        const std::int64_t e = j / per % E;
        if (e >= e0 && e < e0 + El) t[kept++] = v;
      }
    }
  }
  return p;
}

// ---- activations --------------------------------------------------------------------------------

const char* to_string(Attention a) { return a == Attention::Flash ? "flash" : "naive"; }

Attention parse_attention(const std::string& name, const std::string& what) {
  if (name == "naive") return Attention::Naive;
  MLS_CHECK(name == "flash", what, ": '", name, "', expected flash or naive");
  return Attention::Flash;
}

GPTActivations::GPTActivations(const GPTConfig& cfg, std::int64_t B_, std::int64_t T_,
                               Attention attention_)
    : B(B_), T(T_), attention(attention_) {
  cfg.validate();
  MLS_CHECK(B > 0 && T > 0 && T <= cfg.block_size, "GPTActivations: B = ", B, ", T = ", T,
            ", expected B > 0 and 0 < T <= block_size = ", cfg.block_size);
  const std::int64_t L = cfg.n_layer, C = cfg.n_embd, V = cfg.vocab_size, N = B * T;
  const std::int64_t sizes[] = {N * C,
                                L * N * C,
                                L * N,
                                L * N,
                                L * N * 3 * C,
                                L * N * C,
                                L * att_layer_floats(cfg),
                                L * N * C,
                                L * N * C,
                                L * N * C,
                                L * N,
                                L * N,
                                L * N * 4 * C,
                                L * N * 4 * C,
                                L * N * C,
                                L * N * C,
                                N * C,
                                N,
                                N,
                                N * V,
                                N};
  float** ptrs[] = {&encoded, &ln1,       &ln1_mean, &ln1_rstd, &qkv,      &atty,   &att,
                    &attproj, &residual2, &ln2,      &ln2_mean, &ln2_rstd, &fch,    &fch_gelu,
                    &fcproj,  &residual3, &lnf,      &lnf_mean, &lnf_rstd, &logits, &losses};
  // MoE buffers (moe.hpp): none for a dense config.
  const std::int64_t E = cfg.moe_experts, K = is_moe(cfg) ? cfg.moe_top_k : 0;
  moe_cap = is_moe(cfg) ? moe_capacity(cfg, N) : 0;
  // The expert rows (R of them) exist only where the experts run here: a sharded config runs them
  // in its expert-parallel dispatch (moe_ep.hpp), which holds its own.
  const std::int64_t R = cfg.moe_shards == 1 ? E * moe_cap : 0, Lm = is_moe(cfg) ? L : 0;
  const std::int64_t msizes[] = {Lm * N * E, Lm * N,         Lm * N * K,     Lm * E,    Lm * 2,
                                 Lm * R * C, Lm * R * 4 * C, Lm * R * 4 * C, Lm * R * C};
  float** mptrs[] = {&moe_probs, &moe_lse, &moe_gate, &moe_frac, &moe_loss,
                     &moe_xin,   &moe_h,   &moe_hg,   &moe_y};
  std::int64_t total = 0;
  for (auto s : sizes) total += s;
  for (auto s : msizes) total += s;
  const std::int64_t isizes[] = {Lm * N * K, Lm * N * K, Lm * E, Lm * R};
  std::int32_t** iptrs[] = {&moe_expert, &moe_slot, &moe_count, &moe_token};
  std::int64_t itotal = 0;
  for (auto s : isizes) itotal += s;
  storage_.assign(static_cast<std::size_t>(total), 0.f);
  istorage_.assign(static_cast<std::size_t>(itotal), 0);
  mem_ = mem::Block(mem::Tag::Activation, 4 * (total + itotal));
  std::int64_t o = 0;
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    *ptrs[i] = storage_.data() + o;
    o += sizes[i];
  }
  for (std::size_t i = 0; i < std::size(msizes); ++i) {
    *mptrs[i] = msizes[i] ? storage_.data() + o : nullptr;
    o += msizes[i];
  }
  o = 0;
  for (std::size_t i = 0; i < std::size(isizes); ++i) {
    *iptrs[i] = isizes[i] ? istorage_.data() + o : nullptr;
    o += isizes[i];
  }
}

std::int64_t GPTActivations::att_layer_floats(const GPTConfig& cfg) const {
  return B * cfg.n_head * T * (attention == Attention::Flash ? 1 : T);
}

void GPTActivations::zero() {
  std::fill(storage_.begin(), storage_.end(), 0.f);
  std::fill(istorage_.begin(), istorage_.end(), 0);
}

// ---- layers -------------------------------------------------------------------------------------

void encoder_forward(float* out, const std::int32_t* inp, const float* wte, const float* wpe,
                     std::int64_t B, std::int64_t T, std::int64_t C) {
  parallel_for(0, B * T, 32, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* te = wte + static_cast<std::int64_t>(inp[r]) * C;
      const float* pe = wpe + (r % T) * C;
      float* o = out + r * C;
      for (std::int64_t c = 0; c < C; ++c) o[c] = te[c] + pe[c];
    }
  });
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* inp,
                      std::int64_t B, std::int64_t T, std::int64_t C) {
  // Each chunk owns a range of columns and walks every row in order: no two threads touch the
  // same gradient element, and the order of the sums is fixed.
  parallel_for(0, C, 16, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t r = 0; r < B * T; ++r) {
      const float* d = dout + r * C;
      float* te = dwte + static_cast<std::int64_t>(inp[r]) * C;
      float* pe = dwpe + (r % T) * C;
      for (std::int64_t c = c0; c < c1; ++c) {
        te[c] += d[c];
        pe[c] += d[c];
      }
    }
  });
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, std::int64_t N, std::int64_t C) {
  // A row operator kernel chosen by name (MLS_ROWOPS=tuned: lab 4's compiled template) runs all rows.
  if (const RowOpsKernel k = rowops_kernel(); k.layernorm_forward)
    return k.layernorm_forward(out, mean, rstd, inp, w, b, N, C, kLnEps);
  parallel_for(0, N, kRowChunk, [&](std::int64_t r0, std::int64_t r1) {
    kernels::layernorm_forward(out + r0 * C, mean + r0, rstd + r0, inp + r0 * C, w, b, r1 - r0, C,
                            kLnEps);
  });
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, std::int64_t N,
                        std::int64_t C) {
  if (const RowOpsKernel k = rowops_kernel(); k.layernorm_backward)  // MLS_ROWOPS (see layernorm_forward)
    return k.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  const std::int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  std::vector<float> part(static_cast<std::size_t>(chunks * 2 * C), 0.f);  // (chunks, 2, C)
  parallel_for(0, chunks, 1, [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k) {
      const std::int64_t r0 = k * kRowChunk, r1 = std::min(N, r0 + kRowChunk);
      float* pw = part.data() + k * 2 * C;
      kernels::layernorm_backward(dinp + r0 * C, pw, pw + C, dout + r0 * C, inp + r0 * C, w, mean + r0,
                               rstd + r0, r1 - r0, C);
    }
  });
  for (std::int64_t k = 0; k < chunks; ++k) {
    const float* pw = part.data() + k * 2 * C;
    for (std::int64_t c = 0; c < C; ++c) {
      dw[c] += pw[c];
      db[c] += pw[C + c];
    }
  }
}

// matmul_rows_forward, the decode GEMM, is in rowgemm.cpp (rowgemm.hpp).

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    std::int64_t N, std::int64_t C, std::int64_t OC) {
  if (N <= 4) {
    // A few rows (generation with the KV cache: one token): a matrix-vector product per row,
    // streaming each weight row once; packing the weights for a GEMM would cost more than this.
    matmul_rows_forward(out, inp, weight, bias, N, C, OC);
    return;
  }
  float beta = 0.f;
  if (bias) {
    for (std::int64_t r = 0; r < N; ++r) std::memcpy(out + r * OC, bias, sizeof(float) * OC);
    beta = 1.f;
  }
  gemm()(false, true, N, OC, C, 1.f, inp, C, weight, C, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, std::int64_t N, std::int64_t C, std::int64_t OC) {
  const SgemmFn g = gemm();
  if (dinp) g(false, false, N, C, OC, 1.f, dout, OC, weight, C, 1.f, dinp, C);
  if (dweight) g(true, false, OC, C, N, 1.f, dout, OC, inp, C, 1.f, dweight, C);
  if (dbias) {
    parallel_for(0, OC, 64, [&](std::int64_t o0, std::int64_t o1) {
      sum_rows(dbias + o0, dout + o0, N, OC, o1 - o0);
    });
  }
}

// The attention kernels work on one (batch, head) at a time. Scores and their gradients are
// computed 16 key positions at a time from a transposed copy of K (or V), (hs, Tp) with Tp = T
// rounded up to 16 and zero padding: each lane of the 16-wide accumulator is one key position, so
// the loops vectorise without a horizontal sum. The padded and future lanes are computed and
// dropped (the causal mask).
namespace {

constexpr std::int64_t kLanes = 16;
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));  // GCC vector extension
/// acc += x * p[0:kLanes] (by reference: a vector return value would depend on the clone's ISA).
[[gnu::always_inline]] inline void fma_lanes(Lanes& acc, float x, const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  acc += x * v;
}
/// acc += sum_{i < n} x[i * xs] * p[i * ps : i * ps + kLanes], in four independent chains (one
/// chain would wait on each FMA's latency).
[[gnu::always_inline]] inline void dot_lanes(Lanes& acc, const float* x, std::int64_t xs,
                                             const float* p, std::int64_t ps, std::int64_t n) {
  Lanes a1 = {}, a2 = {}, a3 = {};
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    fma_lanes(acc, x[i * xs], p + i * ps);
    fma_lanes(a1, x[(i + 1) * xs], p + (i + 1) * ps);
    fma_lanes(a2, x[(i + 2) * xs], p + (i + 2) * ps);
    fma_lanes(a3, x[(i + 3) * xs], p + (i + 3) * ps);
  }
  for (; i < n; ++i) fma_lanes(acc, x[i * xs], p + i * ps);
  acc += (a1 + a2) + a3;
}
[[gnu::always_inline]] inline void load_lanes(Lanes& v, const float* p) { std::memcpy(&v, p, sizeof v); }
[[gnu::always_inline]] inline void store_lanes(float* p, const Lanes& v) { std::memcpy(p, &v, sizeof v); }

}  // namespace

/// One head of attention_forward: scores q·k·scale for t2 <= t, softmax, y = att·v.
/// Hint: copy K transposed into kT, then 16 scores at a time: acc[l] += q[j] * kT[j][t0 + l].
[[maybe_unused]] MLS_LAB6_CLONES static void attention_head_forward(
    float* out, float* att, float* kT, const float* base, std::int64_t T, std::int64_t C,
    std::int64_t hs, float scale) {
  // BEGIN SOLUTION
  // base: q of (b, t=0, head h) inside qkv (B, T, 3C); out: y of (b, t=0, h) inside (B, T, C);
  // att: (T, T) of this head; kT: (hs, Tp) scratch.
  const std::int64_t C3 = 3 * C, Tp = (T + kLanes - 1) / kLanes * kLanes;
  for (std::int64_t j = 0; j < hs; ++j) {
    float* kr = kT + j * Tp;
    for (std::int64_t t2 = 0; t2 < T; ++t2) kr[t2] = base[t2 * C3 + C + j];
    for (std::int64_t t2 = T; t2 < Tp; ++t2) kr[t2] = 0.f;
  }
  for (std::int64_t t = 0; t < T; ++t) {
    const float* q = base + t * C3;
    float* row = att + t * T;
    const std::int64_t n = t + 1;  // scores of the past and present only
    for (std::int64_t t0 = 0; t0 < n; t0 += kLanes) {
      Lanes acc = {};
      dot_lanes(acc, q, 1, kT + t0, Tp, hs);
      const std::int64_t m = std::min(kLanes, n - t0);
      for (std::int64_t l = 0; l < m; ++l) row[t0 + l] = acc[l] * scale;
    }
    kernels::softmax_forward(row, row, 1, n);  // lab 4's row softmax over the t + 1 entries
    for (std::int64_t t2 = n; t2 < T; ++t2) row[t2] = 0.f;
    // y_t = sum_t2 att[t, t2] v_t2, 16 dims at a time in a register (then the last hs % 16)
    float* o = out + t * C;
    std::int64_t j0 = 0;
    for (; j0 + kLanes <= hs; j0 += kLanes) {
      Lanes acc = {};
      dot_lanes(acc, row, 1, base + 2 * C + j0, C3, n);
      store_lanes(o + j0, acc);
    }
    for (std::int64_t j = j0; j < hs; ++j) {
      float acc = 0.f;
      for (std::int64_t t2 = 0; t2 < n; ++t2) acc += row[t2] * base[t2 * C3 + 2 * C + j];
      o[j] = acc;
    }
  }
  // END SOLUTION
}

/// One head of attention_backward: datt = dout·vᵀ, dpre = att ⊙ (datt − Σ att ⊙ datt) · scale
/// (kept in datt), then dq += dpre·k, dk += dpreᵀ·q, dv += attᵀ·dout. Hint: datt 16 positions at a
/// time from vT, as the forward's scores; dq row by row and dk, dv column by column, each
/// accumulated in registers and stored once.
[[maybe_unused]] MLS_LAB6_CLONES static void attention_head_backward(
    float* dbase, float* datt, float* vT, const float* dout, const float* base, const float* att,
    std::int64_t T, std::int64_t C, std::int64_t hs, float scale) {
  // BEGIN SOLUTION
  // base/dbase: q of (b, 0, h) inside qkv/dqkv (B, T, 3C); dout: dy of (b, 0, h) inside (B, T, C);
  // att, datt: (T, T) of this head; vT: (hs, Tp) scratch.
  const std::int64_t C3 = 3 * C, Tp = (T + kLanes - 1) / kLanes * kLanes;
  for (std::int64_t j = 0; j < hs; ++j) {
    float* vr = vT + j * Tp;
    for (std::int64_t t2 = 0; t2 < T; ++t2) vr[t2] = base[t2 * C3 + 2 * C + j];
    for (std::int64_t t2 = T; t2 < Tp; ++t2) vr[t2] = 0.f;
  }
  for (std::int64_t t = 0; t < T; ++t) {
    const float* row = att + t * T;
    float* drow = datt + t * T;
    const float* d = dout + t * C;
    const std::int64_t n = t + 1;
    // out_t = sum_t2 att[t, t2] v_t2: datt[t, t2] = d · v_t2, dv_t2 += att[t, t2] d
    float s = 0.f;  // sum(att * datt) over the row
    for (std::int64_t t0 = 0; t0 < n; t0 += kLanes) {
      Lanes acc = {};
      dot_lanes(acc, d, 1, vT + t0, Tp, hs);
      const std::int64_t m = std::min(kLanes, n - t0);
      for (std::int64_t l = 0; l < m; ++l) {
        drow[t0 + l] = acc[l];
        s += row[t0 + l] * acc[l];
      }
    }
    // softmax backward: dpre = att * (datt - sum(att * datt)) * scale (pre = scale * q · k),
    // kept in datt's row (datt is scratch) for the two passes below
    for (std::int64_t t2 = 0; t2 < n; ++t2) drow[t2] = row[t2] * (drow[t2] - s) * scale;
  }
  // dq_t += sum_{t2 <= t} dpre[t, t2] k_t2, 16 dims at a time in a register (then hs % 16)
  for (std::int64_t t = 0; t < T; ++t) {
    const float* dp = datt + t * T;
    float* dq = dbase + t * C3;
    std::int64_t j0 = 0;
    for (; j0 + kLanes <= hs; j0 += kLanes) {
      Lanes acc;
      load_lanes(acc, dq + j0);
      dot_lanes(acc, dp, 1, base + C + j0, C3, t + 1);
      store_lanes(dq + j0, acc);
    }
    for (std::int64_t j = j0; j < hs; ++j) {
      float acc = dq[j];
      for (std::int64_t t2 = 0; t2 <= t; ++t2) acc += dp[t2] * base[t2 * C3 + C + j];
      dq[j] = acc;
    }
  }
  // dk_t2 += sum_{t >= t2} dpre[t, t2] q_t and dv_t2 += sum_{t >= t2} att[t, t2] dout_t
  for (std::int64_t t2 = 0; t2 < T; ++t2) {
    float* dk = dbase + t2 * C3 + C;
    float* dv = dbase + t2 * C3 + 2 * C;
    std::int64_t j0 = 0;
    for (; j0 + kLanes <= hs; j0 += kLanes) {
      Lanes ak, av;
      load_lanes(ak, dk + j0);
      load_lanes(av, dv + j0);
      dot_lanes(ak, datt + t2 * T + t2, T, base + t2 * C3 + j0, C3, T - t2);
      dot_lanes(av, att + t2 * T + t2, T, dout + t2 * C + j0, C, T - t2);
      store_lanes(dk + j0, ak);
      store_lanes(dv + j0, av);
    }
    for (std::int64_t j = j0; j < hs; ++j) {
      float ak = dk[j], av = dv[j];
      for (std::int64_t t = t2; t < T; ++t) {
        ak += datt[t * T + t2] * base[t * C3 + j];
        av += att[t * T + t2] * dout[t * C + j];
      }
      dk[j] = ak;
      dv[j] = av;
    }
  }
  // END SOLUTION
}

void attention_forward(float* out, float* att, const float* inp, std::int64_t B, std::int64_t T,
                       std::int64_t C, std::int64_t H, Attention kind) {
  if (kind == Attention::Flash) return kernels::flash_attention_forward(out, att, inp, B, T, C, H);
  // BEGIN SOLUTION
  const std::int64_t hs = C / H, Tp = (T + kLanes - 1) / kLanes * kLanes;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  parallel_for(0, B * H, 1, [&](std::int64_t i0, std::int64_t i1) {
    std::vector<float> kT(static_cast<std::size_t>(hs * Tp));
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t b = i / H, h = i % H;
      attention_head_forward(out + b * T * C + h * hs, att + i * T * T, kT.data(),
                             inp + b * T * 3 * C + h * hs, T, C, hs, scale);
    }
  });
  // END SOLUTION
}

void attention_backward(float* dinp, float* datt, const float* dout, const float* inp,
                        const float* att, std::int64_t B, std::int64_t T, std::int64_t C,
                        std::int64_t H, Attention kind, const float* out) {
  if (kind == Attention::Flash) {
    MLS_CHECK(out != nullptr, "attention_backward: flash attention needs the forward's output");
    return kernels::flash_attention_backward(dinp, dout, inp, out, att, B, T, C, H);
  }
  // BEGIN SOLUTION
  const std::int64_t hs = C / H, Tp = (T + kLanes - 1) / kLanes * kLanes;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  parallel_for(0, B * H, 1, [&](std::int64_t i0, std::int64_t i1) {
    std::vector<float> vT(static_cast<std::size_t>(hs * Tp));
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t b = i / H, h = i % H;
      attention_head_backward(dinp + b * T * 3 * C + h * hs, datt + i * T * T, vT.data(),
                              dout + b * T * C + h * hs, inp + b * T * 3 * C + h * hs,
                              att + i * T * T, T, C, hs, scale);
    }
  });
  // END SOLUTION
}

void gelu_forward(float* out, const float* inp, std::int64_t n) {
  parallel_for(0, n, kElemChunk, [&](std::int64_t i0, std::int64_t i1) {
    kernels::gelu_forward(out + i0, inp + i0, i1 - i0);
  });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n) {
  parallel_for(0, n, kElemChunk, [&](std::int64_t i0, std::int64_t i1) {
    kernels::gelu_backward(dinp + i0, inp + i0, dout + i0, i1 - i0);
  });
}

void residual_forward(float* out, const float* a, const float* b, std::int64_t n) {
  parallel_for(0, n, kElemChunk, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
  });
}

double crossentropy_forward(float* logits, float* losses, const std::int32_t* targets,
                            const float* mask, std::int64_t N, std::int64_t V) {
  for (std::int64_t i = 0; i < N; ++i)
    MLS_CHECK(targets[i] >= 0 && targets[i] < V, "crossentropy_forward: target ", targets[i],
              " at position ", i, ", expected 0 <= target < vocab_size = ", V);
  parallel_for(0, N, 16, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* x = logits + r * V;
      float maxv = -INFINITY;
      for (std::int64_t v = 0; v < V; ++v) maxv = std::max(maxv, x[v]);
      const float xt = x[targets[r]];
      float sum = 0.f;
      for (std::int64_t v = 0; v < V; ++v) {
        x[v] = kernels::fast_expf(x[v] - maxv);
        sum += x[v];
      }
      const float inv = 1.f / sum;
      for (std::int64_t v = 0; v < V; ++v) x[v] *= inv;
      losses[r] = std::log(sum) - (xt - maxv);
    }
  });
  const double num = masked_loss_sum(losses, mask, N), den = mask_sum(mask, N);
  return den > 0 ? num / den : 0.0;
}

double mask_sum(const float* mask, std::int64_t N) {
  double den = 0.0;
  for (std::int64_t i = 0; i < N; ++i) den += mask ? mask[i] : 1.0;
  return den;
}

double masked_loss_sum(const float* losses, const float* mask, std::int64_t N, double acc) {
  for (std::int64_t i = 0; i < N; ++i) acc += (mask ? static_cast<double>(mask[i]) : 1.0) * losses[i];
  return acc;
}

void crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                           const float* mask, std::int64_t N, std::int64_t V, double norm) {
  const double den = norm >= 0 ? norm : mask_sum(mask, N);
  const float inv = den > 0 ? static_cast<float>(1.0 / den) : 0.f;
  parallel_for(0, N, 16, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const float s = (mask ? mask[r] : 1.f) * inv;
      const float* p = probs + r * V;
      float* d = dlogits + r * V;
      for (std::int64_t v = 0; v < V; ++v) d[v] = p[v] * s;
      d[targets[r]] -= s;
    }
  });
}

// ---- blocks -------------------------------------------------------------------------------------

void attention_block_forward(const GPTConfig& cfg, const ParamPtrs& p, GPTActivations& a,
                             std::int64_t l, const float* x_in) {
  // BEGIN SOLUTION
  const std::int64_t B = a.B, T = a.T, C = cfg.n_embd, H = cfg.n_head, N = B * T;
  layernorm_forward(a.ln1 + l * N * C, a.ln1_mean + l * N, a.ln1_rstd + l * N, x_in, p.ln1w + l * C,
                    p.ln1b + l * C, N, C);
  matmul_forward(a.qkv + l * N * 3 * C, a.ln1 + l * N * C, p.qkvw + l * 3 * C * C,
                 p.qkvb + l * 3 * C, N, C, 3 * C);
  attention_forward(a.atty + l * N * C, a.att + l * a.att_layer_floats(cfg), a.qkv + l * N * 3 * C,
                    B, T, C, H, a.attention);
  matmul_forward(a.attproj + l * N * C, a.atty + l * N * C, p.attprojw + l * C * C,
                 p.attprojb + l * C, N, C, C);
  residual_forward(a.residual2 + l * N * C, x_in, a.attproj + l * N * C, N * C);
  // END SOLUTION
}

void mlp_forward(const GPTConfig& cfg, const ParamPtrs& p, GPTActivations& a, std::int64_t l) {
  // BEGIN SOLUTION
  const std::int64_t C = cfg.n_embd, N = a.B * a.T;
  layernorm_forward(a.ln2 + l * N * C, a.ln2_mean + l * N, a.ln2_rstd + l * N,
                    a.residual2 + l * N * C, p.ln2w + l * C, p.ln2b + l * C, N, C);
  matmul_forward(a.fch + l * N * 4 * C, a.ln2 + l * N * C, p.fcw + l * 4 * C * C, p.fcb + l * 4 * C,
                 N, C, 4 * C);
  gelu_forward(a.fch_gelu + l * N * 4 * C, a.fch + l * N * 4 * C, N * 4 * C);
  matmul_forward(a.fcproj + l * N * C, a.fch_gelu + l * N * 4 * C, p.fcprojw + l * C * 4 * C,
                 p.fcprojb + l * C, N, 4 * C, C);
  residual_forward(a.residual3 + l * N * C, a.residual2 + l * N * C, a.fcproj + l * N * C, N * C);
  // END SOLUTION
}

void block_forward(const GPTConfig& cfg, const ParamPtrs& p, GPTActivations& a, std::int64_t l,
                   const float* x_in) {
  attention_block_forward(cfg, p, a, l, x_in);
  if (p.moe_router)
    moe_mlp_forward(cfg, p, a, l);
  else
    mlp_forward(cfg, p, a, l);
}

void mlp_backward(const GPTConfig& cfg, const ParamPtrs& p, ParamPtrs& g, const GPTActivations& a,
                  GPTActivations& da, std::int64_t l, float* dresidual) {
  // BEGIN SOLUTION
  const std::int64_t C = cfg.n_embd, N = a.B * a.T;
  float* dfch_gelu = da.fch_gelu + l * N * 4 * C;
  float* dfch = da.fch + l * N * 4 * C;
  float* dln2 = da.ln2 + l * N * C;
  std::fill(dfch_gelu, dfch_gelu + N * 4 * C, 0.f);
  std::fill(dfch, dfch + N * 4 * C, 0.f);
  std::fill(dln2, dln2 + N * C, 0.f);
  // residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
  matmul_backward(dfch_gelu, g.fcprojw + l * C * 4 * C, g.fcprojb + l * C, dresidual,
                  a.fch_gelu + l * N * 4 * C, p.fcprojw + l * C * 4 * C, N, 4 * C, C);
  gelu_backward(dfch, a.fch + l * N * 4 * C, dfch_gelu, N * 4 * C);
  matmul_backward(dln2, g.fcw + l * 4 * C * C, g.fcb + l * 4 * C, dfch, a.ln2 + l * N * C,
                  p.fcw + l * 4 * C * C, N, C, 4 * C);
  layernorm_backward(dresidual, g.ln2w + l * C, g.ln2b + l * C, dln2, a.residual2 + l * N * C,
                     p.ln2w + l * C, a.ln2_mean + l * N, a.ln2_rstd + l * N, N, C);
  // END SOLUTION
}

void attention_block_backward(const GPTConfig& cfg, const ParamPtrs& p, ParamPtrs& g,
                              const GPTActivations& a, GPTActivations& da, std::int64_t l,
                              const float* x_in, float* dresidual) {
  // BEGIN SOLUTION
  const std::int64_t B = a.B, T = a.T, C = cfg.n_embd, H = cfg.n_head, N = B * T;
  float* datty = da.atty + l * N * C;
  float* dqkv = da.qkv + l * N * 3 * C;
  float* dln1 = da.ln1 + l * N * C;
  std::fill(datty, datty + N * C, 0.f);
  std::fill(dqkv, dqkv + N * 3 * C, 0.f);
  std::fill(dln1, dln1 + N * C, 0.f);
  // residual2 = x_in + attproj(attention(qkv(ln1(x_in))))
  matmul_backward(datty, g.attprojw + l * C * C, g.attprojb + l * C, dresidual, a.atty + l * N * C,
                  p.attprojw + l * C * C, N, C, C);
  attention_backward(dqkv, da.att + l * da.att_layer_floats(cfg), datty, a.qkv + l * N * 3 * C,
                     a.att + l * a.att_layer_floats(cfg), B, T, C, H, a.attention,
                     a.atty + l * N * C);
  matmul_backward(dln1, g.qkvw + l * 3 * C * C, g.qkvb + l * 3 * C, dqkv, a.ln1 + l * N * C,
                  p.qkvw + l * 3 * C * C, N, C, 3 * C);
  layernorm_backward(dresidual, g.ln1w + l * C, g.ln1b + l * C, dln1, x_in, p.ln1w + l * C,
                     a.ln1_mean + l * N, a.ln1_rstd + l * N, N, C);
  // END SOLUTION
}

void block_backward(const GPTConfig& cfg, const ParamPtrs& p, ParamPtrs& g, const GPTActivations& a,
                    GPTActivations& da, std::int64_t l, const float* x_in, float* dresidual) {
  if (p.moe_router)
    moe_mlp_backward(cfg, p, g, a, da, l, dresidual);
  else
    mlp_backward(cfg, p, g, a, da, l, dresidual);
  attention_block_backward(cfg, p, g, a, da, l, x_in, dresidual);
}

// ---- optimisation -------------------------------------------------------------------------------

bool param_decays(int i) {
  // The embeddings and the four matrices; not the biases or the layernorms.
  return i == kWte || i == kWpe || i == kQkvw || i == kAttprojw || i == kFcw || i == kFcprojw;
}

/// AdamW on elements [0, n) of one tensor: m, v moments, bias corrections c1 = 1/(1 - b1^t),
/// c2 = 1/(1 - b2^t), decoupled weight decay wd. Compiled per ISA like the attention kernels.
MLS_LAB6_CLONES void adamw_range(float* p, const float* g, float* m, float* v, std::int64_t n,
                                 float b1, float b2, float c1, float c2, float lr, float eps,
                                 float wd) {
  // BEGIN SOLUTION
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    m[i] = b1 * m[i] + (1.f - b1) * gi;
    v[i] = b2 * v[i] + (1.f - b2) * gi * gi;
    const float mh = m[i] * c1, vh = v[i] * c2;
    p[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * p[i]);
  }
  // END SOLUTION
}

void adamw_update(GPTParams& params, const GPTGrads& grads, AdamWState& state,
                  const AdamWOptions& opt, double lr) {
  // BEGIN SOLUTION
  const std::int64_t n = params.size();
  MLS_CHECK(grads.size() == n && static_cast<std::int64_t>(state.m.size()) == n &&
                static_cast<std::int64_t>(state.v.size()) == n,
            "adamw_update: params ", n, ", grads ", grads.size(), ", m ", state.m.size(), ", v ",
            state.v.size(), ": expected the same size");
  state.step += 1;
  const double t = static_cast<double>(state.step);
  const float b1 = static_cast<float>(opt.beta1), b2 = static_cast<float>(opt.beta2);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(opt.beta1, t)));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(opt.beta2, t)));
  const float flr = static_cast<float>(lr), eps = static_cast<float>(opt.eps);
  float* p = params.data();
  const float* g = grads.data();
  float* m = state.m.data();
  float* v = state.v.data();
  for (const TensorRange& r : param_ranges(params.config())) {  // the 16 tensors, then MoE's
    const float wd = r.decays ? static_cast<float>(opt.weight_decay) : 0.f;
    parallel_for(r.begin, r.end, kElemChunk, [&](std::int64_t i0, std::int64_t i1) {
      adamw_range(p + i0, g + i0, m + i0, v + i0, i1 - i0, b1, b2, c1, c2, flr, eps, wd);
    });
  }
  // END SOLUTION
}

double grad_norm(const GPTGrads& grads) {
  const std::int64_t n = grads.size(), chunks = (n + kElemChunk - 1) / kElemChunk;
  std::vector<double> part(static_cast<std::size_t>(chunks), 0.0);
  const float* g = grads.data();
  parallel_for(0, chunks, 1, [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k) {
      double s = 0.0;
      for (std::int64_t i = k * kElemChunk, e = std::min(n, i + kElemChunk); i < e; ++i)
        s += static_cast<double>(g[i]) * g[i];
      part[k] = s;
    }
  });
  double s = 0.0;
  for (double x : part) s += x;
  return std::sqrt(s);
}

double clip_grad_norm(GPTGrads& grads, double max_norm) {
  const double norm = grad_norm(grads);
  if (max_norm > 0 && norm > max_norm) {
    const float s = static_cast<float>(max_norm / (norm + 1e-6));
    float* g = grads.data();
    parallel_for(0, grads.size(), kElemChunk, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) g[i] *= s;
    });
  }
  return norm;
}

double lr_schedule(std::int64_t step, std::int64_t warmup, std::int64_t total, double lr_max,
                   double lr_min) {
  if (step < warmup) return lr_max * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total || total <= warmup) return lr_min;
  const double r = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return lr_min + 0.5 * (1.0 + std::cos(M_PI * r)) * (lr_max - lr_min);
}

// ---- counts -------------------------------------------------------------------------------------

std::int64_t flops_params(const GPTConfig& cfg) {
  return num_active_params(cfg) - cfg.block_size * cfg.n_embd;
}

double train_flops_per_token(const GPTConfig& cfg, std::int64_t T) {
  return 6.0 * static_cast<double>(flops_params(cfg)) +
         12.0 * static_cast<double>(cfg.n_layer * T * cfg.n_embd);
}

}  // namespace mls::llm
