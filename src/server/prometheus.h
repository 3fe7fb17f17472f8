// /metrics in the Prometheus text exposition format.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/metrics.h"

namespace mlaserve {

// model_info: what is served (parameters, weight format, ranks, kernels...), as the labels of
// an info gauge, mlaserve_model_info, whose value is always 1.
using ModelInfo = std::vector<std::pair<std::string, std::string>>;
std::string render_prometheus(EngineMetrics& metrics, const std::string& model_name, const ModelInfo& model_info = {});

}  // namespace mlaserve
