// gem's HTTP server (server.h). Threads: the HTTP layer's workers (http.h) run every handler
// once a whole request has arrived; a chat request holds the engine (EngineGate, FIFO) for its
// whole run, so GET handlers on other workers never wait on it. With -np S > 1 the gate admits S
// requests at once and runtime::Scheduler's one thread runs them all, calling each request's
// callbacks (parsing, SSE events) on that thread; each stream's bytes then go out through its own
// sender thread (SinkWriter, decoupled), so one slow client holds up no other stream. A
// disconnect is noticed by polling the request's socket at every prompt tile and token, and by a
// per-request monitor thread that also writes SSE keep-alive comments during long tiles.
//
// tool_choice (chat/constraint.h make_tool_constraint): "none" keeps the tools declared in the prompt (as
// llama.cpp does) but bans <|tool_call>; "required" lets the model think first, then forces
// <|tool_call> if it has not opened one, and bans end-of-turn until a call was made; a named
// function additionally forces the text "call:NAME{" after <|tool_call> and ends the turn with
// <|tool_response> once that call closes. The arguments are always the model's own.
//
// The constraints of one request run in a chain (chat::combine_constraints): the reasoning
// budget, then the JSON constraint (response_format) or the tool-choice one. Any constraint makes
// the engine sample on the host from Backend::logits(); without one the CUDA backend samples on
// the device. logprobs come from the engine (Backend::token_logprobs), not from a constraint.
#include "server/server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/check.h"
#include "base/log.h"
#include "base/timer.h"
#include "chat/chat.h"
#include "chat/parser.h"
#include "server/api.h"
#include "server/http.h"
#include "server/prepare.h"
#include "server/webui/index_html.h"  // generated from src/server/webui/index.html

namespace gem::server {

using nlohmann::json;

namespace {

constexpr const char* kJsonType = "application/json; charset=utf-8";

std::string dump(const json& j) {
  // Invalid UTF-8 must never throw: it is replaced (U+FFFD).
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_json(http::Response& res, int status, const json& body) {
  res.send(status, kJsonType, dump(body));
}

void send_error(http::Response& res, const ApiError& e) {
  if (e.status == 503) res.add_header("Retry-After", "5");
  res.set_log_note(e.type + ": " + e.message.substr(0, 200));
  send_json(res, e.status, error_json(e));
}

ApiError api_error(int status, std::string type, std::string message) {
  ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  return e;
}

ApiError loading_error() { return api_error(503, "unavailable_error", "Loading model"); }

ApiError shutdown_error() {
  return api_error(503, "unavailable_error",
                   "the server is shutting down; the request was stopped before it finished");
}

bool secure_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The error type clients expect for an HTTP status the transport produced itself.
std::string type_for_status(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// Serialised writes to one streamed response (the generating thread and the monitor share it).
// Decoupled (-np > 1, where the scheduler thread produces every stream's events): write() only
// queues the bytes and a thread of the writer's own sends them, so a client that reads slowly
// delays nobody else; past kMaxPendingBytes unsent the client counts as gone (write() fails and
// its request stops). drain() waits until everything queued is sent (or the client failed).
class SinkWriter {
 public:
  static constexpr size_t kMaxPendingBytes = 1u << 20;

  SinkWriter(http::Response* res, bool decoupled) : res_(res), last_(now_seconds()) {
    if (res_ != nullptr && decoupled) sender_ = std::thread([this] { send_loop(); });
  }
  ~SinkWriter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (sender_.joinable()) sender_.join();
  }
  bool write(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (res_ == nullptr || failed_) return false;
    last_ = now_seconds();
    if (!sender_.joinable()) {
      if (!res_->write(s)) failed_ = true;
      return !failed_;
    }
    if (pending_.size() + s.size() > kMaxPendingBytes) {
      failed_ = true;  // the client has not taken 1 MiB of events: it is as good as gone
      return false;
    }
    pending_ += s;
    cv_.notify_all();
    return true;
  }
  bool event(const json& j) { return write("data: " + dump(j) + "\n\n"); }
  bool comment(const std::string& c) { return write(": " + c + "\n\n"); }
  // Everything queued is sent; false when the client failed.
  bool drain() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return failed_ || (pending_.empty() && !sending_); });
    return !failed_;
  }
  double silent_for() const {
    std::lock_guard<std::mutex> lock(mu_);
    return now_seconds() - last_;
  }
  bool failed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }
  bool streaming() const { return res_ != nullptr; }

 private:
  void send_loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty() || failed_) {
        if (stop_) return;
        pending_.clear();
        continue;
      }
      std::string out;
      out.swap(pending_);
      sending_ = true;
      lock.unlock();
      const bool ok = res_->write(out);
      lock.lock();
      sending_ = false;
      if (!ok) failed_ = true;
      cv_.notify_all();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  http::Response* res_;
  bool failed_ = false;
  double last_;
  std::string pending_;   // queued, not sent yet (decoupled)
  bool sending_ = false;  // the sender is writing what it took from pending_
  bool stop_ = false;
  std::thread sender_;    // decoupled only
};

// Watches the connection while the engine runs: flags a disconnect and keeps SSE streams alive.
class Monitor {
 public:
  Monitor(int fd, SinkWriter* writer, int heartbeat_s, std::atomic<bool>* gone)
      : fd_(fd), writer_(writer), heartbeat_s_(heartbeat_s), gone_(gone) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Monitor() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (stop_) break;
      if (fd_ >= 0 && !connection_alive(fd_)) gone_->store(true);
      if (writer_->streaming() && writer_->silent_for() >= heartbeat_s_) {
        if (!writer_->comment("keep-alive")) gone_->store(true);
      }
    }
  }

  int fd_;
  SinkWriter* writer_;
  int heartbeat_s_;
  std::atomic<bool>* gone_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

bool connection_alive(int fd) {
  if (fd < 0) return true;
  pollfd p{};
  p.fd = fd;
  p.events = POLLIN | POLLRDHUP;
  const int r = poll(&p, 1, 0);
  if (r <= 0) return true;
  if ((p.revents & (POLLERR | POLLHUP | POLLNVAL | POLLRDHUP)) != 0) return false;
  if ((p.revents & POLLIN) != 0) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// EngineGate

uint64_t EngineGate::enter() {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(queue_.size()) >= max_queue_ + std::max(0, capacity_ - running_)) return 0;
  const uint64_t t = ++next_;
  queue_.push_back(t);
  return t;
}

bool EngineGate::wait_turn(uint64_t ticket, double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool mine = cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] {
    return running_ < capacity_ && !queue_.empty() && queue_.front() == ticket;
  });
  if (!mine) return false;
  queue_.pop_front();
  running_++;
  cv_.notify_all();  // the next in line may take another free slot now
  return true;
}

