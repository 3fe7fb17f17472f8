// SIGINT/SIGTERM handling for a multi-threaded process: block_shutdown_signals() must run in
// main() before any thread starts, so every thread inherits the mask; one dispatcher thread
// then waits for the signals and runs the current handler (by default: exit 128 + signal).
#pragma once
#include <functional>

namespace mlaserve {

void block_shutdown_signals();
// Replaces the handler run when SIGINT or SIGTERM arrives (on the dispatcher thread).
void on_shutdown_signal(std::function<void(int signal)> handler);

}  // namespace mlaserve
