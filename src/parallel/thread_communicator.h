// Ranks as threads of one process, communicating through shared memory.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace mlaserve {

// One communicator per rank, all in one group. A collective that some rank does not reach
// within `timeout` fails with an Error on every rank that is waiting.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int size, std::chrono::milliseconds timeout);

}  // namespace mlaserve
