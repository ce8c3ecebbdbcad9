// gem's HTTP server (server.h). Threads: cpp-httplib's pool runs every handler; a chat request
// holds the engine (EngineGate, FIFO) for its whole run, so GET handlers on other pool threads
// never wait on it. A disconnect is noticed by polling the request's socket (found by its
// address pair: cpp-httplib 0.11 does not expose it) at every prompt tile and token, and by a
// per-request monitor thread that also writes SSE keep-alive comments during long tiles.
//
// tool_choice (chat/constraint.h make_tool_constraint): "none" keeps the tools declared in the prompt (as
// llama.cpp does) but bans <|tool_call>; "required" lets the model think first, then forces
// <|tool_call> if it has not opened one, and bans end-of-turn until a call was made; a named
// function additionally forces the text "call:NAME{" after <|tool_call> and ends the turn with
// <|tool_response> once that call closes. The arguments are always the model's own.
#include "server/server.h"

#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <ctime>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/log.h"
#include "base/timer.h"
#include "chat/chat.h"
#include "chat/parser.h"
#include "server/api.h"
#include "server/webui/index_html.h"  // generated from src/server/webui/index.html

namespace gem::server {

using nlohmann::json;

namespace {

std::string dump(const json& j) {
  // Invalid UTF-8 must never throw: it is replaced (U+FFFD).
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json; charset=utf-8");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_json(e));
  if (e.status == 503) res.set_header("Retry-After", "5");
}

ApiError loading_error() {
  ApiError e;
  e.status = 503;
  e.type = "unavailable_error";
  e.message = "Loading model";
  return e;
}

bool secure_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

int port_of(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return -1;
}

// Serialised writes to one response's DataSink (the generating thread and the monitor share it).
class SinkWriter {
 public:
  explicit SinkWriter(httplib::DataSink* sink) : sink_(sink), last_(now_seconds()) {}
  bool write(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (sink_ == nullptr || failed_) return false;
    if (!sink_->write(s.data(), s.size())) failed_ = true;
    last_ = now_seconds();
    return !failed_;
  }
  bool event(const json& j) { return write("data: " + dump(j) + "\n\n"); }
  bool comment(const std::string& c) { return write(": " + c + "\n\n"); }
  double silent_for() const {
    std::lock_guard<std::mutex> lock(mu_);
    return now_seconds() - last_;
  }
  bool failed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }
  bool streaming() const { return sink_ != nullptr; }

 private:
  mutable std::mutex mu_;
  httplib::DataSink* sink_;
  bool failed_ = false;
  double last_;
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

int find_connection_fd(const std::string& /*local_addr*/, int local_port,
                       const std::string& /*remote_addr*/, int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof(local), pl = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (port_of(local) == local_port && port_of(peer) == remote_port) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

// ---------------------------------------------------------------------------------------------
// EngineGate

uint64_t EngineGate::enter() {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(queue_.size()) >= max_queue_ + (running_ ? 0 : 1)) return 0;
  const uint64_t t = ++next_;
  queue_.push_back(t);
  return t;
}

bool EngineGate::wait_turn(uint64_t ticket, double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool mine = cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] {
    return !running_ && !queue_.empty() && queue_.front() == ticket;
  });
  if (!mine) return false;
  queue_.pop_front();
  running_ = true;
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
    running_ = false;
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
  ChatRequest req;
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
    : options_(std::move(options)), http_(std::make_unique<httplib::Server>()),
      gate_(options_.max_queue) {
  const int n_threads =
      options_.n_http_threads > 0 ? options_.n_http_threads : options_.max_queue + 9;
  http_->new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(options_.timeout_s, 0);
  http_->set_write_timeout(options_.timeout_s, 0);
  http_->set_keep_alive_timeout(5);
  routes();
}

Server::~Server() { stop(); }

Status Server::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ <= 0) return errorf("cannot bind %s on any port", options_.host.c_str());
  } else {
    if (!http_->bind_to_port(options_.host, options_.port)) {
      return errorf("cannot bind %s:%d (in use, or not an address of this machine)",
                    options_.host.c_str(), options_.port);
    }
    port_ = options_.port;
  }
  return ok_status();
}

