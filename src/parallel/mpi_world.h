// Running under mpirun: each process is one rank of the model. Detected from the launcher's
// environment (OpenMPI's OMPI_COMM_WORLD_SIZE, or PMI_SIZE); a build without MPI says so.
#pragma once
#include <memory>

#include "parallel/communicator.h"

namespace mlaserve {

bool launched_by_mpi();
// Initialises MPI when launched by mpirun (call first thing in main); no-op otherwise.
void init_mpi_if_launched(int* argc, char*** argv);
void finalize_mpi();
// This process's rank of MPI_COMM_WORLD; throws Error when not under MPI or built without it.
// On rank 0, a collective that has not completed after `timeout` (0: never) throws
// CollectiveTimeout: another rank has died or stopped answering. The other ranks wait for rank 0
// without limit (for as long as the server is idle); the launcher or rank 0's abort ends them.
std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds timeout = {});
// Ends every process of the job (after an error on this rank), exit code 1.
[[noreturn]] void abort_mpi_job();

}  // namespace mlaserve
