// gem serve: the OpenAI-compatible HTTP/SSE server (src/server) over one model. The socket is
// bound and answering (/health 503 "Loading model", /props with "is_loading": true) before the
// weights load. Flags follow llama-server's names and meanings where gem has the feature
// (README "gem serve flags" lists them all): the request defaults (-n, --temp, --top-k, ...,
// --reasoning-format, --reasoning-budget, --chat-template-kwargs), -ctk/-ctv for the KV type,
// --metrics, --slots, -np (sequence slots, continuous batching), --alias. Flags that tune what
// gem decides itself (-ngl, -fa, --jinja, -b, --mlock, --no-mmap, -cb) are accepted with a
// one-line notice. llama-server's multi-letter short flags (-ngl, -fa, -ctk, -np, ...) reach
// CLI11 as their long forms (main.cc). gem additions: --backend auto|cpu|cuda|scripted:FILE,
// --max-body, --queue, --tile, --reference, and the transport's bounds: --header-timeout,
// --body-timeout, --keep-alive-timeout, --max-connections, --max-json-depth, --cors,
// --shutdown-timeout.
//
// Signals: the first SIGINT/SIGTERM/SIGHUP stops accepting and gives running requests
// --shutdown-timeout seconds, then cuts the rest (streams end with an error event and [DONE]);
// a second signal exits at once. Exit status: 0 after a clean drain, 3 when requests had to be
// cut at the end of the grace period, 128 + the signal number on a second signal (or a signal
// while the model loads). `--backend scripted:FILE` is TEST-ONLY: it replaces the model's
// forward with runtime/scripted_backend.h (tests/e2e and scripts/soak.sh use it).
#include <pthread.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/backend_flags.h"
#include "cli/build_info.h"
#include "base/log.h"
#include "base/status.h"
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

