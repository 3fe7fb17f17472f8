// config.json: any JSON gives a ModelConfig or an Error naming the key, never another exception.
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "fuzz_input.h"
#include "io/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto config = nlohmann::json::parse(data, data + size, nullptr, false);
  if (config.is_discarded()) return 0;
  try {
    mlaserve::parse_model_config(config);
  } catch (const mlaserve::Error&) {
  }
  return 0;
}
