// gem serve: the OpenAI-compatible HTTP/SSE server (src/server) over one model. The socket is
// bound and answering (/health 503 "Loading model") before the weights load. Flags follow
// llama-server's names: -m/--model, --host, --port, -c/--ctx-size, -t/--threads, --kv-type
// (llama-server's -ctk/-ctv are spelled --cache-type-k here), --alias, --api-key, --timeout,
// --sse-ping-interval, --api-key-file (and LLAMA_API_KEY). gem additions: --backend
// auto|cpu|cuda|scripted:FILE, --max-body, --queue, --tile, --reference, and the transport's
// bounds: --header-timeout, --body-timeout, --keep-alive-timeout, --max-connections,
// --max-json-depth, --cors, --shutdown-timeout.
//
// Signals: the first SIGINT/SIGTERM/SIGHUP stops accepting and gives running requests
// --shutdown-timeout seconds, then cuts the rest (streams end with an error event and [DONE]);
// a second signal exits at once. Exit status: 0 after a clean drain, 3 when requests had to be
// cut at the end of the grace period, 128 + the signal number on a second signal (or a signal
// while the model loads). --n-gpu-layers/--gpu-layers are accepted and ignored (the CUDA backend
// always holds the whole model). `--backend scripted:FILE` is TEST-ONLY: it replaces the model's
// forward with runtime/scripted_backend.h (tests/e2e and scripts/soak.sh use it).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/backend_flags.h"
#include "cli/build_info.h"
#include "base/log.h"
#include "base/timer.h"
#include "cli/command.h"
#include "cli/serve_common.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/scripted_backend.h"
#include "tokenizer/tokenizer.h"

namespace gem::cli {

namespace {

Result<size_t> parse_size(const std::string& s) {
  if (s.empty()) return errorf("--max-body: empty size");
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &pos);
  } catch (...) {
    return errorf("--max-body %s: expected a byte count such as 16777216, 512K or 16M", s.c_str());
  }
  const std::string unit = s.substr(pos);
  unsigned long long mul = 1;
  if (unit == "K" || unit == "k" || unit == "KiB") mul = 1ull << 10;
  else if (unit == "M" || unit == "m" || unit == "MiB") mul = 1ull << 20;
  else if (unit == "G" || unit == "g" || unit == "GiB") mul = 1ull << 30;
  else if (!unit.empty()) return errorf("--max-body %s: unknown unit '%s' (K, M or G)", s.c_str(), unit.c_str());
  if (v == 0) return errorf("--max-body %s: must be positive", s.c_str());
  return static_cast<size_t>(v * mul);
}

std::vector<std::string> split_origins(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '/')) item.pop_back();
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string model_stem(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

}  // namespace

void add_serve_options(CLI::App& app, ServeArgs& a, bool with_port) {
  app.add_option("-m,--model", a.model, "Gemma 4 GGUF to serve")->required();
  app.add_option("--host", a.host, "address to bind (default 127.0.0.1: loopback only)");
  if (with_port) app.add_option("--port", a.port, "port to listen on (default 8080; 0: any free port)");
  app.add_option("-c,--ctx-size", a.n_ctx,
                 "context size in tokens (default 0: the model's, at most 32768)");
  app.add_option("-t,--threads", a.n_threads, "CPU threads (default 0: all)");
  app.add_option("--kv-type,--cache-type-k", a.kv_type, "KV cache storage: f32, f16 (default) or f16-full");
  app.add_option("--alias", a.alias, "model name in /v1/models and responses (default: file stem)");
  app.add_option("--api-key", a.api_key,
                 "require this key (Authorization: Bearer or X-Api-Key); /health is exempt. "
                 "Visible in ps: prefer --api-key-file or GEM_API_KEY / LLAMA_API_KEY");
  app.add_option("--api-key-file", a.api_key_file,
                 "read the required key from the first line of this file");
  app.add_option("--backend", a.backend,
                 "auto (CUDA when a GPU is present), cpu, cuda, or scripted:FILE (test-only "
                 "scripted outputs, see runtime/scripted_backend.h)");
  app.add_option("--timeout", a.timeout_s,
                 "longest wait for a client to take response bytes, seconds (default 600)");
  app.add_option("--header-timeout", a.header_timeout_s,
                 "seconds a client has to send the request line and headers (default 10)");
  app.add_option("--body-timeout", a.body_timeout_s,
                 "seconds a client has to send the body after the headers (default 60)");
  app.add_option("--keep-alive-timeout", a.keep_alive_s,
                 "seconds an idle keep-alive connection stays open (default 5)");
  app.add_option("--max-connections", a.max_connections,
                 "open connections; at the limit the oldest idle one is closed (default 1024)");
  app.add_option("--max-json-depth", a.max_json_depth,
                 "deepest nesting of arrays/objects accepted in a request (default 64)");
  app.add_option("--cors", a.cors,
                 "comma-separated browser origins allowed to call the API (e.g. "
                 "http://localhost:3000; * for any); others sending Origin get 403");
  app.add_option("--shutdown-timeout", a.shutdown_timeout_s,
                 "on SIGTERM/SIGINT, seconds running requests get to finish (default 5), then "
                 "streams end with an error event and [DONE]; a second signal exits at once. "
                 "Exit status: 0 clean drain, 3 requests cut, 128+N on a second signal N");
  app.add_option("--max-body", a.max_body, "largest request body (default 16M; K/M/G suffixes)");
  app.add_option("--queue", a.queue,
                 "requests that may wait behind the running one (default 8; more get 503)");
  app.add_option("--tile", a.tile, "prompt tokens evaluated per layer pass (default 256)");
  app.add_flag("--reference", a.reference, "CPU: the plain scalar reference path");
  app.add_option("--sse-ping-interval", a.ping_s,
                 "longest SSE silence in seconds before a keep-alive comment (default 10)");
  static int ignored_ngl = 0;
  app.add_option("--n-gpu-layers,--gpu-layers", ignored_ngl,
                 "accepted for llama-server compatibility and ignored");
  app.add_flag("--no-webui", a.no_webui, "do not serve the chat page at / (then / answers 404)");
  app.add_flag("-v,--verbose", a.verbose, "debug logging");
}

