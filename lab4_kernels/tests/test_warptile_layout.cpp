// Lab 4: the warptile rung of the CUDA ladder (src/warptile_layout.hpp), checked on the host, no GPU:
// for every block tile the rung runs, the float4 loads of a K slice (thread t takes float4s t,
// t + 128, ...) cover the A and B slices exactly once, the thread tiles of the 4 warps cover the block
// tile exactly once and stay inside it (the shared-memory reads and the epilogue's writes), and the
// block tile chosen for a problem is the largest whose grid gives every multiprocessor a block.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "warptile_layout.hpp"

namespace W = mls::kernels::cuda::warptile_layout;

namespace {
constexpr int kThreads = 128;  // 4 warps in every shape

/// How many times each float of a rows x cols slice is loaded when the block's threads take its
/// float4s as the kernel's fetch does.
std::vector<int> slice_loads(int rows, int cols) {
  std::vector<int> hits(static_cast<std::size_t>(rows * cols), 0);
  const int per_thread = rows * cols / 4 / kThreads;
  REQUIRE(per_thread * 4 * kThreads == rows * cols);  // the kernel's static_assert
  for (int tid = 0; tid < kThreads; ++tid)
    for (int l = 0; l < per_thread; ++l) {
      const W::RowCol e = W::load_element(tid + l * kThreads, cols);
      REQUIRE(e.row >= 0);
      REQUIRE(e.row < rows);
      REQUIRE(e.col % 4 == 0);
      REQUIRE(e.col + 3 < cols);
      for (int q = 0; q < 4; ++q) ++hits[static_cast<std::size_t>(e.row * cols + e.col + q)];
    }
  return hits;
}
}  // namespace

TEST_CASE("warptile layout: every shape's loads and thread tiles cover their tiles exactly once", "[lab4][warptile]") {
  for (const W::Shape& s : W::kShapes) {
    INFO("block tile " << s.bm << "x" << s.bn << ", warp tile " << s.wm << "x" << s.wn);
    REQUIRE((s.bm / s.wm) * (s.bn / s.wn) * 32 == kThreads);
    const int sub_m = W::kLaneRows * W::kTM, sub_n = W::kLaneCols * W::kTN;
    REQUIRE(s.wm % sub_m == 0);
    REQUIRE(s.wn % sub_n == 0);
    for (int h : slice_loads(s.bm, W::kBK)) CHECK(h == 1);  // A's slice: bm rows of BK
    for (int h : slice_loads(W::kBK, s.bn)) CHECK(h == 1);  // B's slice: BK rows of bn
    std::vector<int> owned(static_cast<std::size_t>(s.bm * s.bn), 0);
    for (int warp = 0; warp < kThreads / 32; ++warp)
      for (int lane = 0; lane < 32; ++lane) {
        const W::RowCol t0 = W::thread_tile(warp, lane, 0, 0, s.bn, s.wm, s.wn, W::kTM, W::kTN);
        CHECK(t0.row % 4 == 0);  // the float4 reads of A's transposed slice are aligned
        CHECK(t0.col % 4 == 0);  // and those of B's
        for (int wm = 0; wm < s.wm / sub_m; ++wm)
          for (int wn = 0; wn < s.wn / sub_n; ++wn) {
            const W::RowCol t = W::thread_tile(warp, lane, wm, wn, s.bn, s.wm, s.wn, W::kTM, W::kTN);
            CHECK(t.row == t0.row + wm * sub_m);  // the kernel's offsets from t0
            CHECK(t.col == t0.col + wn * sub_n);
            for (int i = 0; i < W::kTM; ++i)
              for (int j = 0; j < W::kTN; ++j) {
                REQUIRE(t.row + i < s.bm);
                REQUIRE(t.col + j < s.bn);
                ++owned[static_cast<std::size_t>((t.row + i) * s.bn + t.col + j)];
              }
          }
      }
    for (int h : owned) CHECK(h == 1);
  }
}

TEST_CASE("warptile layout: the block tile by the grid it yields", "[lab4][warptile]") {
  // 132 multiprocessors (H100 SXM, H200)
  CHECK(W::choose_shape(1024, 1024, 132) == 2);  // 64 and 128 blocks are too few: 64x64, 256 blocks
  CHECK(W::choose_shape(2048, 2048, 132) == 0);  // 256 blocks of 128x128
  CHECK(W::choose_shape(4096, 4096, 132) == 0);
  CHECK(W::choose_shape(8192, 8192, 132) == 0);
  CHECK(W::choose_shape(1024, 2048, 132) == 1);  // 128 blocks of 128x128, 256 of 64x128
  CHECK(W::choose_shape(1, 1, 132) == 2);        // none fills the GPU: the smallest
  CHECK(W::choose_shape(1024, 1024, 64) == 0);   // 64 multiprocessors: 64 blocks of 128x128 do
  CHECK(W::choose_shape(1100, 1100, 81) == 0);   // ceil: 9 x 9 = 81 blocks
  CHECK(W::choose_shape(1100, 1100, 82) == 1);
}
