#!/bin/sh
# Runs PROGRAM under mpirun with NP processes on this machine: lab5_parallel/tests/run_mpi.sh NP PROGRAM [ARGS...]
# Sets the variables OpenMPI needs under root, oversubscribes (NP may exceed the cores), and
# bounds the run. Without mpirun it says SKIPPED (CTest reports the test as skipped).
np=$1
shift
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIPPED: mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)"
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# OpenMPI does not free everything at MPI_Finalize: under AddressSanitizer, do not report leaks.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# One machine: shared memory between processes, no single-copy (works in containers).
exec timeout 280 mpirun --oversubscribe -np "$np" --mca btl self,vader \
  --mca btl_vader_single_copy_mechanism none "$@"
