#!/usr/bin/env bash
# mls-zero-bench with gradient accumulation: a tiny grid runs and prints every ratio line, and an
# --accum that does not divide --batch is refused with a clear error (exit status 1, no crash);
# --overlap prints each stage's efficiency and its ceiling; --link-auto (MPI, where mpirun is)
# calibrates the emulated link and is refused on simulated ranks and next to MLS_LINK_GBPS.
# Usage: zero_bench_command.sh <path to mls-zero-bench>
set -euo pipefail
bench="$1"
out=$("$bench" --ranks 2 --config nano --n-layer 2 --steps 1 --reps 1 --batch 4 --accum 2)
echo "$out"
grep -q "B = 4 per rank in 2 micro-batch(es)" <<< "$out" || { echo "FAIL: no accum in the header"; exit 1; }
for r in zero1_step_vs_zero0_sim zero3_step_vs_zero0_sim remat_sqrt_step_vs_none_zero2_sim bf16_step_vs_fp32_sim; do
  grep -Eq "^ratio $r [0-9]+\.[0-9]+$" <<< "$out" || { echo "FAIL: no 'ratio $r' line"; exit 1; }
done
set +e
err=$("$bench" --ranks 2 --config nano --n-layer 2 --steps 1 --reps 1 --batch 4 --accum 3 2>&1)
rc=$?
set -e
echo "$err"
[ "$rc" -eq 1 ] || { echo "FAIL: --accum 3 with --batch 4 exited $rc, expected 1"; exit 1; }
grep -q "accum" <<< "$err" || { echo "FAIL: the error does not name accum"; exit 1; }
# --overlap: stages 0-3, t_comm the step's collectives replayed alone, an efficiency of at most 1
out=$("$bench" --ranks 2 --config nano --n-layer 2 --steps 1 --reps 1 --batch 2 --overlap)
echo "$out"
for s in 0 1 2 3; do
  line=$(grep -E "^ratio zero${s}_overlap_efficiency_sim -?[0-9]+\.[0-9]+" <<< "$out" || true)
  [ -n "$line" ] || { echo "FAIL: no 'ratio zero${s}_overlap_efficiency_sim' line"; exit 1; }
  v=$(printf '%s\n' "$line" | awk '{print $3}')
  awk -v v="$v" 'BEGIN { exit !(v <= 1.0) }' || { echo "FAIL: stage $s efficiency $v > 1"; exit 1; }
  grep -Eq "^ratio zero${s}_overlap_efficiency_ceiling_sim [0-9]+\.[0-9]+ \(collectives that cannot overlap" <<< "$out" ||
    { echo "FAIL: no 'ratio zero${s}_overlap_efficiency_ceiling_sim' line"; exit 1; }
  # the ceiling's bound on step/max: (t_compute + t_comm - ceiling * min) / max, at least 1
  line=$(grep -E "^ratio zero${s}_overlap_step_over_max_floor_sim [0-9]+\.[0-9]+" <<< "$out" || true)
  [ -n "$line" ] || { echo "FAIL: no 'ratio zero${s}_overlap_step_over_max_floor_sim' line"; exit 1; }
  v=$(printf '%s\n' "$line" | awk '{print $3}')
  awk -v v="$v" 'BEGIN { exit !(v >= 0.999 && v <= 2.0) }' || { echo "FAIL: stage $s step/max floor $v outside [1, 2]"; exit 1; }
done
# --svg: stage 3's blocking and overlapped step drawn (sim); only with --overlap
svg=$(mktemp --suffix=.svg)
trap 'rm -f "$svg"' EXIT
out=$("$bench" --ranks 2 --config nano --n-layer 2 --steps 2 --reps 1 --batch 2 --overlap --svg "$svg")
grep -qF "timeline: $svg" <<< "$out" || { echo "FAIL: --svg printed no 'timeline:' line"; exit 1; }
grep -q "<svg" "$svg" && grep -q "overlapped (--overlap)" "$svg" && grep -q "reduce-scatter" "$svg" ||
  { echo "FAIL: $svg is not the timeline"; exit 1; }
set +e
err=$("$bench" --ranks 2 --steps 1 --svg "$svg" 2>&1)
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -qF -- "draws the --overlap run's timeline: add --overlap" <<< "$err" ||
  { echo "FAIL: --svg without --overlap exited $rc: $err"; exit 1; }
# --link-auto: only with --overlap on MPI; never next to MLS_LINK_GBPS
set +e
err=$("$bench" --ranks 2 --overlap --link-auto 2>&1)
rc=$?
set -e
echo "$err"
[ "$rc" -eq 1 ] || { echo "FAIL: --link-auto on simulated ranks exited $rc, expected 1"; exit 1; }
grep -qF -- "--link-auto needs --overlap and --backend mpi" <<< "$err" || { echo "FAIL: the error does not say why"; exit 1; }
run_mpi="$(cd "$(dirname "$0")/../../lab5_parallel/tests" && pwd)/run_mpi.sh"
if command -v mpirun >/dev/null 2>&1; then
  set +e
  err=$(MLS_LINK_GBPS=4 "$run_mpi" 2 "$bench" --backend mpi --overlap --link-auto --steps 1 --reps 1 2>&1)
  rc=$?
  set -e
  [ "$rc" -ne 0 ] || { echo "FAIL: --link-auto with MLS_LINK_GBPS was accepted"; exit 1; }
  grep -qF -- "--link-auto chooses the bandwidth itself, but MLS_LINK_GBPS=4 is set too" <<< "$err" ||
    { echo "FAIL: --link-auto with MLS_LINK_GBPS said: $err"; exit 1; }
  # a batch whose compute is well above the collectives on the plain link (else --link-auto says
  # no bandwidth can make them equal), even on a loaded machine
  set +e
  out=$("$run_mpi" 2 "$bench" --backend mpi --config nano --n-layer 2 --steps 2 --reps 2 --batch 16 --overlap --link-auto 2>&1)
  rc=$?
  set -e
  echo "$out"
  [ "$rc" -eq 0 ] || { echo "FAIL: --link-auto on 2 MPI processes exited $rc"; exit 1; }
  grep -q "^emulated link: [0-9.e+-]* Gbit/s, no added latency (set by mls-zero-bench --link-auto" <<< "$out" ||
    { echo "FAIL: --link-auto printed no calibrated link"; exit 1; }
  grep -Eq "^ratio zero3_overlap_efficiency_mpi -?[0-9]+\.[0-9]+ \[emulated link\]" <<< "$out" ||
    { echo "FAIL: no labelled stage-3 efficiency under --link-auto"; exit 1; }
fi
echo "OK: mls-zero-bench runs with --accum and --overlap (with its ceiling, --link-auto on MPI) and refuses an accum that does not divide the batch and --link-auto where it makes no sense"
