// Collectives between the ranks that hold one model's shards. Implementations: ranks as
// threads of one process (thread_communicator.h); MPI processes are the next step.
// Every collective either completes on all ranks or throws Error on all of them: a rank that
// fails aborts the group, and a rank that never arrives makes the others time out.
#pragma once
#include <chrono>
#include <cstdint>

#include "base/error.h"

namespace mlaserve {

// A collective another rank never joined: the group cannot run another step.
class CollectiveTimeout : public Error {
 public:
  using Error::Error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[i] = sum over ranks of data[i], summed in rank order (identical on every rank).
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  // gathered[r * count + i] = rank r's local[i].
  virtual void all_gather(const float* local, int64_t count, float* gathered) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Wakes every rank waiting in a collective with an error (call when this rank fails).
  virtual void abort() = 0;
  // Seconds this rank has spent inside collectives (waiting for the others included).
  virtual double collective_seconds() const = 0;
};

// Adds the duration of its scope to `total` (for collective_seconds()).
class CollectiveTimer {
 public:
  explicit CollectiveTimer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~CollectiveTimer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  CollectiveTimer(const CollectiveTimer&) = delete;
  CollectiveTimer& operator=(const CollectiveTimer&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mlaserve
