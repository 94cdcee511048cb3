#!/bin/sh
# Our ring allreduce against MPI_Allreduce on 2 MPI processes, 1 KiB to 64 MiB, after calibrating
# the α-β-γ model on the same processes:
#   lab5_parallel/bench/compare_mpi.sh BUILD_DIR [NP] [--multihost]
# One machine by default (shared memory, tests/run_mpi.sh); --multihost: two emulated hosts, one
# rank each, TCP over a veth pair between two network namespaces (tests/multihost.sh; root), so
# α and β are the link's and the model's column predicts that link.
# Prints the calibration, a table (time, algbw, busbw, model) and one line per size:
#   ratio allreduce_<bytes> <ours/mpi time>
# Goal: ratio <= 1.25 at >= 1 MiB (1.5 is the floor); the model within ±25% of ours at >= 1 MiB.
set -eu
build=${1:?usage: compare_mpi.sh BUILD_DIR [NP] [--multihost]}
np=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
run="$here/../tests/run_mpi.sh"
if [ "${3:-}" = --multihost ]; then
  run="$here/../tests/multihost.sh"
  if [ "$(id -u)" != 0 ]; then
    echo "compare_mpi.sh: --multihost needs root (it creates network namespaces)" >&2
    exit 1
  fi
elif [ -n "${3:-}" ]; then
  echo "compare_mpi.sh: unknown option '$3' (expected --multihost)" >&2
  exit 2
fi
for p in mls-collectives mls-mpi-allreduce-bench; do
  if [ ! -x "$build/bin/$p" ]; then
    echo "compare_mpi.sh: $build/bin/$p not found (build with MPI: libopenmpi-dev)" >&2
    exit 1
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$run" "$np" "$build/bin/mls-collectives" calibrate --out "$tmp/cost.json"
"$run" "$np" "$build/bin/mls-mpi-allreduce-bench" --model "$tmp/cost.json"
