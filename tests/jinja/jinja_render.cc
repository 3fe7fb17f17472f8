// Renders chat templates for the reference comparison: reads a JSON array of cases
// {"template": source, "context": {...}} and writes a JSON array of {"output": text} or
// {"error": message}, one a case, in order.
// Usage: jinja_render CASES_JSON OUT_JSON
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "jinja/template.h"

int main(int argc, char** argv) {
  using namespace mlaserve::jinja;
  if (argc != 3) {
    std::cerr << "usage: jinja_render CASES_JSON OUT_JSON\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  const auto cases = nlohmann::ordered_json::parse(in);
  nlohmann::json results = nlohmann::json::array();
  for (const auto& item : cases) {
    try {
      const Template chat_template(item.at("template").get<std::string>());
      const Value context = from_json(item.at("context"));
      results.push_back({{"output", chat_template.render(context.attributes())}});
    } catch (const mlaserve::Error& error) {
      results.push_back({{"error", error.what()}});
    }
  }
  std::ofstream(argv[2]) << results.dump();
  return 0;
}
