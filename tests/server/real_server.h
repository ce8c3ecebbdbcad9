// A real `gem serve` server in-process for tests: the tiny fixture model on the CPU backend
// behind server::Server on a free loopback port, its run loop on a thread.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "common/test_util.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace gem::test {

struct RealServer {
  std::unique_ptr<server::Server> server;
  std::thread thread;
  int port = 0;
  ~RealServer() {
    if (server) server->stop();
    if (thread.joinable()) thread.join();
  }
};

// `wrap` may wrap the CPU backend (a counting one); `setup` runs with the engine before it is
// installed (a drafter's set_drafter); n_slots: the backend's sequence slots (-np); `options`
// may change the server's options. Failures are fatal to the calling test.
inline void start_real_server(
    RealServer& s,
    const std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>& wrap = {},
    const std::function<void(server::Server&, runtime::Engine&)>& setup = {}, int n_slots = 1,
    const std::function<void(server::ServerOptions&)>& options = {}) {
  const std::string path = fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  auto m = model::load_model(path);
  ASSERT_TRUE(m.ok()) << m.message();
  auto tok = Tokenizer::from_gguf(*(*m)->file);
  ASSERT_TRUE(tok.ok()) << tok.message();
  BackendOptions bo;
  bo.n_ctx = 512;
  bo.n_threads = 2;
  bo.n_slots = n_slots;
  auto cpu = cpu::make_cpu_backend(**m, bo);
  ASSERT_TRUE(cpu.ok()) << cpu.message();
  std::unique_ptr<Backend> backend = std::move(cpu).value();
  if (wrap) backend = wrap(std::move(backend));
  server::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.model_name = "gem-test";
  o.model_path = path;
  o.n_parallel = n_slots;
  if (options) options(o);
  s.server = std::make_unique<server::Server>(o);
  ASSERT_TRUE(s.server->bind().ok());
  s.port = s.server->port();
  s.thread = std::thread([&s] { s.server->run(); });
  auto engine = std::make_unique<runtime::Engine>(std::move(*m), std::move(backend), std::move(*tok));
  if (setup) setup(*s.server, *engine);
  s.server->set_engine(std::move(engine), "{{ template }}");
}

}  // namespace gem::test
