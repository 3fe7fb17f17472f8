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
  explicit MpiCommunicator(std::chrono::milliseconds timeout) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (rank_ == 0) timeout_ = timeout;
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  double collective_seconds() const override { return seconds_; }

  // Reduce to rank 0, then broadcast: every process gets the very same bits (an allreduce
  // by recursive doubling may sum in a different order on different ranks).
  void all_reduce_sum(float* data, int64_t count) override {
    const CollectiveTimer timer(seconds_);
    MLA_CHECK(count <= INT32_MAX, "all-reduce of {} floats exceeds MPI's count limit", count);
    MPI_Request request;
    if (rank_ == 0)
      MPI_Ireduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD, &request);
    else
      MPI_Ireduce(data, nullptr, int(count), MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD, &request);
    wait(request, "all-reduce", Poll::Spin);
    MPI_Ibcast(data, int(count), MPI_FLOAT, 0, MPI_COMM_WORLD, &request);
    wait(request, "all-reduce", Poll::Spin);
  }

  void all_gather(const float* local, int64_t count, float* gathered) override {
    const CollectiveTimer timer(seconds_);
    MPI_Request request;
    MPI_Iallgather(local, int(count), MPI_FLOAT, gathered, int(count), MPI_FLOAT, MPI_COMM_WORLD, &request);
    wait(request, "all-gather", Poll::Spin);
  }

  // A follower waits here for rank 0's next command for as long as the server is idle, and
  // spinning would hold a core all that time: after a short spin it sleeps between polls.
  void broadcast(void* data, int64_t bytes, int root) override {
    const CollectiveTimer timer(seconds_);
    MLA_CHECK(bytes <= INT32_MAX, "broadcast of {} bytes exceeds MPI's count limit", bytes);
    MPI_Request request;
    MPI_Ibcast(data, int(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &request);
    wait(request, "broadcast", Poll::SpinThenSleep);
  }

  void barrier() override {
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    wait(request, "barrier", Poll::SpinThenSleep);
  }
  void abort() override { abort_mpi_job(); }

 private:
  enum class Poll { Spin, SpinThenSleep };
  // Polls a non-blocking collective to its end, or (rank 0) to the timeout.
  void wait(MPI_Request& request, const char* what, Poll poll) {
    const auto start = std::chrono::steady_clock::now();
    for (int done = 0, polls = 1;; ++polls) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (poll == Poll::Spin && polls % 1024 != 0) continue;  // a poll costs less than reading the clock
      const auto waited = std::chrono::steady_clock::now() - start;
      if (timeout_.count() > 0 && waited > timeout_)
        throw CollectiveTimeout(
            fmt::format("an MPI {} did not complete within {} s (--comm-timeout): a rank has died "
                        "or stopped answering",
                        what, timeout_.count() / 1000.0));
      if (poll == Poll::SpinThenSleep && waited > std::chrono::microseconds(200))
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds timeout_{0};
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

std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds timeout) {
  MLA_CHECK(initialised, "not running under mpirun");
  return std::make_unique<MpiCommunicator>(timeout);
}

void abort_mpi_job() {
  if (initialised) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

#else

void init_mpi_if_launched(int*, char***) {}
void finalize_mpi() {}

std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds) {
  fail("launched by mpirun, but this mlaserve was built without MPI (install libopenmpi-dev and rebuild)");
}

void abort_mpi_job() { std::exit(1); }

#endif

}  // namespace mlaserve