// A comma-separated list (--cors, --alias): items trimmed of spaces and trailing slashes.
std::vector<std::string> split_list(const std::string& s) {
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
  // Option groups, in --help order.
  const std::string kModel = "Model and context";
  const std::string kNetwork = "Network and access";
  const std::string kDefaults = "Request defaults (llama-server's flags; a request's own fields win)";
  const std::string kEndpoints = "Endpoints and slots";
  const std::string kLimits = "Limits and timeouts";
  const std::string kIgnored = "Accepted for llama-server command lines, with no effect (a notice says so)";

  app.add_option("-m,--model", a.model, "Gemma 4 GGUF to serve")->required()->group(kModel);
  app.add_option("-c,--ctx-size", a.n_ctx,
                 "context size in tokens (default 0: the model's, at most 32768)")->group(kModel);
  app.add_option_function<std::string>(
         "--kv-type", [&a](const std::string& v) { a.kv_type = v, a.kv_type_given = true; },
         "KV cache storage: f32, f16 (default) or f16-full")
      ->group(kModel);
  app.add_option("--cache-type-k", a.cache_type_k,
                 "-ctk: llama-server's name for --kv-type; -ctk and -ctv must agree (f32, f16, f16-full)")
      ->group(kModel);
  app.add_option("--cache-type-v", a.cache_type_v, "-ctv: see --cache-type-k")->group(kModel);
  app.add_option("-t,--threads", a.n_threads, "CPU threads (default 0: all)")->group(kModel);
  app.add_option("--tile,--ubatch-size", a.tile,
                 "-ub: prompt tokens evaluated per layer pass (default 256)")->group(kModel);
  app.add_option("--backend", a.backend,
                 "auto (CUDA when a GPU is present), cpu, cuda, or scripted:FILE (test-only "
                 "scripted outputs, see runtime/scripted_backend.h)")->group(kModel);
  app.add_flag("--reference", a.reference, "CPU: the plain scalar reference path")->group(kModel);
  add_mtp_flags(app, a.mtp, kModel);
  app.add_option("-a,--alias", a.alias,
                 "model name in /v1/models and responses (default: file stem); comma-separated "
                 "names add aliases, the first is the id")->group(kModel);

  app.add_option("--host", a.host, "address to bind (default 127.0.0.1: loopback only)")->group(kNetwork);
  if (with_port) {
    app.add_option("--port", a.port, "port to listen on (default 8080; 0: any free port)")->group(kNetwork);
  }
  app.add_option("--api-key", a.api_key,
                 "require this key (Authorization: Bearer or X-Api-Key); /health is exempt. "
                 "Visible in ps: prefer --api-key-file or GEM_API_KEY / LLAMA_API_KEY")->group(kNetwork);
  app.add_option("--api-key-file", a.api_key_file,
                 "read the required key from the first line of this file")->group(kNetwork);
  app.add_option("--cors", a.cors,
                 "comma-separated browser origins allowed to call the API (e.g. "
                 "http://localhost:3000; * for any); others sending Origin get 403")->group(kNetwork);
  app.add_flag("--no-webui", a.no_webui, "do not serve the chat page at / (then / answers 404)")
      ->group(kNetwork);

  app.add_option("-n,--n-predict", a.n_predict,
                 "max tokens of a reply when the request sets none (default -1: until the end "
                 "of the turn or a full context)")->group(kDefaults);
  app.add_option_function<float>("--temp", [&a](const float& v) { a.temp = v; },
                                 "temperature (default: the model's recommendation, else 1.0; 0: greedy)")
      ->group(kDefaults);
  app.add_option_function<int>("--top-k", [&a](const int& v) { a.top_k = v; },
                               "top-k (default: the model's, else 64; 0: off)")->group(kDefaults);
  app.add_option_function<float>("--top-p", [&a](const float& v) { a.top_p = v; },
                                 "top-p (default: the model's, else 0.95; 1: off)")->group(kDefaults);
  app.add_option_function<float>("--min-p", [&a](const float& v) { a.min_p = v; },
                                 "min-p (default: the model's, else 0: off)")->group(kDefaults);
  app.add_option_function<int64_t>("-s,--seed", [&a](const int64_t& v) { a.seed = v; },
                                   "random seed (default -1: a random one per request)")->group(kDefaults);
  app.add_option_function<float>("--repeat-penalty", [&a](const float& v) { a.repeat_penalty = v; },
                                 "repeat penalty over the last --repeat-last-n tokens (default 1: off)")
      ->group(kDefaults);
  app.add_option_function<int>("--repeat-last-n", [&a](const int& v) { a.repeat_last_n = v; },
                               "tokens the penalties look back over (default 64; 0: off, -1: all)")
      ->group(kDefaults);
  app.add_option_function<float>("--presence-penalty", [&a](const float& v) { a.presence_penalty = v; },
                                 "presence penalty (default 0: off)")->group(kDefaults);
  app.add_option_function<float>("--frequency-penalty", [&a](const float& v) { a.frequency_penalty = v; },
                                 "frequency penalty (default 0: off)")->group(kDefaults);
  app.add_option("--reasoning-format", a.reasoning_format,
                 "how the model's thinking is returned: auto or deepseek (reasoning_content, the "
                 "default), none (left in content with its markers), deepseek-legacy (both)")
      ->check(CLI::IsMember({"auto", "none", "deepseek", "deepseek-legacy"}))->group(kDefaults);
  app.add_option("--reasoning-budget", a.reasoning_budget,
                 "thinking budget in tokens: -1 unlimited (default), 0 thinking off, N: the "
                 "thought is closed after N tokens")->group(kDefaults);
  app.add_option("--chat-template-kwargs", a.chat_template_kwargs,
                 "JSON object of template variables, e.g. '{\"enable_thinking\":false}' (the one "
                 "Gemma 4's template reads)")->group(kDefaults);

  app.add_flag("--metrics", a.metrics, "serve Prometheus metrics at GET /metrics")->group(kEndpoints);
  app.add_flag("--slots,!--no-slots", a.slots,
               "GET /slots: the slot's state (on by default; --no-slots answers 501)")->group(kEndpoints);
  app.add_option("--parallel", a.n_parallel,
                 "-np: sequence slots, requests served at once with continuous batching, each "
                 "slot with its own -c context and prefix cache (default -1: 8 on CUDA, fewer "
                 "when the memory does not hold 8 caches; 1 on the CPU)")->group(kEndpoints);
  app.add_option("--queue", a.queue,
                 "requests that may wait behind the running ones (default 8; more get 503)")->group(kEndpoints);

  app.add_option("--max-body", a.max_body, "largest request body (default 16M; K/M/G suffixes)")->group(kLimits);
  app.add_option("--max-json-depth", a.max_json_depth,
                 "deepest nesting of arrays/objects accepted in a request (default 64)")->group(kLimits);
  app.add_option("--max-connections", a.max_connections,
                 "open connections; at the limit the oldest idle one is closed (default 1024)")->group(kLimits);
  app.add_option("--timeout", a.timeout_s,
                 "longest wait for a client to take response bytes, seconds (default 600)")->group(kLimits);
  app.add_option("--header-timeout", a.header_timeout_s,
                 "seconds a client has to send the request line and headers (default 10)")->group(kLimits);
  app.add_option("--body-timeout", a.body_timeout_s,
                 "seconds a client has to send the body after the headers (default 60)")->group(kLimits);
  app.add_option("--keep-alive-timeout", a.keep_alive_s,
                 "seconds an idle keep-alive connection stays open (default 5)")->group(kLimits);
  app.add_option("--sse-ping-interval", a.ping_s,
                 "longest SSE silence in seconds before a keep-alive comment (default 10)")->group(kLimits);
  app.add_option("--shutdown-timeout", a.shutdown_timeout_s,
                 "on SIGTERM/SIGINT, seconds running requests get to finish (default 5), then "
                 "streams end with an error event and [DONE]; a second signal exits at once. "
                 "Exit status: 0 clean drain, 3 requests cut, 128+N on a second signal N")->group(kLimits);
  app.add_flag("-v,--verbose", a.verbose, "debug logging")->group(kLimits);

  // Flags that tune what gem decides itself: accepted so llama-server command lines run
  // unchanged, each with a one-line notice.
  auto notice = [&a](std::string text) { a.notices.push_back(std::move(text)); };
  app.add_option_function<std::string>(
         "--n-gpu-layers,--gpu-layers",
         [notice](const std::string&) {
           notice("-ngl is ignored: the CUDA backend always holds the whole model on the GPU");
         },
         "-ngl N: ignored (the CUDA backend holds the whole model)")
      ->group(kIgnored);
  app.add_option_function<std::string>(
         "--flash-attn",
         [notice](const std::string&) {
           notice("-fa is ignored: gem's attention kernels are always fused (flash-style)");
         },
         "-fa [on|off|auto]: ignored (attention is always fused)")
      ->expected(0, 1)
      ->check(CLI::IsMember({"on", "off", "auto", "true", "false", "1", "0", "enabled", "disabled"}))
      ->group(kIgnored);
  app.add_flag_function("--jinja,--no-jinja",
                        [notice](int64_t) {
                          notice("--jinja/--no-jinja are ignored: gem renders Gemma 4's chat "
                                 "template natively, byte for byte");
                        },
                        "ignored (the chat template is rendered natively)")->group(kIgnored);
  app.add_option_function<int>(
         "-b,--batch-size",
         [notice](const int&) {
           notice("-b is ignored: prompts are evaluated in tiles of --tile (-ub) tokens");
         },
         "ignored (see --tile / -ub)")->group(kIgnored);
  app.add_flag_function("--mlock",
                        [notice](int64_t) { notice("--mlock is ignored: weights stay memory-mapped"); },
                        "ignored")->group(kIgnored);
  app.add_flag_function("--no-mmap",
                        [notice](int64_t) {
                          notice("--no-mmap is ignored: gem always maps the file (CPU weights are "
                                 "repacked into memory at load)");
                        },
                        "ignored")->group(kIgnored);
  app.add_option_function<std::string>(
         "--slot-save-path",
         [notice](const std::string&) {
           notice("--slot-save-path is ignored: gem keeps each slot's prefix cache in memory only "
                  "(POST /slots/ID?action=... answers 501)");
         },
         "DIR: ignored (no slot save/restore)")->group(kIgnored);
  app.add_flag_function("--cont-batching,--no-cont-batching",
                        [notice](int64_t) {
                          notice("-cb/--cont-batching is ignored: with -np > 1 batching is always "
                                 "continuous");
                        },
                        "-cb / -nocb: ignored")->group(kIgnored);
}

