// Lab 6: the decode GEMM (rowgemm.hpp): register tiles of R rows x P panels of 16 output columns,
// each output element a sequential sum over c, so that its bits never depend on the tile it ran in.
#include "mls/llm/rowgemm.hpp"

#include <algorithm>
#include <cstring>

#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"
#include "mls/llm/model.hpp"
#include "lab6_clones.hpp"

// Compiled for AVX-512, AVX2/FMA and baseline x86-64 (lab6_clones.hpp); every caller (packed or
// not, any N) goes through the same clone, so the same instructions.
namespace mls::llm {

namespace {

constexpr std::int64_t kP = kRowGemmPanel;
using v16 = float __attribute__((vector_size(64)));  // 16 output columns: one zmm (two ymm on AVX2)

/// out rows 0..R-1, columns o0 .. o0 + 16P - 1 (those < OC): x (R, ldx) times P packed panels
/// starting at w (panel stride ws). acc += x * w, c in order: the one arithmetic of the file.
template <int R, int P>
[[gnu::always_inline]] inline void tile(float* out, std::int64_t ldo, const float* x, std::int64_t ldx,
                                        const float* w, std::int64_t ws, std::int64_t C,
                                        const float* bias, std::int64_t o0, std::int64_t OC,
                                        const char* pf, std::int64_t pf_bytes, bool add_to) {
  v16 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = v16{};
  for (std::int64_t c = 0; c < C; ++c) {
    if (64 * P * c < pf_bytes)  // the next P panels toward L2, P lines a step, as fast as these are read
      for (int p = 0; p < P; ++p) __builtin_prefetch(pf + 64 * (P * c + p), 0, 2);
    v16 wv[P];
    for (int p = 0; p < P; ++p) std::memcpy(&wv[p], w + p * ws + c * kP, sizeof(v16));
    for (int r = 0; r < R; ++r) {
      const float xv = x[r * ldx + c];
      for (int p = 0; p < P; ++p) acc[r][p] += xv * wv[p];
    }
  }
  // the epilogue: y = acc + bias, then out = y or out = out + y (whole vectors where the panel
  // is full; the same additions lane by lane either way)
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) {
      const std::int64_t ob = o0 + p * kP, m = std::min<std::int64_t>(kP, OC - ob);
      if (m <= 0) continue;
      float* o = out + r * ldo + ob;
      if (m == kP) {
        v16 y = acc[r][p], v;
        if (bias) {
          std::memcpy(&v, bias + ob, sizeof(v16));
          y += v;
        }
        if (add_to) {
          std::memcpy(&v, o, sizeof(v16));
          y = v + y;
        }
        std::memcpy(o, &y, sizeof(v16));
        continue;
      }
      float a[kP];
      std::memcpy(a, &acc[r][p], sizeof(v16));
      if (bias)
        for (std::int64_t j = 0; j < m; ++j) a[j] += bias[ob + j];
      if (add_to)
        for (std::int64_t j = 0; j < m; ++j) o[j] = o[j] + a[j];
      else
        for (std::int64_t j = 0; j < m; ++j) o[j] = a[j];
    }
}

template <int R>
[[gnu::always_inline]] inline void tile_p(int P, float* out, std::int64_t ldo, const float* x,
                                          std::int64_t ldx, const float* w, std::int64_t ws,
                                          std::int64_t C, const float* bias, std::int64_t o0,
                                          std::int64_t OC, const char* pf, std::int64_t pf_bytes, bool add_to) {
  switch (P) {
    case 8: if constexpr (R == 1) { tile<R, 8>(out, ldo, x, ldx, w, ws, C, bias, o0, OC, pf, pf_bytes, add_to); return; } break;
    case 4: if constexpr (R <= 2) { tile<R, 4>(out, ldo, x, ldx, w, ws, C, bias, o0, OC, pf, pf_bytes, add_to); return; } break;
    case 2: tile<R, 2>(out, ldo, x, ldx, w, ws, C, bias, o0, OC, pf, pf_bytes, add_to); return;
    default: break;
  }
  tile<R, 1>(out, ldo, x, ldx, w, ws, C, bias, o0, OC, pf, pf_bytes, add_to);
}

/// Panels [p0, p0 + np) of the product for rows 0..N-1; w points at panel p0 (panel stride
/// C*16). Tiles: 1 row x 8 panels (a GEMV: 8 independent FMA chains), 2 x 4, else up to
/// max_rows (8 with AVX-512's 32 registers, else 4) x 2.
MLS_LAB6_CLONES void panels_forward(float* out, const float* x, std::int64_t N, std::int64_t C,
                                       std::int64_t OC, const float* w, std::int64_t p0,
                                       std::int64_t np, const float* bias, int max_rows, bool add_to,
                                       const char* then_pf = nullptr, std::int64_t then_bytes = 0) {
  const std::int64_t ws = C * kP;
  const int most = N == 1 ? 8 : N == 2 ? 4 : 2;
  for (std::int64_t p = 0; p < np;) {
    int P = most;
    while (P > np - p) P /= 2;
    const float* wp = w + p * ws;
    const std::int64_t o0 = (p0 + p) * kP;
    // The first row tile also prefetches the next panels (a batch's later tiles find these in
    // L2): the weights stream in while the FMAs run.
    // (after the last group: `then_pf`, the first panels of the matrix the caller runs next)
    const std::int64_t next = std::min<std::int64_t>(P, np - p - P);
    const char* pf = next > 0 ? reinterpret_cast<const char*>(wp + P * ws) : then_pf;
    const std::int64_t next_bytes = next > 0 ? next * ws * 4 : then_bytes;
    for (std::int64_t n = 0; n < N;) {
      const std::int64_t R = std::min<std::int64_t>(max_rows, N - n);
      const std::int64_t pf_bytes = n == 0 ? next_bytes : 0;
      float* o = out + n * OC;
      const float* xr = x + n * C;
      switch (R) {
        case 1: tile_p<1>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC, pf, pf_bytes, add_to); break;
        case 2: tile_p<2>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC, pf, pf_bytes, add_to); break;
        case 3: tile_p<3>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC, pf, pf_bytes, add_to); break;
        case 4: tile_p<4>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC, pf, pf_bytes, add_to); break;
        case 5: tile_p<5>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC, pf, pf_bytes, add_to); break;
        case 6: tile_p<6>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC, pf, pf_bytes, add_to); break;
        case 7: tile_p<7>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC, pf, pf_bytes, add_to); break;
        default: tile_p<8>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC, pf, pf_bytes, add_to); break;
      }
      n += R;
    }
    p += P;
  }
}

