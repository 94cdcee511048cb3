#!/usr/bin/env bash
# One command that checks a GPU install of mlsys-labs (issue 33, part 1), for any user with a GPU:
#
#   scripts/gpu_check.sh BUILD_DIR          e.g. scripts/gpu_check.sh build/release
#
# 1. prints the device (nvidia-smi -L, else what the CUDA benchmark reports);
# 2. runs every `gpu`-labelled test (lab 4's CUDA SGEMM ladder and fused kernels, lab 4 part 2's
#    generated CUDA kernels, lab 5's NCCL backend at world size 1, lab 6's ZeRO on NCCL);
# 3. runs the GPU benchmarks: lab 4's ladder against cuBLAS at n = 1024, 2048, 4096, 8192, and its
#    bf16 tensor-core rungs (wmma, then mma: mma.sync + ldmatrix) against cublasGemmEx (mls-cuda-sgemm-bench;
#    after the ladder, the warptile rung with each of its block tiles, warptile_128x128/64x128/64x64:
#    lines ratio cuda_sgemm_warptile_<BM>x<BN>_n<N>_vs_cublas), lab 4's fused kernels (softmax, layernorm, bias+GELU at 4096x1024,
#    16384x1024, 4096x4096) against a device-to-device copy of the same bytes
#    (mls-cuda-fused-bench), ncclAllReduce against our ring over NCCL at world size 1
#    (mls-nccl-allreduce-bench), and lab 4 part 2's generated CUDA matmul against cuBLAS at n = 1024,
#    2048 (mls-te-cuda-bench: its default schedules, t32 and the register-tiled bm<BM>x<BN>_bk<BK>_tm<TM>x<TN>[_db]
#    ones, each checked against cuBLAS; lines ratio te_cuda_matmul_<cfg>_vs_cublas_n<N>);
# 4. writes a summary table and the benchmarks' `ratio ...` lines, with every log, to $OUT (default:
#    BUILD_DIR/gpu_check).
# Exit status: 0 when every gpu test passed, 1 when one failed or a step failed, 3 when there is no
# usable GPU (the tests that need one say "SKIPPED: no GPU"). Bounded: each step has a timeout; the whole is meant to take
# under 5 minutes on one H100 after the build.
#
# A GPU build needs only these targets (MLS_GPU_TARGETS for ../shared/gpu/on-device.sh, or
# `cmake --build BUILD_DIR --target ...`):
#   mls_lab4_gpu_tests mls_lab4_te_gpu_tests mls_lab5_gpu_tests mls_lab6_gpu_tests
#   mls-cuda-sgemm-bench mls-cuda-fused-bench mls-nccl-allreduce-bench mls-te-cuda-bench
# (mls_lab4_te_gpu_tests: lab 4 part 2's generated CUDA kernels, NVRTC-compiled, against the
# interpreter; its NVRTC-only twin mls_lab4_nvrtc_tests needs no GPU and is not labelled gpu.)
set -uo pipefail
B="${1:?usage: scripts/gpu_check.sh BUILD_DIR}"
[ -d "$B" ] || { echo "gpu_check: no build folder '$B' (build first: cmake --preset release && cmake --build --preset release)" >&2; exit 2; }
B="$(cd "$B" && pwd)"
OUT="${OUT:-$B/gpu_check}"
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
status=0

say "== gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ), build $B"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L 2>&1 | tee "$OUT/device.txt" | sed 's/^/device: /' | tee -a "$summary"
else
  say "device: nvidia-smi not found"
fi

# -- is there a usable GPU? (a CUDA benchmark says so on a tiny size: whichever was built)
probe=$(find "$B" -name mls-cuda-sgemm-bench -type f -perm -u+x | head -1)
probe_args=(64)
if [ -z "$probe" ]; then
  probe=$(find "$B" -name mls-cuda-fused-bench -type f -perm -u+x | head -1)
  probe_args=(8x8 --reps 1 --batch 1)
fi
if [ -n "$probe" ]; then
  timeout 60 "$probe" "${probe_args[@]}" > "$OUT/probe.log" 2>&1
  if grep -q "SKIPPED: no GPU" "$OUT/probe.log"; then
    say "no usable GPU: $(grep -m1 -o "SKIPPED: no GPU.*" "$OUT/probe.log")"
    say "(the gpu tests would all be SKIPPED; nothing to check here)"
    exit 3
  fi
else
  say "mls-cuda-sgemm-bench and mls-cuda-fused-bench not built: CUDA was not found at configure time, or the targets were not built"
fi

# -- the gpu tests
say "== ctest -L gpu"
timeout 300 ctest --test-dir "$B" -L gpu --output-on-failure > "$OUT/ctest_gpu.log" 2>&1
rc=$?
passed=$(grep -cE "^ *[0-9]+/[0-9]+ Test .* Passed" "$OUT/ctest_gpu.log" || true)
skipped=$(grep -cE "^ *[0-9]+/[0-9]+ Test .*\*\*\*Skipped" "$OUT/ctest_gpu.log" || true)
failed=$(grep -cE "^ *[0-9]+/[0-9]+ Test .*\*\*\*(Failed|Timeout|Exception)" "$OUT/ctest_gpu.log" || true)
total=$(grep -oE "out of [0-9]+" "$OUT/ctest_gpu.log" | tail -1 | grep -oE "[0-9]+" || echo 0)
say "gpu tests: $total in all, $passed passed, $failed failed, $skipped skipped (rc $rc)"
if [ "$total" = 0 ]; then
  say "gpu tests: none registered (was CUDA found at configure time? see -- mls: CUDA in cmake's output)"
  status=1
elif [ "$failed" -gt 0 ] || [ "$rc" -ne 0 ]; then
  grep -E "\*\*\*(Failed|Timeout|Exception)" "$OUT/ctest_gpu.log" | tee -a "$summary"
  status=1
fi

# -- the benchmarks
run_bench() {  # name, timeout, program, args...
  local name=$1 limit=$2 prog=$3; shift 3
  local bin
  bin=$(find "$B" -name "$prog" -type f -perm -u+x | head -1)
  if [ -z "$bin" ]; then say "$name: $prog not built (skipped)"; return; fi
  say "== $name: $prog $*"
  timeout "$limit" "$bin" "$@" > "$OUT/$name.log" 2>&1
  local r=$?
  if [ $r -ne 0 ]; then say "$name: exit $r (see $name.log)"; status=1; fi
  grep -E "^device:|GFLOP|GB/s|^ratio " "$OUT/$name.log" | tee -a "$summary"
}
run_bench sgemm 240 mls-cuda-sgemm-bench 1024 2048 4096 8192 --json "$OUT/sgemm.json"
run_bench fused 90 mls-cuda-fused-bench --json "$OUT/fused.json"
run_bench nccl_allreduce 120 mls-nccl-allreduce-bench
run_bench te_cuda 120 mls-te-cuda-bench 1024 2048

say "== gpu_check: status $status; logs in $OUT: $(ls "$OUT" | tr '\n' ' ')"
grep -h "^ratio " "$OUT"/*.log 2>/dev/null
exit $status
