// What `gem serve` and `gem agent` share (defined in cmd_serve.cc): the server flags, which mirror
// llama-server's names where users look for them, and starting/loading/stopping a server.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "cli/backend_flags.h"
#include "cli/mtp_flags.h"
#include "server/server.h"

namespace gem::cli {

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int n_ctx = 0;            // 0: the model's training context, at most 32768
  int n_threads = 0;        // 0: all hardware threads
  std::string kv_type = kDefaultKvType;
  std::string alias;
  std::string api_key;       // --api-key, or resolve_api_key() from a file or the environment
  std::string api_key_file;
  std::string backend = "auto";  // auto | cpu | cuda | scripted:FILE (test-only)
  int timeout_s = 600;
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  double keep_alive_s = 5;
  double shutdown_timeout_s = 5;
  int max_connections = 1024;
  int max_json_depth = 64;
  std::string cors;  // comma-separated origins allowed from browsers besides the server's own
  std::string max_body = "16M";
  int queue = 8;
  int tile = 256;
  bool reference = false;
  int ping_s = 10;
  bool verbose = false;
  bool no_webui = false;    // --no-webui: no chat page at /
  bool kv_type_given = false;          // --kv-type was on the command line
  std::string cache_type_k, cache_type_v;  // -ctk / -ctv: llama-server's names for --kv-type

  // Request defaults, llama-server's flags (applied when a request leaves the field out).
  int n_predict = -1;                  // -n: max tokens (-1: until end of turn or full context)
  std::optional<float> temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
  std::optional<int> top_k, repeat_last_n;
  std::optional<int64_t> seed;
  std::string reasoning_format = "auto";  // none | deepseek | deepseek-legacy | auto
  int reasoning_budget = -1;           // -1 unlimited, 0 thinking off, N thought tokens
  std::string chat_template_kwargs;    // JSON object; enable_thinking is the key Gemma reads
  bool metrics = false;                // --metrics: GET /metrics
  bool slots = true;                   // --slots / --no-slots: GET /slots
  int n_parallel = -1;                 // -np: sequence slots (-1: chosen from memory, make_backend_default_slots)
  MtpFlags mtp;                        // --mtp, --no-mtp, --draft-max, --draft-min

  // One-line notices for flags accepted for llama-server compatibility that change nothing here,
  // printed when the server starts.
  std::vector<std::string> notices;
};

// Adds the server flags to `app`, grouped for --help; `with_port` is false for `gem agent` (it
// picks a free port).
void add_serve_options(CLI::App& app, ServeArgs& args, bool with_port);
// Prints args.notices, one line each, prefixed with "gem COMMAND: ".
void print_notices(const char* command, const ServeArgs& args);

// The API key from --api-key, --api-key-file or the environment (GEM_API_KEY, then
// LLAMA_API_KEY, llama-server's), into args.api_key. Two sources given is an error; an
// unreadable or empty key file is an error naming it.
Status resolve_api_key(ServeArgs& args);

// A running server: bound and answering (503 while loading) until stop().
struct RunningServer {
  std::unique_ptr<server::Server> server;
  std::thread thread;
  void stop();
};

// Binds and starts answering. Errors: bad flags, a port in use.
Result<std::unique_ptr<RunningServer>> start_server(const ServeArgs& args);
// Loads the model, tokenizer and backend, then installs the engine (the server turns ready).
Status load_into(const ServeArgs& args, RunningServer& running);

}  // namespace gem::cli
