#!/usr/bin/env bash
# mls-zero-bench with gradient accumulation: a tiny grid runs and prints every ratio line, and an
# --accum that does not divide --batch is refused with a clear error (exit status 1, no crash).
# Usage: zero_bench_command.sh <path to mls-zero-bench>
set -euo pipefail
bench="$1"
out=$("$bench" --ranks 2 --config nano --n-layer 2 --steps 1 --reps 1 --batch 4 --accum 2)
echo "$out"
printf '%s\n' "$out" | grep -q "B = 4 per rank in 2 micro-batch(es)" || { echo "FAIL: no accum in the header"; exit 1; }
for r in zero1_step_vs_zero0_sim zero3_step_vs_zero0_sim remat_sqrt_step_vs_none_zero2_sim bf16_step_vs_fp32_sim; do
  printf '%s\n' "$out" | grep -Eq "^ratio $r [0-9]+\.[0-9]+$" || { echo "FAIL: no 'ratio $r' line"; exit 1; }
done
set +e
err=$("$bench" --ranks 2 --config nano --n-layer 2 --steps 1 --reps 1 --batch 4 --accum 3 2>&1)
rc=$?
set -e
echo "$err"
[ "$rc" -eq 1 ] || { echo "FAIL: --accum 3 with --batch 4 exited $rc, expected 1"; exit 1; }
printf '%s\n' "$err" | grep -q "accum" || { echo "FAIL: the error does not name accum"; exit 1; }
# --overlap: stages 0-3, t_comm the step's collectives replayed alone, an efficiency of at most 1
out=$("$bench" --ranks 2 --config nano --n-layer 2 --steps 1 --reps 1 --batch 2 --overlap)
echo "$out"
for s in 0 1 2 3; do
  line=$(printf '%s\n' "$out" | grep -E "^ratio zero${s}_overlap_efficiency_sim -?[0-9]+\.[0-9]+" || true)
  [ -n "$line" ] || { echo "FAIL: no 'ratio zero${s}_overlap_efficiency_sim' line"; exit 1; }
  v=$(printf '%s\n' "$line" | awk '{print $3}')
  awk -v v="$v" 'BEGIN { exit !(v <= 1.0) }' || { echo "FAIL: stage $s efficiency $v > 1"; exit 1; }
done
echo "OK: mls-zero-bench runs with --accum and --overlap and refuses an accum that does not divide the batch"
