#!/bin/sh
# Data-parallel speed-up on MPI: the same global batch on 2 processes vs 1 process.
#   lab5_parallel/bench/dp_mpi_speedup.sh [BUILD_DIR (default build/release)] [extra mls-dp-bench args]
# Prints both timings and `ratio dp_mpi_speedup <t(1 process) / t(2 processes)>`.
set -eu
bin=${1:-build/release}/bin
[ $# -gt 0 ] && shift
exe="$bin/mls-dp-bench"
if [ ! -x "$exe" ]; then echo "dp_mpi_speedup: $exe not built" >&2; exit 1; fi
if ! command -v mpirun >/dev/null 2>&1; then echo "SKIPPED: mpirun not found"; exit 0; fi
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# One thread per process, so 2 processes use what 2 threads would: the comparison is of
# data parallelism across processes, not of thread counts.
export MLS_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mpi="mpirun --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none"
t1=$($mpi -np 1 "$exe" "$@" | awk '/seconds_per_step/ {print $NF}')
t2=$($mpi -np 2 "$exe" "$@" | awk '/seconds_per_step/ {print $NF}')
echo "dp 1 process: $t1 s/step, 2 processes: $t2 s/step"
awk -v a="$t1" -v b="$t2" 'BEGIN { printf "ratio dp_mpi_speedup %.3f\n", a / b }'