void print_notices(const char* command, const ServeArgs& a) {
  for (const std::string& n : a.notices) std::fprintf(stderr, "gem %s: %s\n", command, n.c_str());
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
  if (a.n_predict < -1) return errorf("-n %d: expected -1 (no limit) or a token count >= 0", a.n_predict);
  if ((a.n_parallel < 1 && a.n_parallel != -1) || a.n_parallel > kMaxSlots) {
    return errorf("--parallel %d: expected 1-%d (or -1: the default, from memory)", a.n_parallel,
                  kMaxSlots);
  }
  if (a.reasoning_budget < -1) {
    return errorf("--reasoning-budget %d: expected -1 (unlimited), 0 (thinking off) or a token count",
                  a.reasoning_budget);
  }
  auto in_range = [](const std::optional<float>& v, float lo, float hi) {
    return !v || (std::isfinite(*v) && *v >= lo && *v <= hi);
  };
  if (!in_range(a.temp, 0.0f, 100.0f)) return errorf("--temp %g: expected 0-100", static_cast<double>(*a.temp));
  if (!in_range(a.top_p, 0.0f, 1.0f)) return errorf("--top-p %g: expected 0-1", static_cast<double>(*a.top_p));
  if (!in_range(a.min_p, 0.0f, 1.0f)) return errorf("--min-p %g: expected 0-1", static_cast<double>(*a.min_p));
  if (!in_range(a.repeat_penalty, 0.0f, 100.0f)) {
    return errorf("--repeat-penalty %g: expected 0-100", static_cast<double>(*a.repeat_penalty));
  }
  if (!in_range(a.presence_penalty, -2.0f, 2.0f)) {
    return errorf("--presence-penalty %g: expected -2 to 2", static_cast<double>(*a.presence_penalty));
  }
  if (!in_range(a.frequency_penalty, -2.0f, 2.0f)) {
    return errorf("--frequency-penalty %g: expected -2 to 2", static_cast<double>(*a.frequency_penalty));
  }
  if (a.top_k && *a.top_k < -1) return errorf("--top-k %d: expected >= 0 (0: off)", *a.top_k);
  if (a.repeat_last_n && *a.repeat_last_n < -1) {
    return errorf("--repeat-last-n %d: expected -1 (all), 0 (off) or a token count", *a.repeat_last_n);
  }
  bool thinking = true;
  if (!a.chat_template_kwargs.empty()) {
    const nlohmann::json kw = nlohmann::json::parse(a.chat_template_kwargs, nullptr, false);
    if (kw.is_discarded() || !kw.is_object()) {
      return errorf("--chat-template-kwargs %s: expected a JSON object such as "
                    "'{\"enable_thinking\":false}'", a.chat_template_kwargs.substr(0, 100).c_str());
    }
    for (auto it = kw.begin(); it != kw.end(); ++it) {
      if (it.key() == "enable_thinking") {
        if (!it->is_boolean()) {
          return errorf("--chat-template-kwargs: enable_thinking: expected true or false, got %s",
                        it->dump().substr(0, 40).c_str());
        }
        thinking = it->get<bool>();
      } else {
        std::fprintf(stderr, "gem serve: --chat-template-kwargs: \"%s\" is not a variable of "
                     "Gemma 4's chat template; ignored\n", it.key().substr(0, 64).c_str());
      }
    }
  }
  server::ServerOptions o;
  o.host = a.host;
  o.port = a.port;
  o.api_key = a.api_key;
  for (const std::string& name : split_list(a.alias)) o.aliases.push_back(name);
  o.model_name = o.aliases.empty() ? model_stem(a.model) : o.aliases.front();
  o.model_path = a.model;
  o.n_ctx = a.n_ctx;  // 0 until the GGUF header says (load_into)
  o.n_predict = a.n_predict;
  o.sampling.temperature = a.temp;
  o.sampling.top_k = a.top_k;
  o.sampling.top_p = a.top_p;
  o.sampling.min_p = a.min_p;
  o.sampling.repeat_penalty = a.repeat_penalty;
  o.sampling.repeat_last_n = a.repeat_last_n;
  o.sampling.presence_penalty = a.presence_penalty;
  o.sampling.frequency_penalty = a.frequency_penalty;
  if (a.seed && *a.seed >= 0) o.sampling.seed = static_cast<uint64_t>(*a.seed);
  server::parse_reasoning_format(a.reasoning_format, &o.reasoning_format);
  o.reasoning_budget = a.reasoning_budget;
  o.enable_thinking = thinking;
  o.metrics = a.metrics;
  o.slots = a.slots;
  o.n_parallel = a.n_parallel > 0 ? a.n_parallel : kDefaultSlotsCuda;  // sizes the worker pool
  o.max_body_bytes = max_body;
  o.max_queue = a.queue;
  o.timeout_s = a.timeout_s;
  o.header_timeout_s = a.header_timeout_s;
  o.body_timeout_s = a.body_timeout_s;
  o.keep_alive_s = a.keep_alive_s;
  o.max_connections = a.max_connections;
  o.max_json_depth = a.max_json_depth;
  o.cors_origins = split_list(a.cors);
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
  std::string kv_type = a.kv_type;
  GEM_RETURN_IF_ERROR(resolve_cache_types(a.cache_type_k, a.cache_type_v, a.kv_type_given, &kv_type));
  GEM_ASSIGN_OR_RETURN(model::KvType kv, model::parse_kv_type(kv_type));
  GEM_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::load_model(a.model));
  BackendOptions bo;
  bo.n_ctx = a.n_ctx > 0 ? a.n_ctx : std::min(m->config.context_length > 0 ? m->config.context_length : 32768, 32768);
  {
    // What /props and /v1/models can say while the tokenizer and the weights load.
    server::ModelInfo info;
    info.n_ctx = bo.n_ctx;
    if (auto t = m->file->get_string("tokenizer.chat_template"); t.ok()) info.chat_template = std::string(*t);
    info.temperature = m->config.sampling_temp;
    info.top_k = m->config.sampling_top_k;
    info.top_p = m->config.sampling_top_p;
    info.min_p = m->config.sampling_min_p;
    info.n_vocab = m->config.n_vocab;
    running.server->set_model_info(std::move(info));
  }
  GEM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::from_gguf(*m->file));
  bo.kv_type = kv;
  bo.n_threads = a.n_threads;
  bo.n_tile = a.tile;
  bo.reference = a.reference;
  std::unique_ptr<Backend> backend;
  if (a.backend.rfind("scripted:", 0) == 0) {
    GEM_LOG_WARN("--backend %s: TEST-ONLY scripted outputs, the model's weights are not used",
                 a.backend.c_str());
    if (a.n_parallel > 1) {
      return errorf("--parallel %d: the scripted backend holds one sequence; use -np 1",
                    a.n_parallel);
    }
    GEM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::ScriptedBackend> sb,
                         runtime::make_scripted_backend(a.backend.substr(9), *tok, bo));
    backend = std::move(sb);
  } else if (a.backend == "cpu" || a.backend == "cuda" || a.backend == "auto") {
    // The same choice as gem run/bench (cli/backend_flags.h).
    BackendFlags f;
    f.backend = a.backend;
    f.n_ctx = bo.n_ctx;
    f.kv_type = kv_type;
    f.n_threads = a.n_threads;
    f.n_tile = a.tile;
    f.reference = a.reference;
    f.n_slots = a.n_parallel;
    int n_slots = a.n_parallel;
    if (a.n_parallel > 0) {
      GEM_ASSIGN_OR_RETURN(backend, make_backend(*m, f));
    } else {
      GEM_ASSIGN_OR_RETURN(backend, make_backend_default_slots(*m, f, &n_slots));
    }
    GEM_LOG_INFO("slots: %d (-np), each of context %d, KV cache %.1f MiB in all", n_slots,
                 bo.n_ctx, static_cast<double>(model::kv_cache_bytes(m->plan, bo.n_ctx, kv, n_slots)) /
                               (1024.0 * 1024.0));
  } else {
    return errorf("--backend %s: expected auto, cpu, cuda or scripted:FILE", a.backend.c_str());
  }
  std::string chat_template;
  if (auto t = m->file->get_string("tokenizer.chat_template"); t.ok()) chat_template = std::string(*t);
  auto engine = std::make_unique<runtime::Engine>(std::move(m), std::move(backend), std::move(tok));
  auto drafter = make_mtp_drafter(engine->backend(), a.mtp);
  if (!drafter.ok()) return drafter.status();
  if (*drafter) {
    running.server->set_drafter(std::move(drafter).value(), a.mtp.draft_max, a.mtp.draft_min);
    GEM_LOG_INFO("mtp: %s drafts %d..%d tokens a round", a.mtp.mtp.c_str(), a.mtp.draft_min,
                 a.mtp.draft_max);
  }
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
  if (Status st = resolve_cache_types(a.cache_type_k, a.cache_type_v, a.kv_type_given, &a.kv_type); !st.ok()) {
    return fail("serve", st.message());
  }
  print_notices("serve", a);
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
  const std::vector<std::string> names = split_list(a.alias);
  std::fprintf(stderr, "gem serve: ready in %.1f s: model \"%s\", context %d, backend %s\n",
               timer.seconds(), names.empty() ? model_stem(a.model).c_str() : names.front().c_str(),
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
