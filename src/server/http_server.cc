#include "server/http_server.h"

#include <malloc.h>
#include <sys/socket.h>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "server/anthropic_protocol.h"
#include "server/lifo_task_queue.h"
#include "server/openai_protocol.h"
#include "server/prometheus.h"
#include "server/responses_protocol.h"
#include "server/web_assets.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;
constexpr auto kPollInterval = std::chrono::milliseconds(100);

// A full queue (429) or a server shutting down (503) asks the client to come back (Retry-After,
// in seconds, as RFC 9110 has it).
void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "") {
  res.status = status;
  if (status == 429 || status == 503) res.set_header("Retry-After", "1");
  res.set_content(error_body(status, message, param).dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

// A request's n choices, each an engine request of its own: the first submitted at once, the
// others once the first has its first token, so that its prompt is in the prefix cache and they
// share it. Seeded requests seed choice i with seed + i.
class Choices {
 public:
  Choices(Engine& engine, std::shared_ptr<ParsedRequest> request, const std::string& model)
      : engine_(engine), request_(std::move(request)) {
    handles_.push_back(engine_.submit(request_->engine));
    builders_.push_back(std::make_unique<ResponseBuilder>(*request_, engine_.tokenizer(), model));
    for (int64_t i = 1; i < request_->n; ++i)
      builders_.push_back(
          std::make_unique<ResponseBuilder>(*request_, engine_.tokenizer(), model, i, builders_[0]->id()));
    finished_.assign(size_t(request_->n), false);
  }

  struct Event {
    size_t choice;
    StreamEvent event;
  };
  // The events of every choice so far, waiting up to `timeout` for some. Throws EngineRejection
  // when the other choices cannot be submitted.
  std::vector<Event> wait(std::chrono::milliseconds timeout) {
    std::vector<Event> out;
    const auto slice = std::max(std::chrono::milliseconds(1), timeout / int64_t(handles_.size()));
    for (size_t i = 0; i < handles_.size(); ++i) {
      if (finished_[i]) continue;
      for (StreamEvent& event : handles_[i]->wait(slice)) {
        finished_[i] = finished_[i] || event.finished;
        out.push_back({i, std::move(event)});
      }
    }
    if (!out.empty() && handles_.size() < builders_.size()) submit_the_others();
    return out;
  }
  bool finished() const {
    return std::all_of(finished_.begin(), finished_.end(), [](bool done) { return done; });
  }
  void cancel() {
    for (auto& handle : handles_) handle->cancel();
  }
  ResponseBuilder& builder(size_t choice) { return *builders_[choice]; }
  std::vector<const ResponseBuilder*> builders() const {
    std::vector<const ResponseBuilder*> out;
    for (const auto& builder : builders_) out.push_back(builder.get());
    return out;
  }
  bool include_usage() const { return request_->include_usage; }

 private:
  void submit_the_others() {
    for (int64_t i = int64_t(handles_.size()); i < request_->n; ++i) {
      EngineRequest choice = request_->engine;
      if (choice.sampling.seed) choice.sampling.seed = *choice.sampling.seed + uint64_t(i);
      handles_.push_back(engine_.submit(std::move(choice)));
    }
  }
  Engine& engine_;
  std::shared_ptr<ParsedRequest> request_;
  std::vector<std::shared_ptr<RequestHandle>> handles_;
  std::vector<std::unique_ptr<ResponseBuilder>> builders_;
  std::vector<bool> finished_;
};

// Streams a request's events as server-sent events; a client that goes away cancels it.
void stream_response(httplib::Response& res, std::shared_ptr<Choices> choices) {
  auto finished = std::make_shared<bool>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [choices, finished](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& payload) {
          const std::string line = "data: " + payload + "\n\n";
          return sink.is_writable() && sink.write(line.data(), line.size());
        };
        try {
          bool failed = false;
          for (auto& [choice, event] : choices->wait(kPollInterval)) {
            failed = failed || event.finish_reason == "error";
            if (event.finish_reason == "error") {
              write(error_body(500, event.error).dump());
              continue;
            }
            if (event.finish_reason == "abort") {  // the drain's deadline (a client's cancel has gone)
              failed = true;
              write(error_body(503, "the request was cancelled (server shutting down)").dump());
              continue;
            }
            for (const auto& chunk : choices->builder(choice).stream_chunks(event))
              if (!write(chunk)) return choices->cancel(), false;
          }
          if (!choices->finished()) return sink.is_writable() ? true : (choices->cancel(), false);
          if (choices->include_usage() && !failed) write(ResponseBuilder::usage_chunk(choices->builders()));
        } catch (const EngineRejection& e) {
          choices->cancel();
          write(error_body(e.status, e.what()).dump());
        }
        *finished = true;
        write("[DONE]");
        sink.done();
        return true;
      },
      [choices, finished](bool) {
        if (!*finished) choices->cancel();  // connection closed before the end
      });
}