void Server::set_engine(std::unique_ptr<runtime::Engine> engine, std::string chat_template) {
  engine_ = std::move(engine);
  chat_template_ = std::move(chat_template);
  options_.n_ctx = engine_->n_ctx();
  ready_.store(true);
}

bool Server::run() {
  run_entered_ = true;
  bool ok = true;
  if (!stop_requested_) ok = http_->listen_after_bind();
  run_exited_ = true;
  return ok;
}

void Server::stop() {
  stop_requested_ = true;
  if (!http_) return;
  // run() may be between its check and the listen loop: wait until it listens (then stop it)
  // or has returned. A run() not yet entered sees the request and returns at once.
  while (run_entered_ && !run_exited_ && !http_->is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (http_->is_running()) http_->stop();
}

SamplingParams Server::default_sampling() const {
  SamplingParams s;  // temperature 1.0, top_k 64, top_p 0.95 (Gemma's recommendation)
  s.min_p = 0.0f;
  if (engine_ && engine_->has_model()) {
    const model::Config& c = engine_->config();
    if (c.sampling_temp) s.temperature = *c.sampling_temp;
    if (c.sampling_top_k) s.top_k = *c.sampling_top_k;
    if (c.sampling_top_p) s.top_p = *c.sampling_top_p;
    if (c.sampling_min_p) s.min_p = *c.sampling_min_p;
  }
  return s;
}

void Server::routes() {
  httplib::Server& h = *http_;
  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.headers.size() > 100) {
      send_error(res, bad_request("too many request headers (more than 100)"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (options_.api_key.empty() || req.path == "/health" || req.path == "/v1/health" ||
        (options_.webui && req.path == "/" && req.method != "POST")) {  // the page holds no data
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::string key;
    const std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
    if (key.empty()) key = req.get_header_value("X-Api-Key");
    if (!secure_equal(key, options_.api_key)) {
      ApiError e;
      e.status = 401;
      e.type = "authentication_error";
      e.message = "Invalid API Key";
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors produced by cpp-httplib itself (404, 413, 400 for a broken request line) get the
  // OpenAI error shape; responses that already carry a body are left alone.
  h.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.type = "not_found_error";
      e.message = "File Not Found";
    } else if (res.status == 413) {
      e.message = "request body too large";
    } else {
      e.message = "bad request";
    }
    send_json(res, res.status, error_json(e));
    return httplib::Server::HandlerResponse::Handled;
  }));
  h.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                             std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    GEM_LOG_ERROR("server: unexpected exception: %s", what.c_str());
    ApiError e;
    e.status = 500;
    e.type = "server_error";
    e.message = "internal error: " + what;
    send_error(res, e);
  });

  auto health = [this](const httplib::Request&, httplib::Response& res) {
    if (!ready()) {
      send_error(res, loading_error());
      return;
    }
    send_json(res, 200, json{{"status", "ok"}});
  };
  h.Get("/health", health);
  h.Get("/v1/health", health);

  // Answered from options alone, so it works while the model loads (hax's 2 s budget).
  auto models = [this](const httplib::Request&, httplib::Response& res) {
    json meta = {{"n_ctx", options_.n_ctx}};
    if (ready() && engine_->has_model()) meta["n_vocab"] = engine_->config().n_vocab;
    json entry = {{"id", options_.model_name},
                  {"aliases", json::array({options_.model_name})},
                  {"tags", json::array()},
                  {"object", "model"},
                  {"created", static_cast<int64_t>(std::time(nullptr))},
                  {"owned_by", "gem"},
                  {"meta", meta}};
    send_json(res, 200, json{{"object", "list"}, {"data", json::array({entry})}});
  };
  h.Get("/v1/models", models);
  h.Get("/models", models);

  h.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    if (!ready()) {
      send_error(res, loading_error());
      return;
    }
    const SamplingParams s = default_sampling();
    // Floats printed as the decimal the user wrote (0.95, not 0.949999988).
    auto dec = [](float v) { return std::round(static_cast<double>(v) * 1e6) / 1e6; };
    json body = {
        {"default_generation_settings",
         {{"n_ctx", options_.n_ctx},
          {"params",
           {{"temperature", dec(s.temperature)},
            {"top_k", s.top_k},
            {"top_p", dec(s.top_p)},
            {"min_p", dec(s.min_p)},
            {"n_predict", -1},
            {"seed", -1}}}}},
        {"total_slots", 1},
        {"model_alias", options_.model_name},
        {"model_path", options_.model_path},
        {"modalities", {{"vision", false}, {"audio", false}, {"video", false}}},
        {"chat_template", chat_template_},
        {"bos_token", "<bos>"},
        {"eos_token", "<eos>"},
        {"build_info", "b" + options_.build_info},
        {"is_sleeping", false}};
    send_json(res, 200, body);
  });

  auto chat = [this](const httplib::Request& req, httplib::Response& res) { handle_chat(req, res); };
  h.Post("/v1/chat/completions", chat);
  h.Post("/chat/completions", chat);

  // --- Chat page (src/server/webui/index.html, embedded at build time; off with --no-webui) ---
  if (options_.webui) {
    h.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy", webui::kIndexCsp);
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Referrer-Policy", "no-referrer");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(webui::index_html().data(), webui::index_html().size(), "text/html; charset=utf-8");
    });
  }
  // --- end chat page ---
}

