// gem server benchmarks (CPU backend): (1) the server's per-token overhead against a plain
// engine loop (same model, greedy, same token count; the server's figure includes parsing, JSON
// and the SSE write of every token); (2) time to first token for a ~4096-token conversation
// extended by ~100 tokens, with and without prefix reuse.
//   gem_server_bench MODEL.gguf [threads] [tokens] [runs]
#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "base/log.h"
#include "base/timer.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

using nlohmann::json;
using namespace gem;

namespace {

std::unique_ptr<runtime::Engine> make_engine(const std::string& path, int n_ctx, int threads) {
  auto m = model::load_model(path);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.message().c_str());
    std::exit(1);
  }
  auto tok = Tokenizer::from_gguf(*(*m)->file);
  BackendOptions bo;
  bo.n_ctx = n_ctx;
  bo.n_threads = threads;
  auto b = cpu::make_cpu_backend(**m, bo);
  if (!tok.ok() || !b.ok()) {
    std::fprintf(stderr, "backend/tokenizer: %s %s\n", tok.message().c_str(), b.message().c_str());
    std::exit(1);
  }
  return std::make_unique<runtime::Engine>(std::move(*m), std::move(*b), std::move(*tok));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [threads] [tokens] [runs]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int n_tokens = argc > 3 ? std::atoi(argv[3]) : 64;
  const int runs = argc > 4 ? std::atoi(argv[4]) : 3;
  set_log_level(LogLevel::kWarn);

  // The server's engine and a plain one on the same file.
  auto plain = make_engine(path, 8192, threads);
  server::ServerOptions o;
  o.port = 0;
  o.model_name = "bench";
  server::Server srv(o);
  if (!srv.bind().ok()) return 1;
  std::thread th([&] { srv.run(); });
  srv.set_engine(make_engine(path, 8192, threads), "");
  httplib::Client cli("127.0.0.1", srv.port());
  cli.set_read_timeout(600, 0);

  const json msgs = json::array({{{"role", "user"}, {"content", "Write a long story about a lighthouse keeper."}}});
  // The plain loop decodes after a prompt of the same length as the server's (decode cost
  // depends on the position, not on the token ids), with the same number of tokens.
  std::vector<double> plain_ms, server_ms, inrun_overhead, inrun_cpu;
  for (int r = 0; r < runs; ++r) {
    json body = {{"messages", msgs}, {"stream", true}, {"max_tokens", n_tokens}, {"temperature", 0},
                 {"stream_options", {{"include_usage", true}}}, {"reasoning_effort", "none"}};
    srv.engine()->clear_cache();
    auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
    if (!res || res->status != 200) return 1;
    json usage;
    size_t pos = res->body.rfind("\"usage\"");
    size_t line = res->body.rfind("data: {", pos);
    usage = json::parse(res->body.substr(line + 6, res->body.find('\n', line) - line - 6));
    const double ms = usage["timings"]["predicted_ms"].get<double>();
    const int n = usage["timings"]["predicted_n"].get<int>();
    const double cb_ms = usage["timings"]["predicted_server_ms"].get<double>();
    const double cb_cpu_ms = usage["timings"]["predicted_server_cpu_ms"].get<double>();
    inrun_cpu.push_back(cb_cpu_ms / (ms - cb_ms) * 100.0);
    server_ms.push_back(ms / n);
    // Same run, no noise between runs: the share of the decode loop spent in the server's
    // per-token work (parser, JSON, SSE write) relative to the engine's own work.
    inrun_overhead.push_back(cb_ms / (ms - cb_ms) * 100.0);

    runtime::GenerateRequest req;
    req.prompt.assign(static_cast<size_t>(usage["usage"]["prompt_tokens"].get<int>()), 236743);
    req.prompt[0] = tok::kBos;
    req.sampling.temperature = 0;
    req.max_tokens = n;
    req.stop_at_eog = false;
    plain->clear_cache();
    int count = 0;
    runtime::GenerateCallbacks cb;
    cb.on_token = [&](int32_t) { return ++count > 0; };
    auto pr = plain->generate(req, cb);
    if (!pr.ok()) return 1;
    plain_ms.push_back(pr->decode_seconds * 1e3 / pr->n_generated);
    std::printf("run %d: plain engine %.3f ms/token (%d), server %.3f ms/token (%d), of which "
                "server work %.4f ms/token wall (%.3f %%), %.4f ms/token CPU (%.3f %%)\n",
                r, plain_ms.back(), pr->n_generated, server_ms.back(), n, cb_ms / n,
                inrun_overhead.back(), cb_cpu_ms / n, inrun_cpu.back());
  }
  const double p = median(plain_ms), s = median(server_ms);
  std::printf("per-token: plain engine %.3f ms, server %.3f ms, overhead %+.2f %% (medians of "
              "separate runs); in-run server work %.3f %% (wall) / %.3f %% (CPU) of the "
              "engine's decode time\n",
              p, s, (s - p) / p * 100.0, median(inrun_overhead), median(inrun_cpu));

  // TTFT: ~4096-token conversation, then extended by ~100 tokens.
  std::string long_text;
  const Tokenizer& tk = srv.engine()->tokenizer();
  int words = 0;
  while (static_cast<int>(tk.encode(long_text, true, false).size()) < 4070) {
    long_text += " The keeper climbed the stairs again, counting each of the " + std::to_string(words++) + " steps.";
  }
  json conv = json::array({{{"role", "user"}, {"content", long_text}}});
  json ext = conv;
  ext.push_back({{"role", "assistant"}, {"content", "I will continue."}});
  std::string more = "Now describe the storm that night in detail";
  for (int i = 0; i < 8; ++i) more += ", with wind and rain and waves " + std::to_string(i);
  ext.push_back({{"role", "user"}, {"content", more}});
  auto ttft = [&](const json& messages, int* n_prompt, int* n_cached) {
    // Thinking on (the server's default, what hax gets): the prompt ends at "<|turn>model\n",
    // which the next turn's rendering repeats, so the extended conversation strictly extends it.
    json body = {{"messages", messages}, {"max_tokens", 1}};
    const Timer t;
    auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
    const double ms = t.seconds() * 1e3;
    json j = json::parse(res->body);
    *n_prompt = j["usage"]["prompt_tokens"];
    *n_cached = j["usage"]["prompt_tokens_details"]["cached_tokens"];
    return ms;
  };
  std::vector<double> warm, cold;
  int np = 0, nc = 0, np_c = 0, nc_c = 0, np0 = 0, nc0 = 0;
  for (int r = 0; r < runs; ++r) {
    srv.engine()->clear_cache();
    ttft(conv, &np0, &nc0);
    warm.push_back(ttft(ext, &np, &nc));
    srv.engine()->clear_cache();
    cold.push_back(ttft(ext, &np_c, &nc_c));
  }
  std::printf("TTFT: conversation %d tokens, extended to %d: with reuse %.1f ms (%d cached), "
              "without %.1f ms (%d cached), speed-up %.1fx\n",
              np0, np, median(warm), nc, median(cold), nc_c, median(cold) / median(warm));
  srv.stop();
  th.join();
  return 0;
}