/// Rows per register tile: 8 where AVX-512 has 32 vector registers for 16 accumulators, else 4.
/// The tile shape never changes a result (each element sums over c in order).
int max_tile_rows() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const int rows = __builtin_cpu_supports("avx512f") ? 8 : 4;
  return rows;
#else
  return 4;
#endif
}

/// Panels [p0, p1) of W (OC, C) into dst ((p1 - p0), C, 16), zeros past OC.
void pack_panels(float* dst, const float* weight, std::int64_t OC, std::int64_t C, std::int64_t p0,
                 std::int64_t p1) {
  for (std::int64_t p = p0; p < p1; ++p) {
    float* d = dst + (p - p0) * C * kP;
    for (std::int64_t j = 0; j < kP; ++j) {
      const std::int64_t o = p * kP + j;
      if (o < OC) {
        const float* src = weight + o * C;
        for (std::int64_t c = 0; c < C; ++c) d[c * kP + j] = src[c];
      } else {
        for (std::int64_t c = 0; c < C; ++c) d[c * kP + j] = 0.f;
      }
    }
  }
}

constexpr std::int64_t kPanelGrain = 8;         // panels per chunk when packing
constexpr std::int64_t kTaskMacs = 1 << 21;  // multiply-adds per parallel task at least (~10-20 us)

/// Runs f(n0, n1, p0, p1) on tasks covering rows [0, N) x panels [0, panels): split over the
/// panels first (two at least per task), then over rows in blocks of 8, for as many tasks as
/// intra_op_threads() and the work (kTaskMacs each) allow. Results never depend on the split.
template <class F>
void split_tasks(std::int64_t N, std::int64_t panels, std::int64_t C, const F& f) {
  const std::int64_t macs = N * panels * kP * C;
  const std::int64_t tasks = std::max<std::int64_t>(1, std::min<std::int64_t>(intra_op_threads(), macs / kTaskMacs));
  const std::int64_t pg = std::max<std::int64_t>(1, std::min(tasks, panels / 2));
  const std::int64_t rblocks = (N + 7) / 8;
  const std::int64_t rg = std::max<std::int64_t>(1, std::min((tasks + pg - 1) / pg, rblocks));
  if (pg * rg == 1) return f(0, N, 0, panels);
  parallel_for(0, pg * rg, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t pi = t % pg, ri = t / pg;
      const std::int64_t n0 = std::min(N, rblocks * ri / rg * 8), n1 = std::min(N, rblocks * (ri + 1) / rg * 8);
      const std::int64_t q0 = panels * pi / pg, q1 = panels * (pi + 1) / pg;
      if (n0 < n1 && q0 < q1) f(n0, n1, q0, q1);
    }
  });
}

}  // namespace

