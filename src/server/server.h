// The HTTP server behind `gem serve`: llama-server-compatible routes (/health, /v1/models,
// /props, /v1/chat/completions; each also without /v1), SSE streaming, one generating request
// at a time with a bounded FIFO queue, disconnect-driven cancellation, API key, body limits.
// The GET routes never touch the engine, so they answer while a request generates.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "runtime/engine.h"
#include "sampler/sampler.h"

namespace httplib {
class Server;
struct Request;
struct Response;
class DataSink;
}  // namespace httplib

namespace gem::server {

struct ServerOptions {
  std::string host = "127.0.0.1";   // loopback unless told otherwise
  int port = 8080;                  // 0: any free port (see Server::port())
  std::string api_key;              // empty: no authentication
  std::string model_name = "gemma-4";  // the id in /v1/models (--alias or the file's stem)
  std::string model_path;
  int n_ctx = 4096;                 // reported while the model loads
  size_t max_body_bytes = 16u << 20;
  int max_queue = 8;                // requests waiting behind the running one; more get 503
  int n_http_threads = 0;           // 0: max_queue + 9 (so GETs always find a thread)
  int timeout_s = 600;              // socket read/write timeout
  int heartbeat_s = 10;             // longest SSE silence before a ": keep-alive" comment
  std::string build_info = "gem";   // /props build_info; fingerprint "b" + this
  bool webui = true;                // serve the chat page (src/server/webui) at GET /
};

// FIFO admission: one request runs, at most `max_queue` wait; the rest are refused.
class EngineGate {
 public:
  explicit EngineGate(int max_queue) : max_queue_(max_queue) {}
  // 0 when the queue is full; otherwise a ticket to wait with.
  uint64_t enter();
  // Waits up to `seconds` for the ticket's turn; true when it now holds the engine.
  bool wait_turn(uint64_t ticket, double seconds);
  void abandon(uint64_t ticket);  // a waiting request that gave up
  void release();                 // the running request is done
  int n_waiting() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> queue_;
  bool running_ = false;
  uint64_t next_ = 0;
  int max_queue_;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Binds the listening socket (port 0 picks a free one). Routes answer as soon as run() starts;
  // until set_engine(), /health and chat answer 503 "Loading model".
  Status bind();
  int port() const { return port_; }
  // Installs the loaded engine; `chat_template` is shown in /props.
  void set_engine(std::unique_ptr<runtime::Engine> engine, std::string chat_template);
  // Serves until stop(). Returns false when the server could not run.
  bool run();
  void stop();
  bool ready() const { return ready_.load(); }
  runtime::Engine* engine() { return engine_.get(); }

  struct Job;

 private:
  void routes();
  void handle_chat(const httplib::Request& req, httplib::Response& res);
  // Runs one admitted request. With a sink it streams SSE; without, it fills `res`.
  // Returns false when the client went away.
  bool run_job(Job& job, httplib::DataSink* sink, httplib::Response* res);
  SamplingParams default_sampling() const;

  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  std::atomic<bool> ready_{false};
  // run()/stop() handshake: a stop() that comes before run() is listening must still end it.
  std::atomic<bool> stop_requested_{false}, run_entered_{false}, run_exited_{false};
  std::unique_ptr<runtime::Engine> engine_;
  std::string chat_template_;
  EngineGate gate_;
  std::atomic<uint64_t> n_requests_{0};
};

// Whether the peer of the connection on socket `fd` is still there (no FIN/RST seen). Never
// blocks; pipelined request bytes count as alive.
bool connection_alive(int fd);
// The server-side socket of the connection (local, remote) or -1.
int find_connection_fd(const std::string& local_addr, int local_port,
                       const std::string& remote_addr, int remote_port);

}  // namespace gem::server