void complete_response(httplib::Response& res, Choices& choices) {
  try {
    while (!choices.finished()) {
      for (auto& [choice, event] : choices.wait(kPollInterval)) {
        if (event.finish_reason == "error")
          return choices.cancel(), send_error(res, 500, "internal error: " + event.error);
        if (event.finish_reason == "abort")
          return choices.cancel(), send_error(res, 503, "the request was cancelled (server shutting down)");
        choices.builder(choice).add(event);
      }
    }
  } catch (const EngineRejection& e) {
    choices.cancel();
    return send_error(res, e.status, e.what());
  }
  res.set_content(
      ResponseBuilder::final_response(choices.builders()).dump(-1, ' ', false, json::error_handler_t::replace),
      "application/json");
}

// A completions or chat request's body parsed, submitted to the engine and answered (streamed or
// whole); every failure answered in OpenAI's error shape.
void answer_generate(Engine& engine, const RequestContext& context, const ServerOptions& options, Endpoint endpoint,
                     const std::string& body, httplib::Response& res) {
  try {
    auto request = std::make_shared<ParsedRequest>(parse_request(endpoint, body, context));
    auto choices = std::make_shared<Choices>(engine, request, options.served_model_name);
    if (request->stream)
      stream_response(res, choices);
    else
      complete_response(res, *choices);
  } catch (const ApiError& e) {
    send_error(res, e.status, e.what(), e.param);
  } catch (const EngineRejection& e) {
    send_error(res, e.status, e.what());
  } catch (const std::exception& e) {
    spdlog::error("request failed: {}", e.what());
    send_error(res, 500, std::string("internal error: ") + e.what());
  }
}

// A protocol's error shape: OpenAI's (error_body, the parameter named) or Anthropic's.
using ErrorBody = std::function<json(int status, const std::string& message, const std::string& param)>;

json openai_error_body(int status, const std::string& message, const std::string& param) {
  return error_body(status, message, param);
}

json anthropic_error(int status, const std::string& message, const std::string&) {
  return anthropic_error_body(status, message);
}

