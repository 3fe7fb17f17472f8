#include "cli/version.h"
#include "mlaserve_version.h"  // generated at build time (cmake/version.cmake)

namespace mlaserve {

std::string version_text() {
  return std::string("mlaserve ") + MLASERVE_VERSION + " (git " + MLASERVE_GIT_REVISION + ")";
}

}  // namespace mlaserve
