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
refuse "--link-auto chooses the bandwidth itself, but MLS_LINK_GBPS=4 is set too" \
  env MLS_LINK_GBPS=4 "$here/run_mpi.sh" 2 "$tool" --width 64 --batch 64 --steps 1 --link-auto
echo "mls-dp-bench: ok"
