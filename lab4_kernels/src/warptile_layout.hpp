#pragma once
// Lab 4, the `warptile` rung of the CUDA ladder (src/kernels_cuda.cu): its block tiles, how the rung
// picks one for a problem, and its index maps (which thread loads which float4 of a K slice, which
// outputs a thread owns), as small pure functions shared by the kernel (device) and by a host test
// that checks every map covers its tile exactly once (tests/test_warptile_layout.cpp, no GPU).
//
// A block computes a BM x BN tile of C with (BM / WM) x (BN / WN) warps; a warp's WM x WN tile is
// WMITER x WNITER sub-tiles of (4 TM) x (8 TN): its 32 lanes as 4 rows x 8 columns, each a TM x TN
// thread tile. A K slice of BK columns of A (BM x BK) and rows of B (BK x BN) is loaded as float4s,
// thread t taking float4s t, t + threads, t + 2 threads, ...
#if defined(__CUDACC__)
#define MLS_WT_HD __host__ __device__ __forceinline__
#else
#define MLS_WT_HD inline
#endif

namespace mls::kernels::cuda::warptile_layout {

constexpr int kLaneRows = 4, kLaneCols = 8;  // the 32 lanes of a warp over a sub-tile
constexpr int kBK = 16, kTM = 8, kTN = 4;    // every shape's K slice and thread tile

/// A block tile (bm x bn) and its warp tile (wm x wn): 4 warps, 128 threads, in every shape.
struct Shape {
  int bm, bn, wm, wn;
};
constexpr Shape kShapes[] = {{128, 128, 64, 64}, {64, 128, 32, 64}, {64, 64, 32, 32}};
constexpr int kNumShapes = 3;

/// The shape `warptile` runs for an M x N problem on a GPU of `sms` multiprocessors: the largest
/// block tile (most reuse of each loaded element) whose grid still gives every multiprocessor a block
/// (ceil(M / bm) * ceil(N / bn) >= sms); when none does, the smallest. At n = 1024 on 132 SMs:
/// 128x128 makes 64 blocks, 64x128 128, so 64x64 (256 blocks); at n >= 2048, 128x128 (256 blocks).
inline int choose_shape(int M, int N, int sms) {
  for (int s = 0; s < kNumShapes; ++s) {
    const long blocks = static_cast<long>((M + kShapes[s].bm - 1) / kShapes[s].bm) * ((N + kShapes[s].bn - 1) / kShapes[s].bn);
    if (blocks >= sms) return s;
  }
  return kNumShapes - 1;
}

struct RowCol {
  int row, col;
};

/// Float4 number `i` of a slice of `rows` x `cols` floats (cols % 4 == 0), row-major: its row and
/// first column.
MLS_WT_HD constexpr RowCol load_element(int i, int cols) { return {i / (cols / 4), (i % (cols / 4)) * 4}; }

/// The first row and column, in the block tile, of the thread tile of `lane` of warp `warp` in sub-tile
/// (wm_iter, wn_iter), for a block of bn / wn warps along N with warp tiles wm x wn and thread tiles
/// tm x tn.
MLS_WT_HD constexpr RowCol thread_tile(int warp, int lane, int wm_iter, int wn_iter, int bn, int wm, int wn, int tm,
                                       int tn) {
  return {(warp / (bn / wn)) * wm + wm_iter * (kLaneRows * tm) + (lane / kLaneCols) * tm,
          (warp % (bn / wn)) * wn + wn_iter * (kLaneCols * tn) + (lane % kLaneCols) * tn};
}

}  // namespace mls::kernels::cuda::warptile_layout
