// Worked examples of schedules (mls/kernels/tune.hpp, "worked examples"): the slide's three loop
// nests, and the SGEMM template built up one idea at a time. `mls-tune nests` and `mls-tune steps`
// print them; the handout's part 2 walks through them.
#include "mls/common/error.hpp"
#include "mls/kernels/tune.hpp"

namespace mls::kernels::tune {

std::vector<ScheduleStep> slide_steps(long n) {
  MLS_CHECK(n >= 8 && n % 8 == 0, "slide_steps: n ", n, " must be a positive multiple of 8 (the slide's tiles)");
  std::vector<ScheduleStep> out;
  for (int which = 0; which < 3; ++which) {
    te::Tensor A = te::placeholder("A", {n, n}), B = te::placeholder("B", {n, n});
    te::IterVar k = te::reduce_axis(n, "k");
    te::Tensor C = te::compute(
        "C", {n, n}, [&](te::Var y, te::Var x) { return te::sum(A(k, y) * B(k, x), {k}); }, {"y", "x"});
    te::Schedule s({C});
    std::string title, code;
    if (which == 0) {
      title = "the definition: C[y][x] = sum_k A[k][y] * B[k][x]";
      code = "Schedule s({C});";
    } else if (which == 1) {
      title = "tiled 8x8x8";
      code = "auto t = s[C].tile(C.axis(0), C.axis(1), 8, 8);\n"
             "auto [ko, ki] = s[C].split(k, 8);\n"
             "s[C].reorder({t.outer0, t.outer1, ko, t.inner0, t.inner1, ki});";
      te::TileAxes t = s[C].tile(C.axis(0), C.axis(1), 8, 8);
      auto [ko, ki] = s[C].split(k, 8);
      s[C].reorder({t.outer0, t.outer1, ko, t.inner0, t.inner1, ki});
    } else {
      title = "local tiles by dma_copy2d around fused_gemm8x8_add";
      code = "Tensor CL = s.cache_write(C);\n"
             "auto t = s[C].tile(C.axis(0), C.axis(1), 8, 8);\n"
             "s[CL].compute_at(s[C], t.outer1);\n"
             "auto [ko, ki] = s[CL].split(k, 8);\n"
             "s[CL].reorder({ko, CL's y, CL's x, ki});\n"
             "Tensor AL = s.cache_read(A, s[CL], ko), BL = s.cache_read(B, s[CL], ko);\n"
             "s[AL], s[BL], s[C]: tensorize(first tile axis, copy_intrinsic({8, 8}, \"dma_copy2d\"));\n"
             "s[CL].tensorize(CL's y, gemm_intrinsic(8, 8, 8, \"fused_gemm8x8_add\"));";
      te::Tensor CL = s.cache_write(C);
      te::TileAxes t = s[C].tile(C.axis(0), C.axis(1), 8, 8);
      s[CL].compute_at(s[C], t.outer1);
      auto [ko, ki] = s[CL].split(k, 8);
      const auto ax = s[CL].root_axes();
      s[CL].reorder({ko, ax[0], ax[1], ki});
      te::Tensor AL = s.cache_read(A, s[CL], ko);
      te::Tensor BL = s.cache_read(B, s[CL], ko);
      const te::Intrinsic dma = te::copy_intrinsic({8, 8}, "dma_copy2d");
      s[AL].tensorize(s[AL].leaf_axes()[0], dma);
      s[BL].tensorize(s[BL].leaf_axes()[0], dma);
      s[CL].tensorize(ax[0], te::gemm_intrinsic(8, 8, 8, "fused_gemm8x8_add"));
      s[C].tensorize(t.inner0, dma);
    }
    out.push_back({title, code, A, B, C, s});
  }
  return out;
}

std::vector<ScheduleStep> sgemm_steps(long m, long n, long k, const std::optional<SgemmKnobs>& knobs, int lanes) {
  SgemmKnobs kn = knobs ? *knobs : KnobSpace::sgemm(1, lanes).default_knobs();
  kn.order = "nkm";
  kn.parallel = "none";
  kn.unroll = 1;
  kn.pack_a = kn.pack_b = true;
  // The problem rounded up to whole tiles (zero-padded operands: the same product), one piece.
  const SgemmShape padded = padded_to_tiles(kn, {m, n, k}, lanes);
  const SgemmPiece p = plan_sgemm(kn, padded, lanes).pieces.front();
  const std::int64_t M = padded.m, N = padded.n, K = padded.k, mr = kn.mr, nr = kn.nr;
  std::vector<ScheduleStep> out;
  for (int step = 1; step <= 6; ++step) {
    te::Tensor A = te::placeholder("A", {M, K}), B = te::placeholder("B", {K, N});
    te::IterVar kk = te::reduce_axis(K, "k");
    te::Tensor C = te::compute(
        "C", {M, N}, [&](te::Var y, te::Var x) { return te::sum(A(y, kk) * B(kk, x), {kk}); }, {"y", "x"});
    te::Schedule s({C});
    te::Stage st = s[C];
    const te::IterVar y = C.axis(0), x = C.axis(1);
    std::string title, code;
    if (step == 1) {
      title = "1. the definition (lab4_naive's i-j-k)";
      code = "Schedule s({C});";
    } else if (step == 2) {
      title = "2. k outside x (lab4_reordered's i-k-j): the inner loop walks B and C with unit stride";
      code = "s[C].reorder({y, k, x});";
      st.reorder({y, kk, x});
    } else {
      // Register tiles (MR x NR), then cache blocks of whole tiles, then packing, then the
      // micro-kernel: each step keeps the one before and adds one idea.
      auto [yp, yi] = st.split(y, mr, "yp", "yi");
      auto [xp, xi] = st.split(x, nr, "xp", "xi");
      if (step == 3) {
        title = "3. MR x NR register tiles, k inside the tile's loops, the NR columns vectorized";
        code = "auto [yp, yi] = s[C].split(y, MR, \"yp\", \"yi\");\n"
               "auto [xp, xi] = s[C].split(x, NR, \"xp\", \"xi\");\n"
               "s[C].reorder({yp, xp, k, yi, xi});\n"
               "s[C].vectorize(xi);";
        st.reorder({yp, xp, kk, yi, xi});
        st.vectorize(xi);
      } else {
        auto [yc, yr] = st.split(yp, p.mc / mr, "yc", "yr");
        auto [xc, xr] = st.split(xp, p.nc / nr, "xc", "xr");
        auto [ko, ki] = st.split(kk, p.kc, "ko", "ki");
        const std::string blocks =
            "auto [yc, yr] = s[C].split(yp, MC / MR, \"yc\", \"yr\");\n"
            "auto [xc, xr] = s[C].split(xp, NC / NR, \"xc\", \"xr\");\n"
            "auto [ko, ki] = s[C].split(k, KC, \"ko\", \"ki\");\n";
        if (step <= 5) {
          st.reorder({xc, ko, yc, xr, yr, ki, yi, xi});
          st.vectorize(xi);
        }
        if (step == 4) {
          title = "4. MC x KC x NC cache blocks in Goto's order (xc, ko, yc), then the tiles (xr, yr)";
          code = "(step 3's splits, then)\n" + blocks + "s[C].reorder({xc, ko, yc, xr, yr, ki, yi, xi});\ns[C].vectorize(xi);";
        } else {
          const te::Tensor BL = s.cache_read(B, st, ko, te::Scope::Local, {}, nr, "BL");
          auto [bp, bi] = s[BL].split(s[BL].leaf_axes().back(), nr, "bp", "bi");
          s[BL].reorder({bp, s[BL].leaf_axes().front(), bi});
          s[BL].vectorize(bi);
          const te::Tensor AL = s.cache_read(A, st, yc, "AL");
          s[AL].vectorize(s[AL].leaf_axes().back());
          const std::string pack =
              "// KC x NC, reused by every yc, stored as NC/NR panels [NC/NR][KC][NR]\n"
              "Tensor BL = s.cache_read(B, s[C], ko, Scope::Local, {}, NR, \"BL\");\n"
              "auto [bp, bi] = s[BL].split(s[BL].leaf_axes().back(), NR, \"bp\", \"bi\");\n"
              "s[BL].reorder({bp, s[BL].leaf_axes().front(), bi});\n"
              "s[BL].vectorize(bi);\n"
              "Tensor AL = s.cache_read(A, s[C], yc, \"AL\");  // MC x KC, reused by every xr\n"
              "s[AL].vectorize(s[AL].leaf_axes().back());";
          if (step == 5) {
            title = "5. A's MC x KC and B's KC x NC blocks packed into local buffers (cache_read; B in NR-wide panels)";
            code = "(step 4, then)\n" + pack;
          } else {
            st.reorder({xc, ko, yc, xr, yr, yi, xi, ki});
            st.tensorize(yi, micro_kernel(mr, nr, p.kc, 1, p.lanes), te::ResetAt::Tile);
            title = "6. the MR x NR x KC tile as one call of a register-blocked micro-kernel: the template";
            code = "(step 3's and 4's splits, then)\n"
                   "s[C].reorder({xc, ko, yc, xr, yr, yi, xi, ki});\n" +
                   pack + "\ns[C].tensorize(yi, micro_kernel(MR, NR, KC, 1), ResetAt::Tile);  // C zeroed tile by tile";
          }
        }
      }
    }
    out.push_back({title, code, A, B, C, s});
  }
  return out;
}

}  // namespace mls::kernels::tune
