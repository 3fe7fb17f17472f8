// Built-in config.json presets for make-model. mini and small are the shapes the performance
// comparisons use (issue: foundation): keep them exactly so.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace mlaserve {

nlohmann::json model_preset(const std::string& name);  // tiny | mini | small | kimi-linear-tiny | kimi-k3-tiny

}  // namespace mlaserve
