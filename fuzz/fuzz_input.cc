#include "fuzz_input.h"

namespace mlaserve::fuzz {

std::string models_dir() { return MLASERVE_MODELS_DIR; }

}  // namespace mlaserve::fuzz