void Server::handle_chat(const httplib::Request& req, httplib::Response& res) {
  if (!ready()) {
    send_error(res, loading_error());
    return;
  }
  auto job = std::make_shared<Job>();
  job->server = this;
  ApiError err;
  if (!parse_chat_request(req.body, default_sampling(), &job->req, &err)) {
    send_error(res, err);
    return;
  }
  const ChatRequest& cr = job->req;
  // Message text is tokenized as text; n_history marks where the conversation ends (engine.h).
  if (!build_prompt(cr, engine_->tokenizer(), &job->prompt, &job->n_history, &err)) {
    send_error(res, err);
    return;
  }
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
  job->ticket = gate_.enter();
  if (job->ticket == 0) {
    ApiError e;
    e.status = 503;
    e.type = "unavailable_error";
    e.message = "the server is busy: the request queue is full, retry later";
    send_error(res, e);
    return;
  }
  thread_local std::mt19937_64 rng{std::random_device{}()};
  job->meta.id = "chatcmpl-" + random_alnum(rng, 32);
  job->meta.created = static_cast<int64_t>(std::time(nullptr));
  job->meta.model = options_.model_name;
  job->meta.fingerprint = "b" + options_.build_info;
  job->fd = find_connection_fd(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  n_requests_++;

  if (cr.stream) {
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream", [this, job](size_t /*offset*/, httplib::DataSink& sink) {
          const bool ok = run_job(*job, &sink, nullptr);
          if (ok) sink.done();
          return ok;
        });
    return;
  }
  if (!run_job(*job, nullptr, &res)) {
    res.status = 499;  // the client is gone; nothing will be read
    res.body.clear();
  }
}

