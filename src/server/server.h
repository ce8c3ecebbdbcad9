// The HTTP server behind `gem serve`: llama-server-compatible routes (/health, /v1/models,
// /props, /v1/chat/completions, /v1/completions; each also without /v1; /tokenize,
// /detokenize, /apply-template, /metrics, /slots), SSE streaming, up to -np generating requests
// at once (runtime/scheduler.h; one at a time at -np 1) with a bounded FIFO queue,
// disconnect-driven cancellation, API key, body limits. The GET
// routes never touch the engine, so they answer while a request generates; /v1/models and /props
// answer while the model loads too (/props with "is_loading": true).
//
// Transport (server/http.h): an epoll front reads whole requests under header and body
// deadlines and hands only complete ones to workers. Browser safety: a request carrying an
// Origin header is refused (403) unless the origin is the server's own or listed in
// cors_origins; on a loopback address a Host header that is not a loopback name is refused
// (DNS rebinding). Every 4xx/5xx is logged with the client's address.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <vector>

#include "base/status.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"
#include "sampler/sampler.h"
#include "server/api.h"
#include "server/json_limits.h"

namespace gem::server::http {
class Server;
struct Request;
class Response;
}  // namespace gem::server::http

namespace gem::server {

// Server-wide sampling defaults (--temp, --top-k, ...): each one given replaces the model's
// recommended value for requests that leave the field out.
struct SamplingOverrides {
  std::optional<float> temperature, top_p, min_p, repeat_penalty, presence_penalty,
      frequency_penalty;
  std::optional<int> top_k, repeat_last_n;
  std::optional<uint64_t> seed;
};

// What is known of the model before it can generate (its GGUF header), so /props and
// /v1/models can answer while the weights load.
struct ModelInfo {
  int n_ctx = 0;                 // the context the server will run with
  std::string chat_template;     // tokenizer.chat_template
  // general.sampling.*: the model's recommended sampling, when the file carries it.
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  int n_vocab = 0;
};

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
  int timeout_s = 600;              // longest wait for a client to take response bytes
  double header_timeout_s = 10;     // request line and headers must arrive within this
  double body_timeout_s = 60;       // the body must arrive within this after the headers
  double keep_alive_s = 5;          // idle limit between requests on one connection
  int max_connections = 1024;       // open connections; the oldest idle one makes room
  int max_json_depth = kDefaultMaxJsonDepth;  // nesting of arrays/objects in any JSON accepted
  // Origins (scheme://host[:port]) allowed to call from a browser besides the server's own;
  // "*" allows any.
  std::vector<std::string> cors_origins;
  int heartbeat_s = 10;             // longest SSE silence before a ": keep-alive" comment
  std::string build_info = "gem";   // /props build_info; fingerprint "b" + this
  bool webui = true;                // serve the chat page (src/server/webui) at GET /
  std::vector<std::string> aliases; // more names for the model in /v1/models (--alias a,b)
  // Request defaults (llama-server's flags of the same meaning).
  SamplingOverrides sampling;       // --temp, --top-k, --top-p, --min-p, --seed, penalties
  int n_predict = -1;               // -n: max_tokens of a request that sets none (-1: no limit)
  bool enable_thinking = true;      // --chat-template-kwargs '{"enable_thinking":false}'
  ReasoningFormat reasoning_format = ReasoningFormat::kAuto;  // --reasoning-format
  int reasoning_budget = -1;        // --reasoning-budget: -1 unlimited, 0 thinking off, N tokens
  bool metrics = false;             // GET /metrics (Prometheus text), --metrics
  bool slots = true;                // GET /slots, --no-slots turns it off (501)
  // --parallel: the most requests running at once (the backend's sequence slots, set by the
  // engine: Server::set_engine); here it only sizes the HTTP worker pool.
  int n_parallel = 1;
};

