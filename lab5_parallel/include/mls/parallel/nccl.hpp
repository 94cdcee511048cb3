#pragma once
/// The NCCL backend: one rank per GPU. Built into mls_parallel_nccl where CUDA and NCCL are found
/// (MLS_HAVE_NCCL). Tensors stay lab 1 CPU tensors: each message is staged through a device
/// buffer (cudaMemcpy), moved with ncclSend/ncclRecv, and copied back. NCCL has no tags:
/// messages between two ranks match in the order they were sent (the collectives never rely
/// on tags), and the Header travels as a small message before each payload.
///
/// Bootstrap: rank 0 creates the NCCL unique id and every rank needs it before NCCL can connect.
/// `nccl_world(bootstrap)` broadcasts it over another communicator (mpi_world() under mpirun,
/// on one machine or several: nothing shared but the network); `nccl_world(rank, size, id_file)`
/// passes it through a file instead (one machine, or a shared file system). Under mpirun,
/// `nccl_world_from_env()` does the broadcast over MPI. One GPU means world size 1.
#include <chrono>
#include <string>

#include "mls/parallel/comm.hpp"

namespace mls::parallel {

/// True when a CUDA device is usable; otherwise `why` says why not.
bool nccl_gpu_available(std::string* why = nullptr);

/// A Communicator of `size` ranks, this process being `rank`, on GPU `rank % device count`.
/// size 1 needs no id file.
Communicator nccl_world(int rank = 0, int size = 1, const std::string& id_file = "",
                        std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));
/// A Communicator of bootstrap.size() ranks, this process being bootstrap.rank(), on GPU
/// `rank % device count`: rank 0's NCCL unique id reaches the others as a broadcast over
/// `bootstrap` (any backend but nccl), so the ranks may be on different hosts.
Communicator nccl_world(Communicator& bootstrap);
/// Under mpirun (OMPI_COMM_WORLD_SIZE > 1): nccl_world(mpi_world()), the id broadcast over MPI
/// (an mls::Error in a build without the MPI backend). One process: nccl_world(0, 1).
Communicator nccl_world_from_env();

}  // namespace mls::parallel
