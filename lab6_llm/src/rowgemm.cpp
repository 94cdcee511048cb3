// Lab 6: the decode GEMM (rowgemm.hpp): register tiles of R rows x P panels of 16 output columns,
// each output element a sequential sum over c, so that its bits never depend on the tile it ran in.
#include "mls/llm/rowgemm.hpp"

#include <algorithm>
#include <cstring>

#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"
#include "mls/llm/model.hpp"

// Compiled for AVX-512, AVX2/FMA and baseline x86-64; the loader picks one for this CPU, and every
// caller (packed or not, any N) goes through the same clone, so the same instructions.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MLS_ROWGEMM_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MLS_ROWGEMM_CLONES
#endif

namespace mls::llm {

namespace {

constexpr std::int64_t kP = kRowGemmPanel;
using v16 = float __attribute__((vector_size(64)));  // 16 output columns: one zmm (two ymm on AVX2)

/// out rows 0..R-1, columns o0 .. o0 + 16P - 1 (those < OC): x (R, ldx) times P packed panels
/// starting at w (panel stride ws). acc += x * w, c in order: the one arithmetic of the file.
template <int R, int P>
[[gnu::always_inline]] inline void tile(float* out, std::int64_t ldo, const float* x, std::int64_t ldx,
                                        const float* w, std::int64_t ws, std::int64_t C,
                                        const float* bias, std::int64_t o0, std::int64_t OC) {
  v16 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = v16{};
  for (std::int64_t c = 0; c < C; ++c) {
    v16 wv[P];
    for (int p = 0; p < P; ++p) std::memcpy(&wv[p], w + p * ws + c * kP, sizeof(v16));
    for (int r = 0; r < R; ++r) {
      const float xv = x[r * ldx + c];
      for (int p = 0; p < P; ++p) acc[r][p] += xv * wv[p];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) {
      const std::int64_t ob = o0 + p * kP, m = std::min<std::int64_t>(kP, OC - ob);
      if (m <= 0) continue;
      float a[kP];
      std::memcpy(a, &acc[r][p], sizeof(v16));
      float* o = out + r * ldo + ob;
      if (bias)
        for (std::int64_t j = 0; j < m; ++j) o[j] = a[j] + bias[ob + j];
      else
        for (std::int64_t j = 0; j < m; ++j) o[j] = a[j];
    }
}

template <int R>
[[gnu::always_inline]] inline void tile_p(int P, float* out, std::int64_t ldo, const float* x,
                                          std::int64_t ldx, const float* w, std::int64_t ws,
                                          std::int64_t C, const float* bias, std::int64_t o0,
                                          std::int64_t OC) {
  switch (P) {
    case 8: if constexpr (R == 1) { tile<R, 8>(out, ldo, x, ldx, w, ws, C, bias, o0, OC); return; } break;
    case 4: if constexpr (R <= 2) { tile<R, 4>(out, ldo, x, ldx, w, ws, C, bias, o0, OC); return; } break;
    case 2: tile<R, 2>(out, ldo, x, ldx, w, ws, C, bias, o0, OC); return;
    default: break;
  }
  tile<R, 1>(out, ldo, x, ldx, w, ws, C, bias, o0, OC);
}

/// Panels [p0, p0 + np) of the product for all N rows; w points at panel p0 (panel stride C*16).
/// Tiles: 1 row x 8 panels (a GEMV: 8 independent FMA chains), 2 x 4, else 4 x 2.
MLS_ROWGEMM_CLONES void panels_forward(float* out, const float* x, std::int64_t N, std::int64_t C,
                                       std::int64_t OC, const float* w, std::int64_t p0,
                                       std::int64_t np, const float* bias) {
  const std::int64_t ws = C * kP;
  const int most = N == 1 ? 8 : N == 2 ? 4 : 2;
  for (std::int64_t p = 0; p < np;) {
    int P = most;
    while (P > np - p) P /= 2;
    const float* wp = w + p * ws;
    const std::int64_t o0 = (p0 + p) * kP;
    for (std::int64_t n = 0; n < N;) {
      const std::int64_t R = std::min<std::int64_t>(4, N - n);
      float* o = out + n * OC;
      const float* xr = x + n * C;
      switch (R) {
        case 1: tile_p<1>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC); break;
        case 2: tile_p<2>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC); break;
        case 3: tile_p<3>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC); break;
        default: tile_p<4>(P, o, OC, xr, C, wp, ws, C, bias, o0, OC); break;
      }
      n += R;
    }
    p += P;
  }
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

constexpr std::int64_t kPanelGrain = 8;  // panels per parallel chunk (results never depend on it)

}  // namespace

PackedMatrix pack_matrix(const float* weight, std::int64_t OC, std::int64_t C) {
  MLS_CHECK(OC >= 1 && C >= 1, "pack_matrix: a (", OC, ", ", C, ") weight, expected OC >= 1 and C >= 1");
  PackedMatrix m;
  m.C = C;
  m.OC = OC;
  m.data.resize(static_cast<std::size_t>(m.panels() * C * kP));
  parallel_for(0, m.panels(), kPanelGrain, [&](std::int64_t p0, std::int64_t p1) {
    pack_panels(m.data.data() + p0 * C * kP, weight, OC, C, p0, p1);
  });
  return m;
}

void matmul_packed_forward(float* out, const float* inp, const PackedMatrix& w, const float* bias,
                           std::int64_t N) {
  if (N <= 0) return;
  parallel_for(0, w.panels(), kPanelGrain, [&](std::int64_t p0, std::int64_t p1) {
    panels_forward(out, inp, N, w.C, w.OC, w.data.data() + p0 * w.C * kP, p0, p1 - p0, bias);
  });
}

void matmul_rows_forward(float* out, const float* inp, const float* weight, const float* bias,
                         std::int64_t N, std::int64_t C, std::int64_t OC) {
  // The same tiles on panels packed here, a chunk at a time (each weight row read once per call)
  const std::int64_t panels = (OC + kP - 1) / kP;
  parallel_for(0, panels, kPanelGrain, [&](std::int64_t p0, std::int64_t p1) {
    thread_local std::vector<float> buf;
    buf.resize(static_cast<std::size_t>((p1 - p0) * C * kP));
    pack_panels(buf.data(), weight, OC, C, p0, p1);
    panels_forward(out, inp, N, C, OC, buf.data(), p0, p1 - p0, bias);
  });
}

}  // namespace mls::llm