void send_error(httplib::Response& res, int status, const std::string& message, const ErrorBody& body,
                const std::string& param = "") {
  res.status = status;
  if (status == 429 || status == 503) res.set_header("Retry-After", "1");
  res.set_content(body(status, message, param).dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

// Streams one request's answer as the protocol's server-sent events; a client that goes away
// cancels it.
void stream_answer(httplib::Response& res, std::shared_ptr<RequestHandle> handle, std::shared_ptr<ChatAnswer> answer) {
  auto finished = std::make_shared<bool>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [handle, answer, finished, started = false](size_t, httplib::DataSink& sink) mutable {
        auto write = [&](const std::vector<std::string>& frames) {
          for (const std::string& frame : frames)
            if (!sink.is_writable() || !sink.write(frame.data(), frame.size())) return false;
          return true;
        };
        if (!started && !write(answer->stream_start())) return handle->cancel(), false;
        started = true;
        for (const StreamEvent& event : handle->wait(kPollInterval)) {
          const bool failed = event.finish_reason == "error" || event.finish_reason == "abort";
          if (failed) {
            write({answer->stream_error(event.finish_reason == "error" ? 500 : 503,
                                        event.finish_reason == "error"
                                            ? "internal error: " + event.error
                                            : "the request was cancelled (server shutting down)")});
          } else if (!write(answer->stream_event(event))) {
            return handle->cancel(), false;
          }
          if (event.finished) {
            *finished = true;
            sink.done();
            return true;
          }
        }
        return sink.is_writable() ? true : (handle->cancel(), false);
      },
      [handle, finished](bool) {
        if (!*finished) handle->cancel();
      });
}

// A request of a protocol that answers one choice (Anthropic's messages), submitted to the
// engine and answered streamed or whole, every failure in the protocol's error shape.
void answer_one(Engine& engine, const std::function<ParsedRequest()>& parse,
                const std::function<std::shared_ptr<ChatAnswer>(const ParsedRequest&)>& make_answer,
                const ErrorBody& error_body, httplib::Response& res) {
  try {
    auto request = std::make_shared<ParsedRequest>(parse());
    std::shared_ptr<ChatAnswer> made = make_answer(*request);
    // The answer reads the request: both live as long as the stream.
    std::shared_ptr<ChatAnswer> answer(made.get(), [request, made](ChatAnswer*) {});
    auto handle = engine.submit(request->engine);
    if (request->stream) return stream_answer(res, handle, answer);
    for (bool done = false; !done;) {
      for (const StreamEvent& event : handle->wait(kPollInterval)) {
        if (event.finish_reason == "error")
          return handle->cancel(), send_error(res, 500, "internal error: " + event.error, error_body);
        if (event.finish_reason == "abort")
          return handle->cancel(), send_error(res, 503, "the request was cancelled (server shutting down)", error_body);
        answer->add(event);
        done = event.finished;
      }
    }
    res.set_content(answer->response().dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  } catch (const ApiError& e) {
    send_error(res, e.status, e.what(), error_body, e.param);
  } catch (const EngineRejection& e) {
    send_error(res, e.status, e.what(), error_body);
  } catch (const std::exception& e) {
    spdlog::error("request failed: {}", e.what());
    send_error(res, 500, std::string("internal error: ") + e.what(), error_body);
  }
}

// A POST handler that reads the whole body, then hands it on; `error_body` shapes its errors. The
// body is read through a content reader: httplib's own buffering refuses bodies of type
// application/x-www-form-urlencoded (what `curl -d` sends) past 8 KB, a limit compiled into
// Debian's library; read here, only max_body_bytes applies, and any type is parsed as JSON.
httplib::Server::HandlerWithContentReader with_body(std::function<void(const std::string&, httplib::Response&)> handle,
                                                    const ErrorBody& error_body = openai_error_body) {
  return [handle = std::move(handle), error_body](const httplib::Request&, httplib::Response& res,
                                                  const httplib::ContentReader& read) {
    std::string body;
    const bool complete = read([&body](const char* data, size_t size) {
      body.append(data, size);
      return true;
    });
    if (!complete)
      return res.status == 413 ? send_error(res, 413, "the request body is too large", error_body)
                               : send_error(res, 400, "the request body could not be read", error_body);
    handle(body, res);
  };
}

// httplib's own errors (no route, a body past the limit, a handler's exception) in OpenAI's shape.
void add_error_handlers(httplib::Server& server) {
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) return send_error(res, 404, "no route for " + req.method + " " + req.path);
    if (res.status == 413) return send_error(res, 413, "the request body is too large");
    send_error(res, res.status, "HTTP error " + std::to_string(res.status));
  });
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
    std::string message = "unknown";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    send_error(res, 500, "internal error: " + message);
  });
}

}  // namespace