Status resolve_api_key(ServeArgs& a) {
  int sources = a.api_key.empty() ? 0 : 1;
  if (!a.api_key_file.empty()) {
    ++sources;
    std::ifstream f(a.api_key_file);
    if (!f) return errorf("--api-key-file %s: cannot read the file", a.api_key_file.c_str());
    std::string key;
    std::getline(f, key);
    while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) key.pop_back();
    if (key.empty()) return errorf("--api-key-file %s: the first line is empty", a.api_key_file.c_str());
    a.api_key = key;
  }
  if (sources > 1) return errorf("--api-key and --api-key-file: give one of them");
  if (sources == 0) {
    for (const char* var : {"GEM_API_KEY", "LLAMA_API_KEY"}) {
      const char* v = std::getenv(var);
      if (v != nullptr && *v != '\0') {
        a.api_key = v;
        break;
      }
    }
  }
  return ok_status();
}

void RunningServer::stop() {
  if (server) server->stop();
  if (thread.joinable()) thread.join();
}

Result<std::unique_ptr<RunningServer>> start_server(const ServeArgs& a) {
  GEM_ASSIGN_OR_RETURN(size_t max_body, parse_size(a.max_body));
  if (a.queue < 0) return errorf("--queue %d: must be >= 0", a.queue);
  if (a.timeout_s <= 0) return errorf("--timeout %d: must be positive", a.timeout_s);
  if (a.port < 0 || a.port > 65535) {
    return errorf("--port %d: out of range (expected 1-65535, or 0 for any free port)", a.port);
  }
  if (!(a.header_timeout_s > 0)) return errorf("--header-timeout %g: must be positive", a.header_timeout_s);
  if (!(a.body_timeout_s > 0)) return errorf("--body-timeout %g: must be positive", a.body_timeout_s);
  if (!(a.keep_alive_s > 0)) return errorf("--keep-alive-timeout %g: must be positive", a.keep_alive_s);
  if (!(a.shutdown_timeout_s >= 0)) {
    return errorf("--shutdown-timeout %g: must be >= 0", a.shutdown_timeout_s);
  }
  if (a.max_connections < 16) return errorf("--max-connections %d: must be >= 16", a.max_connections);
  if (a.max_json_depth < 8 || a.max_json_depth > 10000) {
    return errorf("--max-json-depth %d: expected 8-10000", a.max_json_depth);
  }
  if (a.ping_s <= 0) return errorf("--sse-ping-interval %d: must be positive", a.ping_s);
  if (a.tile <= 0) return errorf("--tile %d: must be positive", a.tile);
  if (a.n_ctx < 0) return errorf("-c %d: must be >= 0", a.n_ctx);
  server::ServerOptions o;
  o.host = a.host;
  o.port = a.port;
  o.api_key = a.api_key;
  o.model_name = a.alias.empty() ? model_stem(a.model) : a.alias;
  o.model_path = a.model;
  o.n_ctx = a.n_ctx > 0 ? a.n_ctx : 32768;
  o.max_body_bytes = max_body;
  o.max_queue = a.queue;
  o.timeout_s = a.timeout_s;
  o.header_timeout_s = a.header_timeout_s;
  o.body_timeout_s = a.body_timeout_s;
  o.keep_alive_s = a.keep_alive_s;
  o.max_connections = a.max_connections;
  o.max_json_depth = a.max_json_depth;
  o.cors_origins = split_origins(a.cors);
  o.heartbeat_s = a.ping_s;
  o.webui = !a.no_webui;
  o.build_info = std::string(GEM_VERSION) + "-" + build_commit();
  auto running = std::make_unique<RunningServer>();
  running->server = std::make_unique<server::Server>(o);
  GEM_RETURN_IF_ERROR(running->server->bind());
  server::Server* s = running->server.get();
  running->thread = std::thread([s] { s->run(); });
  return running;
}

