#pragma once
/// The MPI backend (OpenMPI): one rank per process, launched with
///   mpirun -np 2 ./program                     (one machine)
///   mpirun -np 8 --hostfile hosts ./program    (several machines: one line "host slots=N" each)
/// Built into mls_parallel_mpi where MPI is found (MLS_HAVE_MPI). Under root, OpenMPI needs
/// OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (lab5_parallel/tests/run_mpi.sh sets them).
///
/// Messages: a Header travels with every payload (packed in one message up to kInlineBytes,
/// else a header message then the payload), every wait polls with a deadline, so a receive
/// that never matches throws mls::Error after the timeout instead of hanging.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include "mls/parallel/comm.hpp"
#include "mls/parallel/link.hpp"

namespace mls::parallel {

/// Initialises MPI once per process (MPI_Init_thread asking MPI_THREAD_MULTIPLE: the
/// asynchronous collectives' communication thread calls MPI next to the caller's thread; where
/// the library provides less, they run when issued, without overlap) and finalises it at exit.
/// Safe to call many times.
void mpi_init();
/// True when this process was started by mpirun (OMPI_COMM_WORLD_SIZE is set).
bool under_mpirun();

/// A Communicator over a duplicate of MPI_COMM_WORLD: every call gets a fresh context, so
/// messages left over by a failed collective never match later ones. Initialises MPI.
Communicator mpi_world(std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));

/// Runs `body` on this process's rank of mpi_world(); an exception prints
/// "mls: rank R of N failed: <message>" on stderr and ends the whole job (MPI_Abort), so one
/// failing rank never leaves the others hanging. Returns 0.
int mpi_run(const std::function<void(Communicator&)>& body,
            std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));

/// Replaces this process's emulated link (link.hpp) from now on, for every MPI communicator of
/// the process; mpi_world() no longer reads MLS_LINK_GBPS / MLS_LINK_US afterwards. For a
/// program that calibrates its link (mls-dp-bench --link-auto): every rank must set the same
/// link, with no collective in flight (between a barrier and the next collective). std::nullopt
/// hands the link back to the environment (read now, and again by every mpi_world()).
void mpi_set_link(const std::optional<LinkEmulation>& link);
/// The emulated link in force (inactive: none).
LinkEmulation mpi_link();

/// MPI_Wtime (seconds).
double mpi_wtime();

}  // namespace mls::parallel