PackedMatrix pack_matrix(const float* weight, std::int64_t OC, std::int64_t C) {
  MLS_CHECK(OC >= 1 && C >= 1, "pack_matrix: a (", OC, ", ", C, ") weight, expected OC >= 1 and C >= 1");
  PackedMatrix m;
  m.C = C;
  m.OC = OC;
  m.source = weight;
  m.data.resize(static_cast<std::size_t>(m.panels() * C * kP));
  parallel_for(0, m.panels(), kPanelGrain, [&](std::int64_t p0, std::int64_t p1) {
    pack_panels(m.data.data() + p0 * C * kP, weight, OC, C, p0, p1);
  });
  return m;
}

void matmul_packed_forward(float* out, const float* inp, const PackedMatrix& w, const float* bias,
                           std::int64_t N, const PackedMatrix* then, RowGemmOut mode) {
  if (N <= 0) return;
  const int rows = max_tile_rows();
  // the task that ends the matrix prefetches the first two panels of `then`
  const char* then_pf = then ? reinterpret_cast<const char*>(then->data.data()) : nullptr;
  const std::int64_t then_bytes =
      then ? static_cast<std::int64_t>(sizeof(float)) * std::min<std::int64_t>(2, then->panels()) * then->C * kP : 0;
  split_tasks(N, w.panels(), w.C, [&](std::int64_t n0, std::int64_t n1, std::int64_t q0, std::int64_t q1) {
    const bool last = q1 == w.panels();
    panels_forward(out + n0 * w.OC, inp + n0 * w.C, n1 - n0, w.C, w.OC, w.data.data() + q0 * w.C * kP, q0,
                   q1 - q0, bias, rows, mode == RowGemmOut::AddTo, last ? then_pf : nullptr, last ? then_bytes : 0);
  });
}

void matmul_packed_part(float* out, const float* inp, const PackedMatrix& w, const float* bias, std::int64_t N,
                        int part, int parts, const PackedMatrix* then, RowGemmOut mode) {
  MLS_CHECK(parts >= 1 && part >= 0 && part < parts, "matmul_packed_part: part ", part, " of ", parts,
            ", expected 0 <= part < parts");
  if (N <= 0) return;
  const std::int64_t P = w.panels(), q0 = P * part / parts, q1 = P * (part + 1) / parts;  // part_columns
  if (q0 >= q1) return;
  const char* then_pf = nullptr;
  std::int64_t then_bytes = 0;
  if (then) {  // the first panels of this part of `then`
    const std::int64_t t0 = then->panels() * part / parts, t1 = then->panels() * (part + 1) / parts;
    then_pf = reinterpret_cast<const char*>(then->data.data() + t0 * then->C * kP);
    then_bytes = static_cast<std::int64_t>(sizeof(float)) * std::min<std::int64_t>(2, t1 - t0) * then->C * kP;
  }
  panels_forward(out, inp, N, w.C, w.OC, w.data.data() + q0 * w.C * kP, q0, q1 - q0, bias, max_tile_rows(),
                 mode == RowGemmOut::AddTo, then_pf, then_bytes);
}

namespace {
thread_local PackedScope* t_scope = nullptr;  // this thread's innermost PackedScope
}  // namespace

PackedScope::PackedScope(std::vector<const PackedMatrix*> matrices)
    : matrices_(std::move(matrices)), outer_(t_scope) {
  t_scope = this;
}

PackedScope::~PackedScope() { t_scope = outer_; }

const PackedMatrix* PackedScope::find(const float* weight, std::int64_t OC, std::int64_t C) {
  for (const PackedScope* s = t_scope; s; s = s->outer_)
    for (const PackedMatrix* m : s->matrices_)
      if (m->source == weight && m->OC == OC && m->C == C) return m;
  return nullptr;
}

void matmul_rows_forward(float* out, const float* inp, const float* weight, const float* bias,
                         std::int64_t N, std::int64_t C, std::int64_t OC) {
  if (const PackedMatrix* m = PackedScope::find(weight, OC, C)) return matmul_packed_forward(out, inp, *m, bias, N);
  // The same tiles on panels packed here, a chunk of panels at a time
  const std::int64_t panels = (OC + kP - 1) / kP;
  const int rows = max_tile_rows();
  parallel_for(0, panels, kPanelGrain, [&](std::int64_t p0, std::int64_t p1) {
    thread_local std::vector<float> buf;
    buf.resize(static_cast<std::size_t>((p1 - p0) * C * kP));
    pack_panels(buf.data(), weight, OC, C, p0, p1);
    panels_forward(out, inp, N, C, OC, buf.data(), p0, p1 - p0, bias, rows, false);
  });
}

}  // namespace mls::llm
