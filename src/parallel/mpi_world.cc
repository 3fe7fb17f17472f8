#include "parallel/mpi_world.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "base/error.h"

#ifdef MLASERVE_WITH_MPI
#include <mpi.h>
#endif

namespace mlaserve {

bool launched_by_mpi() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr; }

#ifdef MLASERVE_WITH_MPI
namespace {

bool initialised = false;

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  double collective_seconds() const override { return seconds_; }

  // Reduce to rank 0, then broadcast: every process gets the very same bits (an allreduce
  // by recursive doubling may sum in a different order on different ranks).
  void all_reduce_sum(float* data, int64_t count) override {
    const CollectiveTimer timer(seconds_);
    MLA_CHECK(count <= INT32_MAX, "all-reduce of {} floats exceeds MPI's count limit", count);
    if (rank_ == 0)
      MPI_Reduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    else
      MPI_Reduce(data, nullptr, int(count), MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Bcast(data, int(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
  }

  void all_gather(const float* local, int64_t count, float* gathered) override {
    const CollectiveTimer timer(seconds_);
    MPI_Allgather(local, int(count), MPI_FLOAT, gathered, int(count), MPI_FLOAT, MPI_COMM_WORLD);
  }

  // Non-blocking, then polled: a follower waits here for rank 0's next command for as long
  // as the server is idle, and a blocking MPI_Bcast would spin a core all that time. After a
  // short spin it sleeps between polls.
  void broadcast(void* data, int64_t bytes, int root) override {
    const CollectiveTimer timer(seconds_);
    MLA_CHECK(bytes <= INT32_MAX, "broadcast of {} bytes exceeds MPI's count limit", bytes);
    MPI_Request request;
    MPI_Ibcast(data, int(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &request);
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    for (int done = 0;;) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (std::chrono::steady_clock::now() > spin_until) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  void abort() override { abort_mpi_job(); }

 private:
  int rank_ = 0, size_ = 1;
  double seconds_ = 0;
};

}  // namespace

void init_mpi_if_launched(int* argc, char*** argv) {
  if (!launched_by_mpi()) return;
  int provided = 0;
  // One thread at a time calls MPI, but not always the main one: serve's engine thread runs
  // the forward passes (and their collectives) on rank 0.
  MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  MLA_CHECK(provided >= MPI_THREAD_SERIALIZED, "this MPI library does not support MPI_THREAD_SERIALIZED");
  initialised = true;
}

void finalize_mpi() {
  if (initialised) MPI_Finalize();
  initialised = false;
}

std::unique_ptr<Communicator> make_mpi_communicator() {
  MLA_CHECK(initialised, "not running under mpirun");
  return std::make_unique<MpiCommunicator>();
}

void abort_mpi_job() {
  if (initialised) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

#else

void init_mpi_if_launched(int*, char***) {}
void finalize_mpi() {}

std::unique_ptr<Communicator> make_mpi_communicator() {
  fail("launched by mpirun, but this mlaserve was built without MPI (install libopenmpi-dev and rebuild)");
}

void abort_mpi_job() { std::exit(1); }

#endif

}  // namespace mlaserve
