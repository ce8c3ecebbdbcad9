// An in-process gem server for tests: the tiny fixture's tokenizer and chat format, the real
// engine, parser and SSE code, and a ScriptedBackend whose outputs a JSON script chooses.
#pragma once

#include <httplib.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/scripted_backend.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace gem::test {

// The default script: a greeting with reasoning, a tool call, a tool answer, counting text.
inline nlohmann::json default_script() {
  return {{"entries",
           {{{"match", "Say hello"},
             {"output", "<|channel>thought\nThe user greets me.<channel|>Hello there, friend!<turn|>"}},
            {{"match", "weather"},
             {"output",
              "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:2}<tool_call|><|tool_response>"}},
            {{"match", "18C cloudy"}, {"output", "It is 18C and cloudy in Paris.<turn|>"}},
            {{"match", "Count"}, {"output", "one two three four five six seven eight nine ten<turn|>"}}}}};
}

inline nlohmann::json weather_tool() {
  return {{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "Get the current weather for a city."},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"city", {{"type", "string"}, {"description", "City name"}}},
                              {"days", {{"type", "integer"}}}}},
              {"required", {"city"}}}}}}};
}

class TestServer {
 public:
  explicit TestServer(server::ServerOptions o = {}, nlohmann::json script = default_script(),
                      int n_ctx = 1024, int n_tile = 16, bool load = true) {
    static std::atomic<int> counter{0};
    script_path_ = temp_dir() + "/script-" + std::to_string(counter++) + ".json";
    std::ofstream(script_path_) << script.dump();
    o.port = 0;
    o.host = "127.0.0.1";
    if (o.model_name == "gemma-4") o.model_name = "gem-test";
    o.model_path = fixture("tiny-q4_0.gguf");
    server_ = std::make_unique<server::Server>(o);
    Status st = server_->bind();
    if (!st.ok()) throw std::runtime_error("TestServer: bind: " + st.message());
    port_ = server_->port();
    thread_ = std::thread([this] { server_->run(); });
    if (load) this->load(n_ctx, n_tile);
    if (::testing::Test::HasFatalFailure()) {
      // A failed ASSERT in load() returns from load() only: stop here, so that the test ends
      // (gtest reports the exception) instead of running against a server without a model.
      server_->stop();
      thread_.join();
      throw std::runtime_error("TestServer: the model or its backend did not load (see the failure above)");
    }
    wait_listening();
  }
  ~TestServer() {
    server_->stop();
    thread_.join();
  }

  void load(int n_ctx, int n_tile) {
    auto m = model::load_model(fixture("tiny-q4_0.gguf"));
    ASSERT_TRUE(m.ok()) << m.message();
    auto tok = Tokenizer::from_gguf(*(*m)->file);
    ASSERT_TRUE(tok.ok()) << tok.message();
    BackendOptions bo;
    bo.n_ctx = n_ctx;
    bo.n_tile = n_tile;
    auto b = runtime::make_scripted_backend(script_path_, **tok, bo);
    ASSERT_TRUE(b.ok()) << b.message();
    backend_ = b->get();
    server_->set_engine(std::make_unique<runtime::Engine>(std::move(*m), std::move(*b),
                                                          std::move(*tok)),
                        "{{ template }}");
  }

  void wait_listening() {
    for (int i = 0; i < 200; ++i) {
      httplib::Client c("127.0.0.1", port_);
      if (c.Get("/v1/models")) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "server did not start";
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  int port() const { return port_; }
  server::Server& server() { return *server_; }
  runtime::ScriptedBackend& backend() { return *backend_; }

 private:
  std::string script_path_;
  std::unique_ptr<server::Server> server_;
  std::thread thread_;
  int port_ = 0;
  runtime::ScriptedBackend* backend_ = nullptr;
};

// One parsed SSE body: the data events (JSON or "[DONE]") and the comment lines.
struct Sse {
  std::vector<nlohmann::json> chunks;
  bool done = false;
  bool data_after_done = false;
  std::vector<std::string> comments;
  std::string reasoning, content;
};

inline Sse parse_sse(const std::string& body) {
  Sse s;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find('\n', pos);
    if (end == std::string::npos) end = body.size();
    std::string line = body.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    if (line[0] == ':') {
      s.comments.push_back(line);
      continue;
    }
    if (line.rfind("data: ", 0) != 0) {
      ADD_FAILURE() << "unexpected SSE line: " << line;
      continue;
    }
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      s.done = true;
      continue;
    }
    if (s.done) s.data_after_done = true;
    auto j = nlohmann::json::parse(data, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << data;
    s.chunks.push_back(j);
    if (j.contains("choices") && !j["choices"].empty()) {
      const auto& d = j["choices"][0]["delta"];
      if (d.contains("reasoning_content") && d["reasoning_content"].is_string()) {
        s.reasoning += d["reasoning_content"].get<std::string>();
      }
      if (d.contains("content") && d["content"].is_string()) {
        s.content += d["content"].get<std::string>();
      }
    }
  }
  return s;
}

inline nlohmann::json user_msgs(const std::string& text) {
  return nlohmann::json::array({{{"role", "user"}, {"content", text}}});
}

}  // namespace gem::test
