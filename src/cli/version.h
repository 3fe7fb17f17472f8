// The build's version and source tree, for `mlaserve --version`.
#pragma once
#include <string>

namespace mlaserve {

std::string version_text();  // "mlaserve VERSION (git REVISION)"

}  // namespace mlaserve