// FIFO admission: up to `n_running` requests run (one per sequence slot), at most `max_queue`
// wait; the rest are refused.
class EngineGate {
 public:
  explicit EngineGate(int max_queue, int n_running = 1)
      : max_queue_(max_queue), capacity_(n_running) {}
  void set_capacity(int n_running);
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
  int running_ = 0;
  uint64_t next_ = 0;
  int max_queue_;
  int capacity_;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Binds the listening socket (port 0 picks a free one). Routes answer as soon as run() starts;
  // until set_engine(), /health and chat answer 503 "Loading model".
  Status bind();
  int port() const { return port_; }
  // While loading: what the GGUF header said (n_ctx, chat template, recommended sampling);
  // /props and /v1/models answer from it.
  void set_model_info(ModelInfo info);
  // Installs the loaded engine; `chat_template` is shown in /props. A backend of several sequence
  // slots (-np S > 1) serves S requests at once through a runtime::Scheduler over it; one slot
  // runs requests one at a time through the engine itself.
  void set_engine(std::unique_ptr<runtime::Engine> engine, std::string chat_template);
  // Speculative decoding (--mtp): requests without a constraint draft with `drafter` (over the
  // engine's backend), up to draft_max tokens a round (a draft under draft_min is dropped).
  // Call before set_engine.
  void set_drafter(std::unique_ptr<runtime::DraftSource> drafter, int draft_max, int draft_min = 0);
  // Serves until stop(). Returns false when the server could not run.
  bool run();
  // Stops at once: running requests are cut as by a shutdown whose grace period ran out.
  void stop();
  // Graceful stop: no new connections; running and queued requests get up to `grace_s` to
  // finish; then each is cut (a stream gets an error event and [DONE], a plain request a 503).
  // Returns the number of requests that were cut (0: a clean drain). run() returns afterwards.
  int shutdown(double grace_s);
  int n_active() const;       // requests being answered
  int n_connections() const;  // open client connections
  bool ready() const { return ready_.load(); }
  runtime::Engine* engine() { return engine_.get(); }
  runtime::Scheduler* scheduler() { return scheduler_.get(); }
  int n_slots() const;
  int n_busy_slots() const;  // slots whose request has not ended

  struct Job;

 private:
  void handle(const http::Request& req, http::Response& res);
  // The browser, Host and key checks; false when `res` already holds the refusal.
  bool admit(const http::Request& req, http::Response& res);
  void handle_chat(const http::Request& req, http::Response& res);
  void handle_completion(const http::Request& req, http::Response& res);
  // Admits a prepared job (queue, response identity) and runs it.
  void start_job(std::shared_ptr<Job> job, http::Response& res);
  // Runs one admitted request: streams SSE when the request asked for it, otherwise answers
  // with one JSON body. Returns false when the client went away.
  bool run_job(Job& job, http::Response& res);
  SamplingParams default_sampling() const;
  RequestDefaults request_defaults() const;
  ModelInfo model_info() const;
  nlohmann::json props_json() const;
  nlohmann::json slots_json() const;
  std::string metrics_text();
  // The JSON constraint's view of the vocabulary, built at the first response_format request.
  std::shared_ptr<const chat::JsonTokenTable> json_token_table();
  void record_metrics(const runtime::GenerateResult& r);

  ServerOptions options_;
  std::unique_ptr<http::Server> http_;
  std::atomic<bool> cut_{false};      // shutdown's grace period is over: end every request
  std::atomic<int> n_cut_{0};
  bool loopback_ = true;
  int port_ = 0;
  std::atomic<bool> ready_{false};
  std::unique_ptr<runtime::Engine> engine_;
  std::unique_ptr<runtime::Scheduler> scheduler_;  // -np > 1: runs the requests over the slots
  std::unique_ptr<runtime::DraftSource> drafter_;  // set_drafter's
  int draft_max_ = 8;
  int draft_min_ = 0;
  mutable std::mutex info_mu_;
  ModelInfo info_;               // guarded by info_mu_
  bool info_known_ = false;      // guarded by info_mu_
  EngineGate gate_;
  std::atomic<uint64_t> n_requests_{0};
  std::once_flag json_table_once_;
  std::shared_ptr<const chat::JsonTokenTable> json_table_;

  // The one slot, for /slots: what runs now (or ran last).
  std::atomic<bool> slot_busy_{false};
  std::atomic<int> slot_n_prompt_{0};
  std::atomic<int> slot_n_decoded_{0};
  std::atomic<int> slot_max_tokens_{-1};
  std::atomic<uint64_t> slot_task_{0};
  std::atomic<int> slot_n_cached_{0};   // the engine's cached tokens after the last request
  mutable std::mutex slot_mu_;
  nlohmann::json slot_params_;   // guarded by slot_mu_

  // /metrics counters (llama-server's names); the *_bucket ones cover the time since the last
  // scrape, as llama-server's gauges do.
  struct Metrics {
    uint64_t prompt_tokens = 0, prompt_tokens_cached = 0, tokens_predicted = 0, n_decode = 0;
    uint64_t reuse_hits = 0;
    double prompt_seconds = 0, predicted_seconds = 0;
    int n_tokens_max = 0;
    uint64_t bucket_prompt_tokens = 0, bucket_predicted = 0;
    double bucket_prompt_seconds = 0, bucket_predicted_seconds = 0;
    double bucket_start = 0;  // when the bucket started (wall clock): aggregate tok/s
  };
  std::mutex metrics_mu_;
  Metrics metrics_;              // guarded by metrics_mu_
  int64_t start_time_ = 0;       // unix seconds
};

// Whether the peer of the connection on socket `fd` is still there (no FIN/RST seen). Never
// blocks; pipelined request bytes count as alive.
bool connection_alive(int fd);

}  // namespace gem::server
