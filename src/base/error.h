// Errors: every failure a user can cause (bad checkpoint, bad config, bad request) is an
// mlaserve::Error whose message names the problem. Nothing user-facing aborts.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace mlaserve {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace mlaserve

// Checks a condition that bad input can violate; throws mlaserve::Error with the message.
#define MLA_CHECK(cond, ...)                    \
  do {                                          \
    if (!(cond)) ::mlaserve::fail(__VA_ARGS__); \
  } while (0)