void EngineGate::abandon(uint64_t ticket) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (*it == ticket) {
        queue_.erase(it);
        break;
      }
    }
  }
  cv_.notify_all();
}

void EngineGate::release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_--;
  }
  cv_.notify_all();
}

void EngineGate::set_capacity(int n_running) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    capacity_ = std::max(1, n_running);
  }
  cv_.notify_all();
}

int EngineGate::n_waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

// ---------------------------------------------------------------------------------------------
// Server

struct Server::Job {
  Server* server = nullptr;
  bool chat = true;             // false: a text completion (/v1/completions)
  ChatRequest req;              // chat: the whole request; completion: its GenerationOptions
  std::vector<int32_t> prompt;
  int n_history = -1;  // prompt tokens the engine keeps cached afterwards (engine.h)
  ResponseMeta meta;
  int fd = -1;
  uint64_t ticket = 0;
  bool holds_engine = false;
  ~Job() {
    if (holds_engine) {
      server->gate_.release();
    } else if (ticket != 0) {
      server->gate_.abandon(ticket);
    }
  }
};

Server::Server(ServerOptions options)
    : options_(std::move(options)), gate_(options_.max_queue) {
  start_time_ = static_cast<int64_t>(std::time(nullptr));
  set_max_json_depth(options_.max_json_depth);
  loopback_ = http::is_loopback_host(options_.host);
  http::Options o;
  o.host = options_.host;
  o.port = options_.port;
  o.max_body_bytes = options_.max_body_bytes;
  o.header_timeout_s = options_.header_timeout_s;
  o.body_timeout_s = options_.body_timeout_s;
  o.keep_alive_s = options_.keep_alive_s;
  o.write_timeout_s = options_.timeout_s;
  o.max_connections = options_.max_connections;
  // Chat requests hold a worker while they run or wait (at most n_parallel + max_queue of them;
  // more are refused at once), so the GET routes always find a free one.
  o.n_workers = options_.n_http_threads > 0
                    ? options_.n_http_threads
                    : options_.max_queue + std::max(1, options_.n_parallel) + 8;
  http_ = std::make_unique<http::Server>(
      o, [this](const http::Request& req, http::Response& res) { handle(req, res); },
      [](int status, const std::string& message) {
        return dump(error_json(api_error(status, type_for_status(status), message)));
      });
}

Server::~Server() { stop(); }

Status Server::bind() {
  GEM_RETURN_IF_ERROR(http_->bind());
  port_ = http_->port();
  return ok_status();
}

void Server::set_model_info(ModelInfo info) {
  std::lock_guard<std::mutex> lock(info_mu_);
  info_ = std::move(info);
  info_known_ = true;
}

void Server::set_drafter(std::unique_ptr<runtime::DraftSource> drafter, int draft_max,
                         int draft_min) {
  drafter_ = std::move(drafter);
  draft_max_ = draft_max;
  draft_min_ = draft_min;
}

void Server::set_engine(std::unique_ptr<runtime::Engine> engine, std::string chat_template) {
  engine_ = std::move(engine);
  if (engine_->backend().options().n_slots > 1) {
    runtime::Engine* e = engine_.get();
    scheduler_ = std::make_unique<runtime::Scheduler>(
        engine_->backend(), [e](int32_t token) { return e->is_eog(token); });
  }
  gate_.set_capacity(n_slots());
  {
    std::lock_guard<std::mutex> lock(info_mu_);
    info_.n_ctx = engine_->n_ctx();
    info_.chat_template = std::move(chat_template);
    if (engine_->has_model()) {
      const model::Config& c = engine_->config();
      info_.temperature = c.sampling_temp;
      info_.top_k = c.sampling_top_k;
      info_.top_p = c.sampling_top_p;
      info_.min_p = c.sampling_min_p;
      info_.n_vocab = c.n_vocab;
    }
    info_known_ = true;
  }
  ready_.store(true);
}

ModelInfo Server::model_info() const {
  std::lock_guard<std::mutex> lock(info_mu_);
  ModelInfo i = info_;
  if (!info_known_) i.n_ctx = options_.n_ctx;  // what the flags said (0: not known yet)
  return i;
}

bool Server::run() {
  http_->run();
  return true;
}

