#include "base/signals.h"

#include <signal.h>

#include <cstdlib>
#include <mutex>
#include <thread>

namespace mlaserve {
namespace {

std::mutex handler_mutex;
std::function<void(int)> current_handler = [](int signal) { std::_Exit(128 + signal); };

}  // namespace

void block_shutdown_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals] {
    for (;;) {
      int received = 0;
      if (sigwait(&signals, &received) != 0) continue;
      std::function<void(int)> handler;
      {
        std::lock_guard lock(handler_mutex);
        handler = current_handler;
      }
      handler(received);
    }
  }).detach();
}

void on_shutdown_signal(std::function<void(int)> handler) {
  std::lock_guard lock(handler_mutex);
  current_handler = std::move(handler);
}

}  // namespace mlaserve