HttpServer::HttpServer(Engine& engine, ChatTemplate chat_template, ServerOptions options)
    : engine_(engine),
      options_(std::move(options)),
      chat_template_(std::move(chat_template)),
      requests_{engine.tokenizer(),
                chat_template_,
                options_.served_model_name,
                engine.max_model_len(),
                engine.vocab_size(),
                options_.generation,
                chat_parsing(options_.tool_parser, options_.reasoning_parser, chat_template_.source(),
                             chat_template_.is_built_in() && chat_template_.format() == ChatFormat::KimiK3),
                &grammars_},
      server_(std::make_unique<httplib::Server>()) {
  spdlog::info("chat output: tool calls {}, reasoning {}",
               requests_.parsing.tools ? tool_call_format_name(*requests_.parsing.tools) : "not parsed",
               !requests_.parsing.reasoning ? "not parsed"
               : requests_.parsing.kimi_k3  ? "K3's think channel"
                                            : "<think> blocks");
  const int threads = options_.http_threads;
  server_->new_task_queue = [threads] { return new LifoTaskQueue(size_t(threads)); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_keep_alive_timeout(5);
  server_->set_read_timeout(30);
  add_routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::add_routes() {
  // The API key as OpenAI's clients send it (Authorization: Bearer) or Anthropic's (x-api-key).
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.method == "OPTIONS" || !req.path.starts_with("/v1/"))
      return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + options_.api_key ||
        req.get_header_value("x-api-key") == options_.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string message = "missing or invalid API key (Authorization: Bearer ..., or x-api-key)";
    if (req.path.starts_with("/v1/messages"))
      send_error(res, 401, message, anthropic_error);
    else
      send_error(res, 401, message);
    return httplib::Server::HandlerResponse::Handled;
  });
  server_->Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("", "text/plain"); });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_prometheus(engine_.metrics(), options_.served_model_name, options_.model_info),
                    "text/plain; version=0.0.4");
  });
  server_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", options_.served_model_name},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "mlaserve"},
                        {"max_model_len", engine_.max_model_len()}};
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(), "application/json");
  });
  server_->Post("/v1/completions", with_body([this](const std::string& body, httplib::Response& res) {
                  answer_generate(engine_, requests_, options_, Endpoint::Completions, body, res);
                }));
  server_->Post("/v1/chat/completions", with_body([this](const std::string& body, httplib::Response& res) {
                  answer_generate(engine_, requests_, options_, Endpoint::ChatCompletions, body, res);
                }));
  add_messages_routes();
  add_responses_routes();
  add_token_routes();
  add_webui();
  add_cors();
  add_error_handlers(*server_);
}

// Anthropic's Messages API: /v1/messages (whole or streamed) and /v1/messages/count_tokens.
void HttpServer::add_messages_routes() {
  server_->Post("/v1/messages", with_body(
                                    [this](const std::string& body, httplib::Response& res) {
                                      answer_one(
                                          engine_, [&] { return parse_messages_request(body, requests_); },
                                          [this](const ParsedRequest& request) {
                                            return std::make_shared<MessageAnswer>(request, options_.served_model_name);
                                          },
                                          anthropic_error, res);
                                    },
                                    anthropic_error));
  server_->Post(
      "/v1/messages/count_tokens",
      with_body(
          [this](const std::string& body, httplib::Response& res) {
            try {
              res.set_content(json{{"input_tokens", count_message_tokens(body, requests_)}}.dump(), "application/json");
            } catch (const ApiError& e) {
              send_error(res, e.status, e.what(), anthropic_error);
            }
          },
          anthropic_error));
}

// OpenAI's Responses API: POST /v1/responses (whole or streamed), and GET and DELETE of a stored
// response by id.
void HttpServer::add_responses_routes() {
  server_->Post("/v1/responses", with_body([this](const std::string& body, httplib::Response& res) {
                  auto responses = std::make_shared<ResponsesRequest>();
                  answer_one(
                      engine_,
                      [&] {
                        try {
                          *responses = responses_to_chat(request_body(body), responses_);
                        } catch (const nlohmann::ordered_json::exception& e) {
                          throw ApiError(400, fmt::format("malformed request: {}", e.what()));
                        }
                        return parse_chat_request(responses->chat, requests_);
                      },
                      [&](const ParsedRequest& request) {
                        return std::make_shared<ResponseAnswer>(request, std::move(*responses),
                                                                options_.served_model_name, responses_);
                      },
                      openai_error_body, res);
                }));
  server_->Get(R"(/v1/responses/([A-Za-z0-9_\-]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const auto response = responses_.response(req.matches[1]);
    if (!response)
      return send_error(res, 404, fmt::format("Response with id '{}' not found.", req.matches[1].str()), "response_id");
    res.set_content(response->dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  });
  server_->Delete(R"(/v1/responses/([A-Za-z0-9_\-]+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (!responses_.erase(req.matches[1]))
      return send_error(res, 404, fmt::format("Response with id '{}' not found.", req.matches[1].str()), "response_id");
    res.set_content(json{{"id", req.matches[1].str()}, {"object", "response"}, {"deleted", true}}.dump(),
                    "application/json");
  });
}

