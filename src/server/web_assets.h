// The built-in web page's files (src/server/webui), compiled into the binary by
// cmake/embed_files.cmake: served at "/" (index.html), "/dashboard" (the same page) and their
// own paths.
#pragma once
#include <string_view>
#include <vector>

namespace mlaserve {

struct WebAsset {
  std::string_view path;          // "/index.html", "/app.js", ...
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view bytes;
};

extern const std::vector<WebAsset> kWebAssets;

}  // namespace mlaserve
