#pragma once
/// The NCCL backend: one rank per GPU. Built into mls_parallel_nccl where CUDA and NCCL are found
/// (MLS_HAVE_NCCL). Tensors stay lab 1 CPU tensors: each message is staged through a device
/// buffer (cudaMemcpy), moved with ncclSend/ncclRecv, and copied back. NCCL has no tags:
/// messages between two ranks match in the order they were sent (the collectives never rely
/// on tags), and the Header travels as a small message before each payload.
///
/// Bootstrap: rank 0 creates the NCCL unique id and writes it to `id_file`; the other ranks
/// read it (one machine, or a shared file system). Under mpirun, rank and size come from
/// OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE. One GPU means world size 1.
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
/// nccl_world with rank and size from mpirun's environment (1 process: rank 0 of 1).
Communicator nccl_world_from_env(const std::string& id_file = "mls_nccl_id.bin");

}  // namespace mls::parallel