bool Server::run_job(Job& job, httplib::DataSink* sink, httplib::Response* res) {
  SinkWriter writer(sink);
  const ChatRequest& cr = job.req;
  const bool streaming = sink != nullptr;

  // Wait for the engine (FIFO), watching the client and keeping the stream alive.
  while (!gate_.wait_turn(job.ticket, 0.25)) {
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
      job.holds_engine = false;
      job.server->gate_.release();
    }
  } release{job};

  runtime::Engine& engine = *engine_;
  std::atomic<bool> gone{false};
  if (streaming && !cr.return_progress &&
      !writer.event(chunk_json(job.meta, json{{"role", "assistant"}, {"content", nullptr}},
                               nullptr))) {
    return false;
  }

  chat::ParserOptions po;
  po.thinking = cr.enable_thinking;
  po.tools = !cr.tools.empty() && cr.tool_choice != ToolChoice::kNone;
  chat::OutputParser parser(engine.tokenizer(), po);
  thread_local std::mt19937_64 rng{std::random_device{}()};
  DeltaAssembler assembler(cr.stop, &rng);
  std::vector<chat::Event> events;
  std::vector<json> deltas;

  runtime::GenerateRequest greq;
  greq.prompt = job.prompt;
  greq.n_history = job.n_history;
  greq.sampling = cr.sampling;
  greq.max_tokens = cr.max_tokens;
  if (!cr.tools.empty()) {
    greq.constraint = chat::make_tool_constraint(cr.tool_choice, cr.tool_name,
                                                 cr.enable_thinking, engine.tokenizer());
  }

  const Timer timer;
  int progress_cache = -1;
  runtime::GenerateCallbacks cb;
  cb.on_prompt_progress = [&](int done, int total) {
    if (gone.load() || !connection_alive(job.fd)) {
      gone.store(true);
      return false;
    }
    if (!streaming) return true;
    if (cr.return_progress) {
      if (progress_cache < 0) progress_cache = done;
      json chunk = chunk_json(job.meta, json{{"role", "assistant"}, {"content", nullptr}}, nullptr);
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
  auto emit = [&](std::vector<json>& ds) {
    for (json& d : ds) {
      if (streaming && !writer.event(chunk_json(job.meta, d, nullptr))) gone.store(true);
    }
    ds.clear();
  };
  cb.on_token = [&](int32_t token) {
    if (gone.load() || !connection_alive(job.fd)) {
      gone.store(true);
      return false;
    }
    events.clear();
    parser.push(token, events);
    for (const chat::Event& e : events) {
      if (assembler.add(e, deltas)) stop_string = true;
    }
    emit(deltas);
    return !stop_string && !gone.load();
  };

  Result<runtime::GenerateResult> result = [&] {
    Monitor monitor(job.fd, &writer, options_.heartbeat_s, &gone);
    return engine.generate(greq, cb);
  }();

  if (!result.ok()) {
    GEM_LOG_ERROR("%s: %s", job.meta.id.c_str(), result.message().c_str());
    ApiError e;
    e.status = 500;
    e.type = "server_error";
    e.message = result.message();
    if (streaming) {
      writer.event(error_json(e));
      return true;  // the body ends without [DONE] (protocol §9.2)
    }
    send_error(*res, e);
    return true;
  }
  const runtime::GenerateResult& r = *result;
  if (gone.load() || r.finish == runtime::FinishReason::kCancelledInPrompt) {
    GEM_LOG_INFO("%s: client disconnected (prompt %d, generated %d); state restored",
                 job.meta.id.c_str(), r.n_prompt, r.n_generated);
    return false;
  }
  const bool length = r.finish == runtime::FinishReason::kLength ||
                      r.finish == runtime::FinishReason::kContextFull;
  events.clear();
  parser.finish(length && !stop_string ? chat::StopCause::kLength : chat::StopCause::kEog, events);
  if (!stop_string) {
    for (const chat::Event& e : events) {
      if (assembler.add(e, deltas)) stop_string = true;
    }
  }
  assembler.flush(deltas);
  emit(deltas);
  const std::string reason = finish_reason(r.finish, stop_string, assembler.n_tool_calls());
  GEM_LOG_INFO("%s: prompt %d (cached %d) in %.2f s, generated %d in %.2f s (%.1f tok/s), %s",
               job.meta.id.c_str(), r.n_prompt, r.n_cached, r.prompt_seconds, r.n_generated,
               r.decode_seconds, r.decode_seconds > 0 ? r.n_generated / r.decode_seconds : 0.0,
               reason.c_str());

  if (streaming) {
    json fin = chunk_json(job.meta, json::object(), reason);
    if (!cr.include_usage) fin["timings"] = timings_json(r);
    if (!writer.event(fin)) return false;
    if (cr.include_usage) {
      json u = chunk_json(job.meta, json::object(), nullptr);
      u["choices"] = json::array();
      u["usage"] = usage_json(r);
      u["timings"] = timings_json(r);
      if (!writer.event(u)) return false;
    }
    return writer.write("data: [DONE]\n\n");
  }
  json body = {{"choices", json::array({json{{"finish_reason", reason},
                                             {"index", 0},
                                             {"message", assembler.message()}}})},
               {"created", job.meta.created},
               {"model", job.meta.model},
               {"system_fingerprint", job.meta.fingerprint},
               {"object", "chat.completion"},
               {"usage", usage_json(r)},
               {"id", job.meta.id},
               {"timings", timings_json(r)}};
  send_json(*res, 200, body);
  return true;
}

}  // namespace gem::server