Status load_into(const ServeArgs& a, RunningServer& running) {
  GEM_ASSIGN_OR_RETURN(model::KvType kv, model::parse_kv_type(a.kv_type));
  GEM_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::load_model(a.model));
  GEM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::from_gguf(*m->file));
  BackendOptions bo;
  bo.n_ctx = a.n_ctx > 0 ? a.n_ctx : std::min(m->config.context_length > 0 ? m->config.context_length : 32768, 32768);
  bo.kv_type = kv;
  bo.n_threads = a.n_threads;
  bo.n_tile = a.tile;
  bo.reference = a.reference;
  std::unique_ptr<Backend> backend;
  if (a.backend.rfind("scripted:", 0) == 0) {
    GEM_LOG_WARN("--backend %s: TEST-ONLY scripted outputs, the model's weights are not used",
                 a.backend.c_str());
    GEM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::ScriptedBackend> sb,
                         runtime::make_scripted_backend(a.backend.substr(9), *tok, bo));
    backend = std::move(sb);
  } else if (a.backend == "cpu" || a.backend == "cuda" || a.backend == "auto") {
    // The same choice as gem run/bench (cli/backend_flags.h).
    BackendFlags f;
    f.backend = a.backend;
    f.n_ctx = bo.n_ctx;
    f.kv_type = a.kv_type;
    f.n_threads = a.n_threads;
    f.n_tile = a.tile;
    f.reference = a.reference;
    GEM_ASSIGN_OR_RETURN(backend, make_backend(*m, f));
  } else {
    return errorf("--backend %s: expected auto, cpu, cuda or scripted:FILE", a.backend.c_str());
  }
  std::string chat_template;
  if (auto t = m->file->get_string("tokenizer.chat_template"); t.ok()) chat_template = std::string(*t);
  auto engine = std::make_unique<runtime::Engine>(std::move(m), std::move(backend), std::move(tok));
  running.server->set_engine(std::move(engine), std::move(chat_template));
  return ok_status();
}

namespace {

int run_serve(ServeArgs& a) {
  set_log_level(a.verbose ? LogLevel::kDebug : LogLevel::kInfo);
  // A client that hangs up mid-write must never kill the server.
  signal(SIGPIPE, SIG_IGN);
  // Termination signals go to one waiting thread; every other thread (created below) blocks them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  if (Status st = resolve_api_key(a); !st.ok()) return fail("serve", st.message());
  auto running = start_server(a);
  if (!running.ok()) return fail("serve", running.message());
  std::fprintf(stderr, "gem serve: listening on http://%s:%d (loading %s)%s\n", a.host.c_str(),
               (*running)->server->port(), a.model.c_str(),
               a.api_key.empty() ? "" : ", API key required");
  std::atomic<bool> loaded{false};
  std::atomic<bool> done{false};
  std::atomic<int> first_signal{0};
  RunningServer* rs = running->get();
  // The waiter sees every signal: the first starts the drain (on the main thread, below), the
  // second ends the process at once.
  std::thread waiter([&] {
    while (!done.load()) {
      timespec ts{0, 200 * 1000 * 1000};
      const int sig = sigtimedwait(&set, nullptr, &ts);
      if (sig <= 0) continue;
      if (!loaded.load()) {
        std::fprintf(stderr, "gem serve: signal %d while loading, exiting\n", sig);
        std::_Exit(128 + sig);  // nothing to drain while loading
      }
      if (first_signal.load() != 0) {
        std::fprintf(stderr, "gem serve: second signal %d, exiting at once\n", sig);
        std::_Exit(128 + sig);
      }
      first_signal.store(sig);
      std::fprintf(stderr,
                   "gem serve: signal %d: no new connections; running requests get %.1f s "
                   "(a second signal exits at once)\n",
                   sig, a.shutdown_timeout_s);
    }
  });
  Timer timer;
  Status st = load_into(a, *rs);
  if (!st.ok()) {
    done.store(true);
    waiter.join();
    rs->stop();
    return fail("serve", st.message());
  }
  loaded.store(true);
  std::fprintf(stderr, "gem serve: ready in %.1f s: model \"%s\", context %d, backend %s\n",
               timer.seconds(), a.alias.empty() ? std::filesystem::path(a.model).stem().c_str() : a.alias.c_str(),
               rs->server->engine()->n_ctx(), std::string(rs->server->engine()->backend().name()).c_str());
  while (first_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int n_cut = rs->server->shutdown(a.shutdown_timeout_s);
  if (rs->thread.joinable()) rs->thread.join();
  done.store(true);
  waiter.join();
  if (n_cut > 0) {
    std::fprintf(stderr, "gem serve: stopped; %d request(s) cut at the end of the grace period "
                 "(exit 3)\n", n_cut);
    return 3;
  }
  std::fprintf(stderr, "gem serve: stopped cleanly\n");
  return 0;
}

RunFn setup_serve(CLI::App& sub) {
  auto args = std::make_shared<ServeArgs>();
  add_serve_options(sub, *args, /*with_port=*/true);
  return [args] { return run_serve(*args); };
}

}  // namespace

GEM_COMMAND(serve, "serve a model over an OpenAI-compatible HTTP API (llama-server compatible)",
            setup_serve);

}  // namespace gem::cli
