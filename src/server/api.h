// The OpenAI Chat Completions mapping as pure functions (spec/server-protocol.md §6-§9): request
// JSON -> ChatRequest (or an ApiError that is always a 4xx), parser events -> delta objects with
// stop strings applied, and the JSON shapes of chunks, completions, usage, /v1/models, /props
// and errors. No sockets here, so every rule is unit-testable and fuzzable.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "chat/constraint.h"
#include "chat/parser.h"
#include "runtime/engine.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

namespace gem::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  nlohmann::json extra = nlohmann::json::object();  // merged into the error object
};
// {"error":{"code":status,"message":...,"type":...,...extra}}
nlohmann::json error_json(const ApiError& e);
ApiError bad_request(std::string message);

using ToolChoice = chat::ToolChoice;

struct ChatRequest {
  nlohmann::json messages = nlohmann::json::array();  // normalised (text parts joined)
  nlohmann::json tools = nlohmann::json::array();     // validated function tools
  bool stream = false;
  bool include_usage = false;
  bool return_progress = false;
  bool enable_thinking = true;  // hax never sends a switch: thinking stays on (§13.1)
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_name;        // kNamed
  int max_tokens = -1;          // -1: until end of generation or the context is full
  bool ignore_eos = false;      // llama-server's: generate through end-of-generation tokens
  std::vector<std::string> stop;
  SamplingParams sampling;
};

// Parses and validates a request body. `defaults` carries the model's recommended sampling.
// Messages, tools and the thinking switch go through chat::read_chat_input (the validator `gem
// template` uses too). Unknown keys are ignored; a wrong type, a malformed message or
// unsupported content (image, audio, video parts) is a 400 whose message names the field.
bool parse_chat_request(const std::string& body, const SamplingParams& defaults,
                        ChatRequest* out, ApiError* err);

// The request's prompt as token ids, <bos> first: rendered with the server's options (the
// generation prompt, a reopened model turn after tool results) and tokenized with message text
// read as text (chat::tokenize_prompt). *n_history: the leading ids that are conversation (the
// engine keeps them cached; engine.h). A conversation the renderer refuses is a 400.
bool build_prompt(const ChatRequest& request, const Tokenizer& tokenizer,
                  std::vector<int32_t>* ids, int* n_history, ApiError* err);

// Response identity shared by every chunk of one response.
struct ResponseMeta {
  std::string id;        // "chatcmpl-" + 32 alphanumerics
  int64_t created = 0;   // unix seconds
  std::string model;     // the server's model name (never the request's)
  std::string fingerprint;  // "b<version>-<commit>"
};
std::string random_alnum(std::mt19937_64& rng, int n);

nlohmann::json chunk_json(const ResponseMeta& meta, const nlohmann::json& delta,
                          const nlohmann::json& finish_reason);
nlohmann::json usage_json(const runtime::GenerateResult& r);
nlohmann::json timings_json(const runtime::GenerateResult& r);

// Parser events -> delta objects ({"reasoning_content"}, {"content"}, {"tool_calls":[...]}),
// with stop strings cut out of the content. Also accumulates the whole message for the
// non-streamed answer.
class DeltaAssembler {
 public:
  DeltaAssembler(std::vector<std::string> stop, std::mt19937_64* rng);
  // Appends the deltas `e` produces. Returns true once a stop string matched: the content is cut
  // before it and the caller should stop generating.
  bool add(const chat::Event& e, std::vector<nlohmann::json>& deltas);
  // Releases content held back as a possible stop-string prefix.
  void flush(std::vector<nlohmann::json>& deltas);
  bool stopped() const { return stopped_; }
  int n_tool_calls() const { return static_cast<int>(tool_calls_.size()); }
  // {"role":"assistant","content":...,"reasoning_content"?,"tool_calls"?}
  nlohmann::json message() const;

 private:
  void emit_content(const std::string& text, std::vector<nlohmann::json>& deltas);

  std::vector<std::string> stop_;
  std::mt19937_64* rng_;
  std::string held_;       // content that may be the start of a stop string
  std::string content_;
  std::string reasoning_;
  nlohmann::json tool_calls_ = nlohmann::json::array();
  bool stopped_ = false;
};

// The finish reason clients see: "tool_calls" when calls were made and generation ended at a
// natural stop, "length" at max_tokens or a full context, "stop" otherwise.
std::string finish_reason(runtime::FinishReason f, bool stop_string, int n_tool_calls);

}  // namespace gem::server
