// The HTTP front end (cpp-httplib): OpenAI's (chat completions, responses) and Anthropic's routes, API key, SSE
// streaming and errors in each protocol's shape. Each request runs on one of the server's threads and talks to the
// engine through its RequestHandle.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/openai_protocol.h"
#include "server/prometheus.h"
#include "server/responses_protocol.h"
#include "tokenizer/chat_template.h"

namespace httplib {
class Server;
}

namespace mlaserve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port
  std::string api_key;  // non-empty: /v1/* needs "Authorization: Bearer <key>"
  std::string served_model_name;
  int http_threads = 128;  // each streaming response holds one while it runs
  size_t max_body_bytes = 32u << 20;
  GenerationConfig generation;               // the checkpoint's sampling defaults
  std::vector<std::string> allowed_origins;  // CORS: browser origins answered ("*": any)
  std::string tool_parser = "auto";          // --tool-parser (chat_parsing)
  std::string reasoning_parser = "auto";     // --reasoning-parser
  bool webui = true;                         // the built-in web page at "/" and "/dashboard"
  ModelInfo model_info;                      // mlaserve_model_info's labels on /metrics
};

// 127.0.0.0/8, ::1 or localhost: the addresses on which the web page is on by default.
bool is_loopback_host(const std::string& host);

class HttpServer {
 public:
  // Chat requests are rendered with chat_template (the checkpoint's, ChatTemplate::load).
  HttpServer(Engine& engine, ChatTemplate chat_template, ServerOptions options);
  ~HttpServer();
  // Binds; returns the port (useful with port 0). Throws Error when it cannot bind.
  int bind();
  void serve();  // blocks until stop()
  void stop();

 private:
  void add_routes();
  void add_messages_routes();
  void add_responses_routes();
  void add_token_routes();
  void add_cors();
  void add_webui();
  Engine& engine_;
  ServerOptions options_;
  ChatTemplate chat_template_;
  GrammarCache grammars_;
  ResponseStore responses_;  // /v1/responses kept for previous_response_id and GET
  RequestContext requests_;  // what requests are parsed against
  std::unique_ptr<httplib::Server> server_;
  int listening_socket_ = -1;  // seen while binding, to raise its backlog
};

}  // namespace mlaserve
