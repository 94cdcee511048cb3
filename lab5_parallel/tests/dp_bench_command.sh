#!/usr/bin/env bash
# mls-dp-bench as the handout runs it (issue 30): on simulated ranks with a layered model and a
# small first bucket it prints the efficiency, its ceiling and the step's phases; on 2 MPI
# processes (where mpirun is) --link-auto calibrates the emulated link and labels it; and the
# flags that make no sense are refused, naming what is wrong (exit status 1).
# Usage: dp_bench_command.sh <path to mls-dp-bench>
set -euo pipefail
tool="$1"
here=$(cd "$(dirname "$0")" && pwd)

out=$("$tool" --ranks 2 --layers 4 --width 32 --batch 16 --bucket-bytes 20000 --first-bucket-bytes 1000 --steps 2 --warmup 1)
echo "$out"
grep -q "layers 4 buckets 4 bucket_bytes 20000 first_bucket_bytes 1000" <<< "$out" ||
  { echo "FAIL: no 'layers 4 buckets 4' line (4 layers of 32 -> 64 -> 64 -> 64 -> 10: {b4} in the 1000-byte first bucket, {W4 b3 W3 b2}, {W2 b1}, {W1})"; exit 1; }
for r in dp_overlap_efficiency dp_overlap_efficiency_ceiling dp_overlap_step_over_max dp_overlap_speedup \
         dp_overlap_step_over_max_floor; do
  grep -q "^ratio $r [-0-9.]*" <<< "$out" || { echo "FAIL: no 'ratio $r' line"; exit 1; }
done
# the ceiling line says the step/max bound it implies (2 - ceiling at t_comm = t_compute)
grep -q "^ratio dp_overlap_efficiency_ceiling .* so t_step / max(t_compute, t_comm) >= [0-9.]* ((t_compute + t_comm - ceiling \* min) / max: 2 - ceiling at t_comm = t_compute" <<< "$out" ||
  { echo "FAIL: the ceiling line does not print its step/max bound"; exit 1; }
grep -q "^compute: forward .* backward .* optimizer .* (per bucket, as each allreduce is waited, the last bucket's .* comm CPU .* comm thread scheduling: " <<< "$out" ||
  { echo "FAIL: no phases line (with the optimizer per bucket, the default)"; exit 1; }
out=$("$tool" --ranks 2 --layers 2 --width 32 --batch 16 --steps 1 --warmup 0 --no-optimizer-per-bucket)
grep -q "^compute: forward .* optimizer .* (after every allreduce" <<< "$out" ||
  { echo "FAIL: --no-optimizer-per-bucket: the phases line does not say the optimizer follows every allreduce"; exit 1; }

# re-prioritised buckets, waited in the next forward: the schedule line, its ceiling, DDP's figures beside it
out=$("$tool" --ranks 2 --layers 4 --width 32 --batch 16 --bucket-bytes 20000 --first-bucket-bytes 1000 --steps 2 --warmup 1 \
      --defer-buckets 2 --wait-in-forward --run-steps 2 --svg "${TMPDIR:-/tmp}/dp_bench_defer_$$.svg")
echo "$out"
grep -q "^schedule: defer_buckets 2 of 4, issue order 0 1 3 2; the deferred buckets waited in the next forward" <<< "$out" ||
  { echo "FAIL: no schedule line for --defer-buckets 2 --wait-in-forward"; exit 1; }
grep -q "^ratio dp_overlap_efficiency_ceiling [0-9.]* (waits in forward, 2 deferred: .* so t_step / max(t_compute, t_comm) >= [0-9.]*" <<< "$out" ||
  { echo "FAIL: no ceiling line of the schedule with waits in forward"; exit 1; }
for r in dp_overlap_efficiency dp_overlap_step_over_max dp_overlap_speedup dp_overlap_efficiency_ddp \
         dp_overlap_efficiency_ceiling_ddp dp_overlap_step_over_max_ddp; do
  grep -q "^ratio $r [-0-9.]*" <<< "$out" || { echo "FAIL: no 'ratio $r' line with --defer-buckets"; exit 1; }
done
grep -q "wait in forward (a deferred bucket)" "${TMPDIR:-/tmp}/dp_bench_defer_$$.svg" ||
  { echo "FAIL: the timeline has no 'wait in forward' kind"; exit 1; }
rm -f "${TMPDIR:-/tmp}/dp_bench_defer_$$.svg"
out=$("$tool" --ranks 2 --layers 3 --width 32 --batch 16 --bucket-bytes 1 --steps 1 --warmup 1 --defer-buckets auto --wait-in-forward)
grep -q "^schedule: defer_buckets [1-6] of 6 auto: modelled step / max(t_compute, t_comm) for K = 1..6:" <<< "$out" ||
  { echo "FAIL: --defer-buckets auto printed no choice"; exit 1; }