void Server::stop() {
  if (!http_) return;
  cut_.store(true);
  http_->stop_accepting();
  // Running requests notice cut_ at their next token or tile; give them a moment to end.
  for (int i = 0; i < 500 && http_->n_active() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  http_->stop();
}

int Server::n_active() const { return http_ ? http_->n_active() : 0; }

int Server::n_connections() const { return http_ ? http_->n_connections() : 0; }

int Server::shutdown(double grace_s) {
  http_->stop_accepting();
  const double deadline = now_seconds() + grace_s;
  while (http_->n_active() > 0 && now_seconds() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (http_->n_active() > 0) {
    GEM_LOG_WARN("server: %d request(s) still running after the %.1f s grace period; stopping them",
                 http_->n_active(), grace_s);
    cut_.store(true);
    for (int i = 0; i < 1000 && http_->n_active() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  http_->stop();
  return n_cut_.load();
}

SamplingParams Server::default_sampling() const {
  SamplingParams s;  // temperature 1.0, top_k 64, top_p 0.95 (Gemma's recommendation)
  s.min_p = 0.0f;
  const ModelInfo info = model_info();
  if (info.temperature) s.temperature = *info.temperature;
  if (info.top_k) s.top_k = *info.top_k;
  if (info.top_p) s.top_p = *info.top_p;
  if (info.min_p) s.min_p = *info.min_p;
  // The server's flags win over the model's recommendation.
  const SamplingOverrides& o = options_.sampling;
  if (o.temperature) s.temperature = *o.temperature;
  if (o.top_k) s.top_k = *o.top_k;
  if (o.top_p) s.top_p = *o.top_p;
  if (o.min_p) s.min_p = *o.min_p;
  if (o.repeat_penalty) s.repeat_penalty = *o.repeat_penalty;
  if (o.repeat_last_n) s.repeat_last_n = *o.repeat_last_n;
  if (o.presence_penalty) s.presence_penalty = *o.presence_penalty;
  if (o.frequency_penalty) s.frequency_penalty = *o.frequency_penalty;
  if (o.seed) s.seed = *o.seed;
  return s;
}

RequestDefaults Server::request_defaults() const {
  RequestDefaults d(default_sampling());
  d.max_tokens = options_.n_predict;
  d.enable_thinking = options_.enable_thinking && options_.reasoning_budget != 0;
  d.reasoning_format = options_.reasoning_format;
  d.reasoning_budget = options_.reasoning_budget;
  return d;
}

std::shared_ptr<const chat::JsonTokenTable> Server::json_token_table() {
  std::call_once(json_table_once_, [this] {
    json_table_ = std::make_shared<const chat::JsonTokenTable>(engine_->tokenizer());
  });
  return json_table_;
}

namespace {

// Floats printed as the decimal the user wrote (0.95, not 0.949999988).
double dec(float v) { return std::round(static_cast<double>(v) * 1e6) / 1e6; }

json sampling_json(const SamplingParams& s, int n_predict) {
  return json{{"temperature", dec(s.temperature)},
              {"top_k", s.top_k},
              {"top_p", dec(s.top_p)},
              {"min_p", dec(s.min_p)},
              {"repeat_penalty", dec(s.repeat_penalty)},
              {"repeat_last_n", s.repeat_last_n},
              {"presence_penalty", dec(s.presence_penalty)},
              {"frequency_penalty", dec(s.frequency_penalty)},
              {"seed", s.seed},  // 4294967295: a random seed per request (llama.cpp's default)
              {"n_predict", n_predict},
              {"max_tokens", n_predict}};
}

}  // namespace

json Server::props_json() const {
  const ModelInfo info = model_info();
  const RequestDefaults d = request_defaults();
  json settings = {{"params", sampling_json(d.sampling, d.max_tokens)}};
  settings["params"]["reasoning_format"] = reasoning_format_name(d.reasoning_format);
  settings["params"]["reasoning_budget"] = d.reasoning_budget;
  settings["params"]["enable_thinking"] = d.enable_thinking;
  if (info.n_ctx > 0) settings["n_ctx"] = info.n_ctx;
  return json{{"default_generation_settings", settings},
              {"total_slots", n_slots()},
              {"speculative", drafter_ != nullptr},  // --mtp: drafts with the MTP assistant
              {"draft_max", drafter_ ? draft_max_ : 0},
              {"model_alias", options_.model_name},
              {"model_path", options_.model_path},
              {"modalities", {{"vision", false}, {"audio", false}, {"video", false}}},
              {"endpoint_slots", options_.slots},
              {"endpoint_props", false},
              {"endpoint_metrics", options_.metrics},
              {"chat_template", info.chat_template},
              {"bos_token", "<bos>"},
              {"eos_token", "<eos>"},
              {"build_info", "b" + options_.build_info},
              {"is_sleeping", false},
              {"is_loading", !ready()}};
}

int Server::n_slots() const {
  return engine_ ? std::max(1, engine_->backend().options().n_slots)
                 : std::max(1, options_.n_parallel);
}

int Server::n_busy_slots() const {
  // A slot is free again before its request's answer goes out (the scheduler's, or slot_busy_),
  // so a client's next GET sees it idle.
  if (!scheduler_) return slot_busy_.load() ? 1 : 0;
  int n = 0;
  for (const runtime::SlotInfo& si : scheduler_->slots()) n += si.busy ? 1 : 0;
  return n;
}

json Server::slots_json() const {
  const ModelInfo info = model_info();
  if (scheduler_) {
    // One entry per sequence slot (llama-server's shape); n_ctx is each slot's own context.
    json out = json::array();
    for (const runtime::SlotInfo& si : scheduler_->slots()) {
      json slot = {{"id", si.id},
                   {"n_ctx", si.n_ctx},
                   {"speculative", drafter_ != nullptr},
                   {"is_processing", si.busy},
                   {"state", si.busy ? 1 : 0},
                   {"n_past", si.n_past},
                   {"n_cached_tokens", si.n_cached},
                   {"n_reused", si.n_reused},
                   {"params", sampling_json(default_sampling(), options_.n_predict)}};
      if (si.task > 0) {
        // The sampling of the request it runs (or ran last), as llama-server shows it.
        slot["params"] = sampling_json(si.sampling, si.max_tokens);
        slot["id_task"] = si.task;
        slot["n_prompt_tokens"] = si.n_prompt;
        slot["next_token"] = json::array(
            {json{{"has_next_token", si.busy && !si.prefill},
                  {"has_new_line", false},
                  {"n_remain", si.max_tokens < 0 ? -1 : si.max_tokens - si.n_decoded},
                  {"n_decoded", si.n_decoded}}});
      }
      out.push_back(std::move(slot));
    }
    return out;
  }
  json slot = {{"id", 0},
               {"n_ctx", info.n_ctx},
               {"speculative", false},
               {"is_processing", slot_busy_.load()},
               {"state", slot_busy_.load() ? 1 : 0}};
  slot["n_cached_tokens"] = slot_n_cached_.load();
  if (slot_task_.load() > 0) {
    const int max_tokens = slot_max_tokens_.load();
    const int decoded = slot_n_decoded_.load();
    slot["id_task"] = slot_task_.load();
    slot["n_prompt_tokens"] = slot_n_prompt_.load();
    {
      std::lock_guard<std::mutex> lock(slot_mu_);
      slot["params"] = slot_params_;
    }
    slot["next_token"] = json::array({json{{"has_next_token", slot_busy_.load()},
                                           {"has_new_line", false},
                                           {"n_remain", max_tokens < 0 ? -1 : max_tokens - decoded},
                                           {"n_decoded", decoded}}});
  } else {
    slot["params"] = sampling_json(default_sampling(), options_.n_predict);
  }
  return json::array({slot});
}

void Server::record_metrics(const runtime::GenerateResult& r) {
  std::lock_guard<std::mutex> lock(metrics_mu_);
  Metrics& m = metrics_;
  const uint64_t evaluated = static_cast<uint64_t>(r.n_prompt - r.n_cached);
  m.prompt_tokens += evaluated;
  m.prompt_tokens_cached += static_cast<uint64_t>(r.n_cached);
  if (r.n_cached > 0) m.reuse_hits++;
  m.prompt_seconds += r.prompt_seconds;
  m.tokens_predicted += static_cast<uint64_t>(r.n_generated);
  m.predicted_seconds += r.decode_seconds;
  // Backend evaluations: one per prompt tile, one per generated token after the first.
  const int tile = engine_ ? std::max(1, engine_->backend().options().n_tile) : 1;
  m.n_decode += (evaluated + static_cast<uint64_t>(tile) - 1) / static_cast<uint64_t>(tile) +
                static_cast<uint64_t>(std::max(0, r.n_generated - 1));
  m.n_tokens_max = std::max(m.n_tokens_max, r.n_prompt + r.n_generated);
  m.bucket_prompt_tokens += evaluated;
  m.bucket_prompt_seconds += r.prompt_seconds;
  m.bucket_predicted += static_cast<uint64_t>(r.n_generated);
  m.bucket_predicted_seconds += r.decode_seconds;
}

std::string Server::metrics_text() {
  Metrics m;
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    m = metrics_;
    // The gauges average over the time between two scrapes (llama-server's reset_bucket).
    metrics_.bucket_prompt_tokens = metrics_.bucket_predicted = 0;
    metrics_.bucket_prompt_seconds = metrics_.bucket_predicted_seconds = 0;
    metrics_.bucket_start = now_seconds();
  }
  if (scheduler_) m.n_decode = scheduler_->stats().n_steps;  // one eval_batch per step
  const double bucket_wall = m.bucket_start > 0
                                 ? now_seconds() - m.bucket_start
                                 : static_cast<double>(std::time(nullptr) - start_time_);
  struct Item {
    const char* name;
    const char* help;
    double value;
  };
  const Item counters[] = {
      {"prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens",
       static_cast<double>(m.prompt_tokens)},
      {"prompt_tokens_cached_total", "Number of prompt tokens reused from the cache",
       static_cast<double>(m.prompt_tokens_cached)},
      {"prompt_seconds_total", "Total time spent processing prompts", m.prompt_seconds},
      {"tokens_predicted_total", "Number of generation tokens processed",
       static_cast<double>(m.tokens_predicted)},
      {"tokens_predicted_seconds_total", "Total time spent generating tokens", m.predicted_seconds},
      {"n_decode_total", "Total number of backend evaluations (prompt tiles and decode steps)",
       static_cast<double>(m.n_decode)},
      {"n_tokens_max", "Largest observed sequence length (prompt + generation)",
       static_cast<double>(m.n_tokens_max)},
  };
  // Per-slot figures: the scheduler's (-np > 1), or the one engine's.
  std::vector<runtime::SlotInfo> slots;
  runtime::SchedulerStats st;
  if (scheduler_) {
    slots = scheduler_->slots();
    st = scheduler_->stats();
  }
  const int n_busy = n_busy_slots();
  double kv_tokens = 0;
  for (const runtime::SlotInfo& si : slots) kv_tokens += si.n_past;
  if (!scheduler_) kv_tokens = slot_n_cached_.load();
  const double n_ctx_all = static_cast<double>(n_slots()) * std::max(1, model_info().n_ctx);
  const double busy_per_decode =
      scheduler_ ? (st.n_steps > 0 ? static_cast<double>(st.n_decode_rows) / st.n_steps : 0.0)
                 : (m.n_decode > 0 ? 1.0 : 0.0);
  const Item gauges[] = {
      {"prompt_tokens_seconds", "Average prompt throughput in tokens/s",
       m.bucket_prompt_seconds > 0 ? m.bucket_prompt_tokens / m.bucket_prompt_seconds : 0.0},
      {"predicted_tokens_seconds", "Average generation throughput in tokens/s (per request)",
       m.bucket_predicted_seconds > 0 ? m.bucket_predicted / m.bucket_predicted_seconds : 0.0},
      {"requests_processing", "Number of requests processing", static_cast<double>(n_busy)},
      {"requests_deferred", "Number of requests deferred", static_cast<double>(gate_.n_waiting())},
      {"n_busy_slots_per_decode", "Average number of busy slots per backend evaluation",
       busy_per_decode},
      {"kv_cache_tokens", "KV cache tokens held, all slots", kv_tokens},
      {"kv_cache_usage_ratio", "KV cache usage (tokens held / slots x n_ctx)",
       n_ctx_all > 0 ? kv_tokens / n_ctx_all : 0.0},
  };
  // gem's own: aggregate throughput over the wall time since the last scrape (all slots
  // together), requests, slots, prefix-cache reuse, and each slot's KV use.
  const Item gem_items[] = {
      {"generated_tokens_per_second", "Generated tokens per wall-clock second since the last scrape, all slots",
       bucket_wall > 0 ? m.bucket_predicted / bucket_wall : 0.0},
      {"requests_total", "Requests admitted (chat and text completions)",
       static_cast<double>(n_requests_.load())},
      {"slots_total", "Sequence slots (-np)", static_cast<double>(n_slots())},
      {"prompt_cache_reuse_hits_total", "Requests that reused a slot's cached prefix",
       static_cast<double>(scheduler_ ? st.n_reuse_hits : m.reuse_hits)},
      {"slot_evictions_total", "Requests that started over on a slot holding another conversation",
       static_cast<double>(st.n_evictions)},
      // The scheduler thread's time (-np > 1): what separates the server's throughput from the
      // backend's own (gem bench --parallel).
      {"scheduler_busy_seconds_total", "Scheduler time spent starting, stepping and publishing (the rest is idle)",
       st.time.busy_seconds},
      {"scheduler_eval_seconds_total", "Scheduler time in the backend's evaluations (decode steps, prompt chunks, drafting rounds)",
       st.time.eval_seconds},
      {"scheduler_prompt_eval_seconds_total", "Of the evaluation time, steps that carried prompt rows",
       st.time.prompt_eval_seconds},
      {"scheduler_prompt_steps_total", "Steps that carried prompt rows",
       static_cast<double>(st.time.n_prompt_steps)},
      {"scheduler_sample_seconds_total", "Scheduler time drawing tokens (device and host)",
       st.time.sample_seconds},
      {"scheduler_host_draw_seconds_total", "Of the drawing time, draws on the host (first tokens, constraints, samplers the device lacks)",
       st.time.host_draw_seconds},
      {"scheduler_host_draws_total", "Tokens drawn on the host", static_cast<double>(st.time.n_host_draws)},
      {"scheduler_emit_seconds_total", "Scheduler time handing tokens to their requests (detokenising, streaming)",
       st.time.emit_seconds},
      {"scheduler_release_seconds_total", "Scheduler time starting requests and rolling back or resetting slots after them",
       st.time.release_seconds},
  };
  std::string out;
  auto add = [&](const Item& it, const char* type) {
    out += strprintf("# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %.17g\n", it.name,
                     it.help, it.name, type, it.name, it.value);
  };
  for (const Item& it : counters) add(it, "counter");
  for (const Item& it : gauges) add(it, "gauge");
  for (const Item& it : gem_items) {
    const bool counter = std::string_view(it.name).ends_with("_total");
    out += strprintf("# HELP gem:%s %s\n# TYPE gem:%s %s\ngem:%s %.17g\n", it.name, it.help,
                     it.name, counter ? "counter" : "gauge", it.name, it.value);
  }
  if (!slots.empty()) {
    out += "# HELP gem:slot_kv_tokens Positions held in the slot's KV cache\n"
           "# TYPE gem:slot_kv_tokens gauge\n";
    for (const runtime::SlotInfo& si : slots) {
      out += strprintf("gem:slot_kv_tokens{slot=\"%d\"} %d\n", si.id, si.n_past);
    }
    out += "# HELP gem:slot_cached_tokens Tokens the slot keeps between requests (its prefix cache)\n"
           "# TYPE gem:slot_cached_tokens gauge\n";
    for (const runtime::SlotInfo& si : slots) {
      out += strprintf("gem:slot_cached_tokens{slot=\"%d\"} %d\n", si.id, si.n_cached);
    }
  }
  return out;
}

bool Server::admit(const http::Request& req, http::Response& res) {
  // DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 sends
  // "Host: evil.example". Browsers always send Host; clients that omit it are not browsers.
  if (loopback_) {
    const std::string* host = req.header("host");
    if (host != nullptr && !http::is_loopback_host_header(*host)) {
      send_error(res, api_error(403, "permission_error",
                                "Host '" + host->substr(0, 100) +
                                    "' is not a loopback name: this server listens on " +
                                    options_.host +
                                    " and answers only requests addressed to localhost or a "
                                    "loopback address (DNS rebinding protection)"));
      return false;
    }
  }
  // Cross-site requests: browsers send Origin on every cross-origin request (and on same-origin
  // POSTs); curl and the SDKs send none.
  if (const std::string* origin = req.header("origin")) {
    const std::string host = req.header_value("host");
    const std::string o = lower(*origin);
    bool allowed = !host.empty() && o == "http://" + lower(host);
    // The server's own pages on a loopback name: http://localhost:PORT, http://127.0.0.1:PORT.
    if (!allowed && loopback_ && o.rfind("http://", 0) == 0) {
      const std::string authority = o.substr(7);
      const std::string suffix = ":" + std::to_string(port_);
      allowed = authority.size() > suffix.size() &&
                authority.compare(authority.size() - suffix.size(), suffix.size(), suffix) == 0 &&
                http::is_loopback_host_header(authority);
    }
    for (const std::string& o : options_.cors_origins) {
      if (o == "*" || lower(o) == lower(*origin)) allowed = true;
    }
    if (!allowed) {
      send_error(res, api_error(403, "permission_error",
                                "Origin '" + origin->substr(0, 100) +
                                    "' is not allowed: cross-site requests are refused unless "
                                    "the origin is listed in --cors"));
      return false;
    }
    res.add_header("Access-Control-Allow-Origin", *origin);
    res.add_header("Access-Control-Allow-Credentials", "true");
    res.add_header("Vary", "Origin");
  }
  if (req.method == "OPTIONS") {  // CORS preflight: no key (browsers never send one here)
    res.add_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string asked = req.header_value("access-control-request-headers");
    res.add_header("Access-Control-Allow-Headers",
                   asked.empty() ? "Authorization, Content-Type, X-Api-Key" : asked);
    res.add_header("Access-Control-Max-Age", "600");
    res.send(200, "", "");
    return false;
  }
  if (options_.api_key.empty() || req.path == "/health" || req.path == "/v1/health" ||
      (options_.webui && req.path == "/" && req.method != "POST")) {  // the page holds no data
    return true;
  }
  std::string key;
  const std::string auth = req.header_value("authorization");
  // The scheme is case-insensitive (RFC 9110 §11.1): "bearer KEY" is as good as "Bearer KEY".
  if (auth.size() > 7 && lower(auth.substr(0, 7)) == "bearer ") {
    key = auth.substr(7);
    while (!key.empty() && key.front() == ' ') key.erase(0, 1);
  }
  if (key.empty()) key = req.header_value("x-api-key");
  if (!secure_equal(key, options_.api_key)) {
    send_error(res, api_error(401, "authentication_error",
                              key.empty() ? "Invalid API Key (none given)" : "Invalid API Key"));
    return false;
  }
  return true;
}

void Server::handle(const http::Request& req, http::Response& res) {
  if (!admit(req, res)) return;
  const std::string& p = req.path;
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (p == "/health" || p == "/v1/health") {
    if (!get) return send_error(res, api_error(405, "invalid_request_error", "use GET " + p));
    if (!ready()) return send_error(res, loading_error());
    return send_json(res, 200, json{{"status", "ok"}});
  }
  if (p == "/v1/models" || p == "/models") {
    if (!get) return send_error(res, api_error(405, "invalid_request_error", "use GET " + p));
    // Answered from options alone, so it works while the model loads (hax's 2 s budget).
    const ModelInfo info = model_info();
    json meta = json::object();
    if (info.n_ctx > 0) meta["n_ctx"] = info.n_ctx;
    if (info.n_vocab > 0) meta["n_vocab"] = info.n_vocab;
    json aliases = json::array({options_.model_name});
    for (const std::string& a : options_.aliases) {
      if (a != options_.model_name) aliases.push_back(a);
    }
    json entry = {{"id", options_.model_name},
                  {"aliases", aliases},
                  {"tags", json::array()},
                  {"object", "model"},
                  {"created", static_cast<int64_t>(std::time(nullptr))},
                  {"owned_by", "gem"},
                  {"meta", meta}};
    return send_json(res, 200, json{{"object", "list"}, {"data", json::array({entry})}});
  }
  if (p == "/props") {
    if (!get) return send_error(res, api_error(405, "invalid_request_error", "use GET /props"));
    // From the start of loading: what the GGUF header said, and "is_loading" until ready.
    return send_json(res, 200, props_json());
  }
  if (p == "/metrics") {
    if (!get) return send_error(res, api_error(405, "invalid_request_error", "use GET /metrics"));
    if (!options_.metrics) {
      return send_error(res, api_error(501, "not_supported_error",
                                       "This server does not support metrics endpoint. Start it "
                                       "with `--metrics`"));
    }
    res.add_header("Process-Start-Time-Unix", std::to_string(start_time_));
    return res.send(200, "text/plain; version=0.0.4", metrics_text());
  }
  if (p == "/slots") {
    if (!get) return send_error(res, api_error(405, "invalid_request_error", "use GET /slots"));
    if (!options_.slots) {
      return send_error(res, api_error(501, "not_supported_error",
                                       "This server does not support slots endpoint. Start it "
                                       "with `--slots`"));
    }
    if (!ready()) return send_error(res, loading_error());
    if (req.query.find("fail_on_no_slot") != std::string::npos &&
        n_busy_slots() >= n_slots()) {
      return send_error(res, api_error(503, "unavailable_error", "no slot available"));
    }
    return send_json(res, 200, slots_json());
  }
  if (p.starts_with("/slots/")) {
    // llama-server's slot actions (POST /slots/ID?action=save|restore|erase): gem keeps each
    // slot's prefix cache in memory only, so they are refused as llama-server refuses them
    // without --slot-save-path, saying why.
    return send_error(res, api_error(501, "not_supported_error",
                                     "This server does not support slots action (save, restore, "
                                     "erase): gem keeps each slot's prefix cache in memory only"));
  }
  if (p == "/v1/chat/completions" || p == "/chat/completions") {
    if (req.method != "POST") {
      return send_error(res, api_error(405, "invalid_request_error", "use POST " + p));
    }
    return handle_chat(req, res);
  }
  if (p == "/v1/completions" || p == "/completions") {
    if (req.method != "POST") {
      return send_error(res, api_error(405, "invalid_request_error", "use POST " + p));
    }
    return handle_completion(req, res);
  }
  if (p == "/tokenize" || p == "/detokenize" || p == "/apply-template") {
    if (req.method != "POST") {
      return send_error(res, api_error(405, "invalid_request_error", "use POST " + p));
    }
    size_t deep_at = 0;
    if (!json_depth_within(req.body, options_.max_json_depth, &deep_at)) {
      return send_error(res, bad_request(json_depth_message("request body", options_.max_json_depth, deep_at)));
    }
    json out;
    ApiError err;
    bool ok = false;
    if (p == "/apply-template") {
      // The chat format alone: no model needed.
      ok = apply_template_route(req.body, request_defaults(), &out, &err);
    } else {
      if (!ready()) return send_error(res, loading_error());
      ok = p == "/tokenize" ? tokenize_route(req.body, engine_->tokenizer(), &out, &err)
                            : detokenize_route(req.body, engine_->tokenizer(), &out, &err);
    }
    if (!ok) return send_error(res, err);
    return send_json(res, 200, out);
  }
  // The chat page (src/server/webui/index.html, embedded at build time; off with --no-webui).
  // Its own requests carry the server's origin, which admit() lets through.
  if (p == "/" && options_.webui && get) {
    res.add_header("Content-Security-Policy", webui::kIndexCsp);
    res.add_header("X-Content-Type-Options", "nosniff");
    res.add_header("Referrer-Policy", "no-referrer");
    res.add_header("Cache-Control", "no-cache");
    return res.send(200, "text/html; charset=utf-8",
                    std::string_view(webui::index_html().data(), webui::index_html().size()));
  }
  send_error(res, api_error(404, "not_found_error", "File Not Found"));
}

void Server::handle_chat(const http::Request& req, http::Response& res) {
  if (!ready()) {
    send_error(res, loading_error());
    return;
  }
  // The body is read as JSON whatever its declared Content-Type (curl -d sends a form type).
  auto job = std::make_shared<Job>();
  job->server = this;
  PreparedChat prepared;
  ApiError err;
  if (!prepare_chat(req.body, options_.max_json_depth, request_defaults(), engine_->tokenizer(),
                    &prepared, &err)) {
    send_error(res, err);
    return;
  }
  job->req = std::move(prepared.req);
  job->prompt = std::move(prepared.prompt);
  job->n_history = prepared.n_history;
  start_job(std::move(job), res);
}

void Server::handle_completion(const http::Request& req, http::Response& res) {
  if (!ready()) {
    send_error(res, loading_error());
    return;
  }
  size_t deep_at = 0;
  if (!json_depth_within(req.body, options_.max_json_depth, &deep_at)) {
    send_error(res, bad_request(json_depth_message("request body", options_.max_json_depth, deep_at)));
    return;
  }
  CompletionRequest cr;
  ApiError err;
  auto job = std::make_shared<Job>();
  job->server = this;
  job->chat = false;
  if (!parse_completion_request(req.body, request_defaults(), &cr, &err) ||
      !build_completion_prompt(cr, engine_->tokenizer(), &job->prompt, &err)) {
    send_error(res, err);
    return;
  }
  static_cast<GenerationOptions&>(job->req) = std::move(static_cast<GenerationOptions&>(cr));
  job->req.enable_thinking = false;
  start_job(std::move(job), res);
}

void Server::start_job(std::shared_ptr<Job> job, http::Response& res) {
  const int n_prompt = static_cast<int>(job->prompt.size());
  if (n_prompt >= engine_->n_ctx()) {
    ApiError e = bad_request(strprintf("request (%d tokens) exceeds the available context size "
                                       "(%d tokens), try increasing it",
                                       n_prompt, engine_->n_ctx()));
    e.type = "exceed_context_size_error";
    e.extra = {{"n_prompt_tokens", n_prompt}, {"n_ctx", engine_->n_ctx()}};
    send_error(res, e);
    return;
  }
  if (cut_.load()) {
    send_error(res, shutdown_error());
    return;
  }
  // A JSON reply needs the vocabulary as bytes: built once, before the request holds the engine.
  if (job->req.json_grammar) json_token_table();
  job->ticket = gate_.enter();
  if (job->ticket == 0) {
    send_error(res, api_error(503, "unavailable_error",
                              "the server is busy: the request queue is full, retry later"));
    return;
  }
  thread_local std::mt19937_64 rng{std::random_device{}()};
  job->meta.id = (job->chat ? "chatcmpl-" : "cmpl-") + random_alnum(rng, 32);
  job->meta.created = static_cast<int64_t>(std::time(nullptr));
  job->meta.model = options_.model_name;
  job->meta.fingerprint = "b" + options_.build_info;
  job->fd = res.fd();
  n_requests_++;

  if (job->req.stream) {
    res.add_header("Cache-Control", "no-cache");
    res.add_header("X-Accel-Buffering", "no");
    if (!res.start_stream(200, "text/event-stream")) return;
  }
  if (!run_job(*job, res)) res.drop();  // the client is gone; nothing will be read
}

namespace {

// logprobs: the engine reports each drawn token's log-probabilities in its raw logits row
// (Backend::token_logprobs: on the device where the backend samples, so the row is not copied to
// the host for them); the recorder keeps the last one for the answer's entry.
class LogprobRecorder {
 public:
  LogprobRecorder(const Tokenizer& tokenizer, int top_n) : tokenizer_(tokenizer), top_n_(top_n) {}
  // Asks the engine for the log-probabilities of every token of `greq` (into `cb`).
  void attach(runtime::GenerateRequest& greq, runtime::GenerateCallbacks& cb) {
    greq.top_logprobs = top_n_;
    cb.on_logprobs = [this](int32_t token, const TokenLogprobs& lp) {
      token_ = token;
      last_ = lp;
    };
  }
  json entry(int32_t token) const {
    GEM_CHECK(token == token_, "logprobs of token %d requested, the engine reported %d", token,
              token_);
    return logprob_entry(last_, token, tokenizer_);
  }

 private:
  const Tokenizer& tokenizer_;
  int top_n_;
  int32_t token_ = -1;
  TokenLogprobs last_;
};

}  // namespace

bool Server::run_job(Job& job, http::Response& res) {
  const ChatRequest& cr = job.req;
  const bool streaming = cr.stream;
  SinkWriter writer(streaming ? &res : nullptr, /*decoupled=*/scheduler_ != nullptr);
  // Ends the request early because the server is shutting down: a stream gets an error event
  // and [DONE] (so clients neither hang nor retry blindly), a plain request a 503.
  auto cut_short = [&] {
    n_cut_.fetch_add(1);
    GEM_LOG_WARN("%s: stopped by the server's shutdown", job.meta.id.c_str());
    if (streaming) {
      writer.event(error_json(shutdown_error()));
      writer.write("data: [DONE]\n\n");
    } else {
      send_error(res, shutdown_error());
    }
    return true;
  };

  // Wait for the engine (FIFO), watching the client and keeping the stream alive.
  while (!gate_.wait_turn(job.ticket, 0.25)) {
    if (cut_.load()) {
      gate_.abandon(job.ticket);
      job.ticket = 0;
      return cut_short();
    }
    const bool gone_while_queued =
        !connection_alive(job.fd) ||
        (streaming && writer.silent_for() >= options_.heartbeat_s && !writer.comment("queued"));
    if (gone_while_queued) {
      gate_.abandon(job.ticket);  // at once, so the requests behind it move up
      job.ticket = 0;
      return false;
    }
  }
  job.ticket = 0;
  job.holds_engine = true;
  struct Release {
    Job& job;
    ~Release() {
      job.server->slot_busy_.store(false);
      job.holds_engine = false;
      job.server->gate_.release();
    }
  } release{job};

  runtime::Engine& engine = *engine_;
  const Tokenizer& tokenizer = engine.tokenizer();
  // The slot, for /slots and /metrics.
  slot_task_.fetch_add(1);
  slot_n_prompt_.store(static_cast<int>(job.prompt.size()));
  slot_n_decoded_.store(0);
  slot_max_tokens_.store(cr.max_tokens);
  {
    std::lock_guard<std::mutex> lock(slot_mu_);
    slot_params_ = sampling_json(cr.sampling, cr.max_tokens);
    slot_params_["stream"] = cr.stream;
  }
  slot_busy_.store(true);

  std::atomic<bool> gone{false};
  if (job.chat && streaming && !cr.return_progress &&
      !writer.event(chunk_json(job.meta, json{{"role", "assistant"}, {"content", nullptr}},
                               nullptr))) {
    return false;
  }

  chat::ParserOptions po;
  po.thinking = cr.enable_thinking;
  po.tools = !cr.tools.empty() && cr.tool_choice != ToolChoice::kNone && !cr.json_grammar;
  chat::OutputParser parser(tokenizer, po);
  StreamDecoder decoder(tokenizer, /*render_special=*/false);  // text completions
  thread_local std::mt19937_64 rng{std::random_device{}()};
  DeltaAssembler assembler(cr.stop, &rng, cr.reasoning_format);
  std::vector<chat::Event> events;
  std::vector<json> deltas;

  runtime::GenerateRequest greq;
  greq.prompt = job.prompt;
  greq.n_history = job.n_history;
  greq.sampling = cr.sampling;
  greq.max_tokens = cr.max_tokens;
  greq.stop_at_eog = !cr.ignore_eos;
  greq.drafter = drafter_.get();  // the engine drafts for requests without a constraint
  greq.draft_max = draft_max_;
  greq.draft_min = draft_min_;
  std::unique_ptr<LogprobRecorder> recorder;
  std::vector<runtime::Constraint> constraints;
  if (cr.top_logprobs >= 0) {
    recorder = std::make_unique<LogprobRecorder>(tokenizer, cr.top_logprobs);
  }
  if (job.chat) {
    if (cr.enable_thinking && cr.reasoning_budget > 0 && !cr.json_grammar) {
      constraints.push_back(chat::make_reasoning_budget_constraint(cr.reasoning_budget, tokenizer));
    }
    if (cr.json_grammar) {
      chat::JsonConstraintOptions jo;
      jo.thinking = cr.enable_thinking;
      jo.reasoning_budget = cr.reasoning_budget;
      // Tokens the reply may take: max_tokens, or what the context leaves.
      const int room = engine.n_ctx() - static_cast<int>(job.prompt.size());
      jo.budget = cr.max_tokens >= 0 ? std::min(cr.max_tokens, room) : room;
      constraints.push_back(chat::make_json_constraint(cr.json_grammar, json_token_table(),
                                                       tokenizer, jo));
    } else if (!cr.tools.empty()) {
      constraints.push_back(chat::make_tool_constraint(cr.tool_choice, cr.tool_name,
                                                       cr.enable_thinking, tokenizer));
    }
  }
  greq.constraint = chat::combine_constraints(std::move(constraints));

  // logprobs entries of the answer's tokens: ready ones go out with the next content; a token
  // that produced no text yet (part of a character) waits; reasoning and tool-call tokens are
  // not the answer's and are dropped.
  std::vector<json> lp_pending, lp_ready, lp_all;
  auto take_logprob = [&](int32_t token, bool content, bool other) {
    if (!recorder) return;
    // The format's own tokens (<channel|>, <turn|>, ...) are never the answer's text.
    const TokenType type = tokenizer.token_type(token);
    const bool control = tokenizer.is_control(token) || type == TokenType::kControl ||
                         type == TokenType::kUserDefined;
    if (content) {
      lp_pending.push_back(recorder->entry(token));
      for (json& e : lp_pending) lp_ready.push_back(std::move(e));
      lp_pending.clear();
    } else if (other) {
      lp_pending.clear();
    } else if (!control) {
      lp_pending.push_back(recorder->entry(token));
    }
  };

  const Timer timer;
  int progress_cache = -1;
  runtime::GenerateCallbacks cb;
  cb.on_prompt_progress = [&](int done, int total) {
    if (cut_.load()) return false;
    if (gone.load() || !connection_alive(job.fd)) {
      gone.store(true);
      return false;
    }
    if (!streaming) return true;
    if (cr.return_progress) {
      if (progress_cache < 0) progress_cache = done;
      json chunk = job.chat ? chunk_json(job.meta, json{{"role", "assistant"}, {"content", nullptr}}, nullptr)
                            : completion_chunk_json(job.meta, "", nullptr);
      chunk["prompt_progress"] = {{"total", total},
                                  {"cache", progress_cache},
                                  {"processed", done},
                                  {"time_ms", static_cast<int64_t>(timer.seconds() * 1e3)}};
      if (!writer.event(chunk)) gone.store(true);
    } else if (progress_cache >= 0) {
      // After each prompt tile: a comment keeps proxies and client idle timers quiet.
      if (!writer.comment(strprintf("prompt %d/%d", done, total))) gone.store(true);
    } else {
      progress_cache = done;
    }
    return !gone.load();
  };
  bool stop_string = false;
  // Streams the deltas; the logprobs ready so far ride on the last content delta.
  auto emit = [&](std::vector<json>& ds) {
    int last_content = -1;
    for (size_t i = 0; i < ds.size(); ++i) {
      if (ds[i].contains("content")) last_content = static_cast<int>(i);
    }
    for (size_t i = 0; i < ds.size(); ++i) {
      const bool with_lp = recorder && static_cast<int>(i) == last_content && !lp_ready.empty();
      if (with_lp) {
        for (json& e : lp_ready) lp_all.push_back(e);
      }
      if (!streaming) continue;
      json chunk = job.chat ? chunk_json(job.meta, ds[i], nullptr)
                            : completion_chunk_json(job.meta, ds[i].value("content", ""), nullptr);
      if (with_lp) chunk["choices"][0]["logprobs"] = json{{"content", lp_ready}};
      if (!writer.event(chunk)) gone.store(true);
    }
    if (last_content >= 0) lp_ready.clear();
    ds.clear();
  };
  cb.on_token = [&](int32_t token) {
    if (cut_.load()) return false;
    if (gone.load() || !connection_alive(job.fd)) {
      gone.store(true);
      return false;
    }
    slot_n_decoded_.fetch_add(1);
    bool content = false, other = false;
    if (job.chat) {
      events.clear();
      parser.push(token, events);
      for (const chat::Event& e : events) {
        (e.kind == chat::EventKind::kContent ? content : other) = true;
      }
      take_logprob(token, content, other);
      for (const chat::Event& e : events) {
        if (assembler.add(e, deltas)) stop_string = true;
      }
    } else if (!engine.is_eog(token)) {
      const std::string text = decoder.push(token);
      take_logprob(token, !text.empty(), false);
      if (!text.empty() && assembler.add(chat::Event{chat::EventKind::kContent, text, -1}, deltas)) {
        stop_string = true;
      }
    }
    emit(deltas);
    return !stop_string && !gone.load();
  };

  if (recorder) recorder->attach(greq, cb);

  Result<runtime::GenerateResult> result = [&] {
    Monitor monitor(job.fd, &writer, options_.heartbeat_s, &gone);
    return scheduler_ ? scheduler_->generate(greq, cb) : engine.generate(greq, cb);
  }();
  if (!scheduler_) slot_n_cached_.store(static_cast<int>(engine.cached_tokens().size()));
  slot_busy_.store(false);  // before the answer goes out: a client's next GET sees the slot idle

  if (!result.ok()) {
    GEM_LOG_ERROR("%s: %s", job.meta.id.c_str(), result.message().c_str());
    const ApiError e = api_error(500, "server_error", result.message());
    if (streaming) {
      writer.event(error_json(e));
      return true;  // the body ends without [DONE] (protocol §9.2)
    }
    send_error(res, e);
    return true;
  }
  const runtime::GenerateResult& r = *result;
  record_metrics(r);
  if (gone.load()) {
    GEM_LOG_INFO("%s: client disconnected (prompt %d, generated %d); state restored",
                 job.meta.id.c_str(), r.n_prompt, r.n_generated);
    return false;
  }
  if (cut_.load() && !stop_string) return cut_short();
  if (r.finish == runtime::FinishReason::kCancelledInPrompt) return false;
  const bool length = r.finish == runtime::FinishReason::kLength ||
                      r.finish == runtime::FinishReason::kContextFull;
  if (job.chat) {
    events.clear();
    parser.finish(length && !stop_string ? chat::StopCause::kLength : chat::StopCause::kEog, events);
    if (!stop_string) {
      for (const chat::Event& e : events) {
        if (assembler.add(e, deltas)) stop_string = true;
      }
    }
  } else if (!stop_string) {
    const std::string tail = decoder.flush();
    if (!tail.empty() && assembler.add(chat::Event{chat::EventKind::kContent, tail, -1}, deltas)) {
      stop_string = true;
    }
  }
  assembler.flush(deltas);
  emit(deltas);
  for (json& e : lp_ready) lp_all.push_back(std::move(e));  // text held back by a stop string
  const std::string reason = finish_reason(r.finish, stop_string, assembler.n_tool_calls());
  GEM_LOG_INFO("%s: prompt %d (cached %d) in %.2f s, generated %d in %.2f s (%.1f tok/s), %s",
               job.meta.id.c_str(), r.n_prompt, r.n_cached, r.prompt_seconds, r.n_generated,
               r.decode_seconds, r.decode_seconds > 0 ? r.n_generated / r.decode_seconds : 0.0,
               reason.c_str());

  if (streaming) {
    json fin = job.chat ? chunk_json(job.meta, json::object(), reason)
                        : completion_chunk_json(job.meta, "", reason);
    if (!cr.include_usage) fin["timings"] = timings_json(r);
    if (!job.chat) fin["usage"] = usage_json(r);
    if (!writer.event(fin)) return false;
    if (cr.include_usage) {
      json u = job.chat ? chunk_json(job.meta, json::object(), nullptr)
                        : completion_chunk_json(job.meta, "", nullptr);
      u["choices"] = json::array();
      u["usage"] = usage_json(r);
      u["timings"] = timings_json(r);
      if (!writer.event(u)) return false;
    }
    if (!writer.write("data: [DONE]\n\n") || !writer.drain()) return false;
    return res.end_stream();
  }
  json choice;
  if (job.chat) {
    choice = {{"finish_reason", reason}, {"index", 0}, {"message", assembler.message()}};
    if (recorder) choice["logprobs"] = json{{"content", lp_all}};
  } else {
    choice = {{"text", assembler.message()["content"]},
              {"index", 0},
              {"logprobs", recorder ? json{{"content", lp_all}} : json(nullptr)},
              {"finish_reason", reason}};
  }
  json body = {{"choices", json::array({choice})},
               {"created", job.meta.created},
               {"model", job.meta.model},
               {"system_fingerprint", job.meta.fingerprint},
               {"object", job.chat ? "chat.completion" : "text_completion"},
               {"usage", usage_json(r)},
               {"id", job.meta.id},
               {"timings", timings_json(r)}};
  send_json(res, 200, body);
  return true;
}

}  // namespace gem::server
