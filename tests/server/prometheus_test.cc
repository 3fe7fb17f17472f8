#include "server/prometheus.h"

#include <gtest/gtest.h>

#include "server/http_server.h"

namespace mlaserve {
namespace {

// The exposition format escapes a label value's backslashes, quotes and newlines.
TEST(Prometheus, ModelInfoLabelsAreEscaped) {
  EngineMetrics metrics;
  const std::string text = render_prometheus(metrics, "a\"b", {{"kernels", "x\\y\nz"}, {"ranks", "1 rank"}});
  EXPECT_NE(text.find("mlaserve_model_info{model_name=\"a\\\"b\",kernels=\"x\\\\y\\nz\",ranks=\"1 rank\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE mlaserve_model_info gauge"), std::string::npos);
}

TEST(HttpServer, LoopbackHosts) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "localhost"}) EXPECT_TRUE(is_loopback_host(host)) << host;
  for (const char* host : {"0.0.0.0", "::", "10.0.0.1", "192.168.1.127", ""})
    EXPECT_FALSE(is_loopback_host(host)) << host;
}

}  // namespace
}  // namespace mlaserve