out=$("$tool" --ranks 2 --layers 3 --width 32 --batch 16 --steps 1 --warmup 0 --defer-buckets 1)
grep -q "^schedule: defer_buckets 1 of .* every bucket waited before the optimizer step" <<< "$out" ||
  { echo "FAIL: --defer-buckets 1 without --wait-in-forward printed no schedule"; exit 1; }

refuse() {  # refuse "<expected text>" command...
  local want="$1"
  shift
  local msg rc=0
  msg=$("$@" 2>&1) || rc=$?
  [ "$rc" -ne 0 ] || { echo "FAIL: '$*' was accepted"; exit 1; }
  grep -qF -- "$want" <<< "$msg" || { echo "FAIL: '$*' said: $msg (expected: $want)"; exit 1; }
  echo "refused as expected: $*"
}
refuse "--link-auto needs the MPI backend (run it under mpirun)" "$tool" --ranks 2 --link-auto
refuse "--layers: Value 1 not in range 2 to 256" "$tool" --layers 1
refuse "--first-bucket-bytes: Value 0 not in range" "$tool" --first-bucket-bytes 0
refuse "MLS_LINK_GBPS='0': the bandwidth must be > 0 Gbit/s" env MLS_LINK_GBPS=0 "$tool" --ranks 2
refuse "--defer-buckets: expected a bucket count >= 0 or 'auto', got '-1'" "$tool" --ranks 2 --defer-buckets=-1
refuse "--defer-buckets: expected a bucket count >= 0 or 'auto', got 'two'" "$tool" --ranks 2 --defer-buckets two
refuse "mls-dp-bench: --defer-buckets 9 but the model has 6 buckets (with --bucket-bytes 1); expected 0..6 or auto" \
  "$tool" --ranks 2 --layers 3 --width 32 --batch 16 --bucket-bytes 1 --steps 1 --defer-buckets 9
refuse "--wait-in-forward needs --defer-buckets K (>= 1) or auto" "$tool" --ranks 2 --wait-in-forward
refuse "--defer-buckets auto picks K for --wait-in-forward's schedule" "$tool" --ranks 2 --defer-buckets auto
refuse "--wait-in-forward runs each deferred bucket's optimizer step in the next forward: it needs the per-bucket optimizer" \
  "$tool" --ranks 2 --defer-buckets 1 --wait-in-forward --no-optimizer-per-bucket

if ! command -v mpirun >/dev/null 2>&1; then
  echo "mpirun not found: the MPI part (--link-auto) is not run"
  exit 0
fi
# a batch whose compute is well above the allreduces on the plain link (else --link-auto says no
# bandwidth can make them equal), even on a loaded machine: CI once measured 3.3 ms of compute at
# --batch 512 against 15.7 ms of allreduces with another test beside it, so the test runs alone
# (RUN_SERIAL) and its compute is 4x that
set +e
out=$("$here/run_mpi.sh" 2 "$tool" --layers 3 --width 128 --batch 2048 --bucket-bytes 100000 --steps 3 --warmup 1 --link-auto 2>&1)
rc=$?
set -e
echo "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: --link-auto on 2 MPI processes exited $rc"; exit 1; }
grep -q "^emulated link: [0-9.e+-]* Gbit/s, no added latency (set by mls-dp-bench --link-auto" <<< "$out" ||
  { echo "FAIL: --link-auto printed no calibrated link"; exit 1; }
grep -q "^ratio dp_overlap_efficiency [-0-9.]* \[emulated link\]" <<< "$out" ||
  { echo "FAIL: no labelled efficiency under --link-auto"; exit 1; }
# waits in forward on processes (DataParallel on a communicator of its own): the schedule runs and prints its figures
out=$("$here/run_mpi.sh" 2 "$tool" --layers 3 --width 64 --batch 256 --bucket-bytes 20000 --steps 2 --warmup 1 \
      --defer-buckets 2 --wait-in-forward --run-steps 2 2>&1) || { echo "$out"; echo "FAIL: --wait-in-forward on 2 MPI processes"; exit 1; }
grep -q "^ratio dp_overlap_efficiency_ceiling [0-9.]* (waits in forward, 2 deferred" <<< "$out" ||
  { echo "$out"; echo "FAIL: no ceiling of the schedule with waits in forward on MPI"; exit 1; }
refuse "--link-auto chooses the bandwidth itself, but MLS_LINK_GBPS=4 is set too" \
  env MLS_LINK_GBPS=4 "$here/run_mpi.sh" 2 "$tool" --width 64 --batch 64 --steps 1 --link-auto
echo "mls-dp-bench: ok"
