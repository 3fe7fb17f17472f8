// /metrics in the Prometheus text exposition format.
#pragma once
#include <string>

#include "engine/metrics.h"

namespace mlaserve {

std::string render_prometheus(EngineMetrics& metrics, const std::string& model_name);

}  // namespace mlaserve
