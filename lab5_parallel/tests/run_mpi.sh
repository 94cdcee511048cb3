#!/bin/sh
# Runs PROGRAM under mpirun with NP processes: lab5_parallel/tests/run_mpi.sh NP PROGRAM [ARGS...]
# Sets the variables OpenMPI needs under root and bounds the run to MLS_MPI_TIMEOUT seconds
# (default 280; SIGKILL 10 s later: a stuck mpirun may ignore SIGTERM). Without mpirun it says
# SKIPPED (CTest reports the test as skipped).
#   One machine (default): shared memory between processes, oversubscribed (NP may exceed the cores).
#   Several hosts, when MLS_MPI_HOSTFILE is set (tests/multihost.sh sets it; or two real machines):
#     --hostfile $MLS_MPI_HOSTFILE, ranks placed round-robin over the hosts, TCP only
#     (--mca btl tcp,self), both MPI's messages and OpenMPI's own launch traffic restricted to
#     $MLS_MPI_NET (an interface name or a CIDR subnet, e.g. 10.77.0.0/24) when set, and the
#     remote launch through $MLS_MPI_RSH_AGENT when set (default: ssh).
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
if [ -n "${MLS_MPI_HOSTFILE:-}" ]; then
  set -- --hostfile "$MLS_MPI_HOSTFILE" --map-by node --mca btl tcp,self \
    ${MLS_MPI_NET:+--mca btl_tcp_if_include "$MLS_MPI_NET" --mca oob_tcp_if_include "$MLS_MPI_NET"} \
    ${MLS_MPI_RSH_AGENT:+--mca plm_rsh_agent "$MLS_MPI_RSH_AGENT"} "$@"
else
  # One machine: shared memory between processes, no single-copy (works in containers).
  set -- --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none "$@"
fi
exec timeout -k 10 "${MLS_MPI_TIMEOUT:-280}" mpirun -np "$np" "$@"