// vLLM's /tokenize (a prompt, or chat messages through the chat template) and /detokenize.
void HttpServer::add_token_routes() {
  server_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      const std::vector<int32_t> ids = tokenize_request(req.body, requests_);
      const json body = {{"count", ids.size()}, {"max_model_len", engine_.max_model_len()}, {"tokens", ids}};
      res.set_content(body.dump(), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e.status, e.what(), e.param);
    }
  });
  server_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      const json body = {{"prompt", detokenize_request(req.body, requests_)}};
      res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e.status, e.what(), e.param);
    }
  });
}

// CORS for browser clients: a request from an allowed origin is answered with that origin, and
// preflight OPTIONS requests (which carry no API key) with the methods and headers allowed.
void HttpServer::add_cors() {
  if (options_.allowed_origins.empty()) return;
  auto allowed = [this](const std::string& origin) {
    const auto& origins = options_.allowed_origins;
    return !origin.empty() && (std::count(origins.begin(), origins.end(), "*") > 0 ||
                               std::count(origins.begin(), origins.end(), origin) > 0);
  };
  server_->set_post_routing_handler([allowed](const httplib::Request& req, httplib::Response& res) {
    const std::string origin = req.get_header_value("Origin");
    if (!allowed(origin)) return;
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  });
  server_->Options(".*", [allowed](const httplib::Request& req, httplib::Response& res) {
    const std::string origin = req.get_header_value("Origin");
    if (!allowed(origin)) return send_error(res, 403, "origin '" + origin + "' is not allowed (--allowed-origins)");
    res.status = 204;
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string headers = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Headers", headers.empty() ? "Authorization, Content-Type" : headers);
    res.set_header("Access-Control-Max-Age", "600");
  });
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

// The built-in web page (server/webui): "/" and "/dashboard" answer its one HTML page, which
// loads its scripts and styles by their own names. Its Content-Security-Policy lets the page run
// only these files and talk only to this server: no text a model writes can run as script.
void HttpServer::add_webui() {
  if (!options_.webui) return;
  auto answer = [](const WebAsset& asset) {
    return [&asset](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                     "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(asset.bytes.data(), asset.bytes.size(), std::string(asset.content_type));
    };
  };
  for (const WebAsset& asset : kWebAssets) {
    std::string pattern;  // httplib's routes are regular expressions
    for (char c : asset.path) pattern += c == '.' ? std::string("\\.") : std::string(1, c);
    server_->Get(pattern, answer(asset));
    if (asset.path != "/index.html") continue;
    server_->Get("/", answer(asset));
    server_->Get("/dashboard", answer(asset));
  }
}

int HttpServer::bind() {
  // cpp-httplib (compiled into Debian's library) listens with a backlog of 5: when the machine is
  // busy and its accept thread is late, the sixth simultaneous client is reset. Remember the
  // listening socket and raise its backlog after bind (listen() again only changes the backlog).
  server_->set_socket_options([this](int sock) {
    httplib::default_socket_options(sock);
    listening_socket_ = sock;
  });
  const int port = options_.port == 0 ? server_->bind_to_any_port(options_.host)
                                      : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  MLA_CHECK(port > 0, "cannot listen on {}:{} (address in use or not local?)", options_.host, options_.port);
  server_->set_socket_options(httplib::default_socket_options);
  if (listening_socket_ >= 0) ::listen(listening_socket_, SOMAXCONN);
  return port;
}

// While serving, every kTrimInterval the allocator's free memory goes back to the system
// (glibc's malloc_trim, which also releases whole free pages inside its arenas): the HTTP
// threads' allocations of different lifetimes leave free pages in the arenas that would
// otherwise stay resident, and the process's memory would creep up over hours.
void HttpServer::serve() {
  constexpr auto kTrimInterval = std::chrono::seconds(10);
  std::mutex mutex;
  std::condition_variable stopped;
  bool done = false;
  std::thread trimmer([&] {
    std::unique_lock lock(mutex);
    while (!stopped.wait_for(lock, kTrimInterval, [&] { return done; })) malloc_trim(0);
  });
  server_->listen_after_bind();
  {
    std::lock_guard lock(mutex);
    done = true;
  }
  stopped.notify_one();
  trimmer.join();
}

void HttpServer::stop() { server_->stop(); }

}  // namespace mlaserve
