// The OpenAI Chat Completions mapping as pure functions (spec/server-protocol.md §6-§9): request
// JSON -> ChatRequest (or an ApiError that is always a 4xx), parser events -> delta objects with
// stop strings applied, and the JSON shapes of chunks, completions, usage, /v1/models, /props
// and errors. Also the text completion (/v1/completions) and the text-layer routes (/tokenize,
// /detokenize, /apply-template) in llama-server's shapes. No sockets here, so every rule is
// unit-testable and fuzzable.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/constraint.h"
#include "chat/json_schema.h"
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

// How reasoning comes back (llama-server's --reasoning-format): kAuto and kDeepseek in
// `reasoning_content`; kNone inside `content`, thought markers included; kDeepseekLegacy both.
enum class ReasoningFormat { kAuto, kNone, kDeepseek, kDeepseekLegacy };
bool parse_reasoning_format(std::string_view name, ReasoningFormat* out);
const char* reasoning_format_name(ReasoningFormat f);

// What a request falls back on for the fields it leaves out: the model's recommended sampling
// with the server's flags over it (--temp, --top-k, ..., -n, --chat-template-kwargs,
// --reasoning-format, --reasoning-budget).
struct RequestDefaults {
  RequestDefaults(SamplingParams s = {}) : sampling(s) {}  // NOLINT: a SamplingParams is enough
  SamplingParams sampling;
  int max_tokens = -1;            // -1: until end of generation or the context is full
  bool enable_thinking = true;
  ReasoningFormat reasoning_format = ReasoningFormat::kAuto;
  int reasoning_budget = -1;      // thought tokens; -1: unlimited (0 turns thinking off)
};

// Fields every generating request has (chat and text completions).
struct GenerationOptions {
  bool stream = false;
  bool include_usage = false;
  bool return_progress = false;
  int max_tokens = -1;          // -1: until end of generation or the context is full
  bool ignore_eos = false;      // llama-server's: generate through end-of-generation tokens
  std::vector<std::string> stop;
  SamplingParams sampling;
  // Log-probabilities of the generated tokens with this many alternatives each (0-20); -1: none.
  int top_logprobs = -1;
};

// The most alternatives a logprobs entry lists (OpenAI's limit).
inline constexpr int kMaxTopLogprobs = 20;

struct ChatRequest : GenerationOptions {
  nlohmann::json messages = nlohmann::json::array();  // normalised (text parts joined)
  nlohmann::json tools = nlohmann::json::array();     // validated function tools
  bool enable_thinking = true;  // hax never sends a switch: thinking stays on (§13.1)
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_name;        // kNamed
  ReasoningFormat reasoning_format = ReasoningFormat::kAuto;
  int reasoning_budget = -1;    // thought tokens before <channel|> is forced; -1: unlimited
  // response_format json_object / json_schema (or llama-server's json_schema field): the reply
  // is constrained to this grammar. Null: free text.
  std::shared_ptr<const chat::JsonGrammar> json_grammar;
};

// Parses and validates a request body. `defaults` carries the model's recommended sampling and
// the server's defaults. Messages, tools and the thinking switch go through
// chat::read_chat_input (the validator `gem template` uses too). Unknown keys are ignored; a
// wrong type, a malformed message, unsupported content (image, audio, video parts), an invalid
// or unsupported JSON schema, or n > 1 is a 400 whose message names the field.
bool parse_chat_request(const std::string& body, const RequestDefaults& defaults,
                        ChatRequest* out, ApiError* err);

// POST /v1/completions: a raw prompt (no chat template).
struct CompletionRequest : GenerationOptions {
  // The prompt as given: a string, an array of token ids, or an array mixing both (llama-server's
  // forms; an array of several strings would be several prompts, which is refused).
  nlohmann::json prompt;
};
bool parse_completion_request(const std::string& body, const RequestDefaults& defaults,
                              CompletionRequest* out, ApiError* err);
// The prompt's ids: strings tokenized with special tokens recognised and <bos> before a leading
// string (as llama-server), ids taken as they are (each checked against the vocabulary).
bool build_completion_prompt(const CompletionRequest& request, const Tokenizer& tokenizer,
                             std::vector<int32_t>* ids, ApiError* err);

// The text-layer routes, answered from the tokenizer and the chat format alone.
// POST /tokenize {"content": string, "add_special"?: bool, "parse_special"?: bool,
// "with_pieces"?: bool} -> {"tokens": [ids] or [{"id","piece"}]}.
bool tokenize_route(const std::string& body, const Tokenizer& tokenizer, nlohmann::json* out,
                    ApiError* err);
// POST /detokenize {"tokens": [ids]} -> {"content": text}.
bool detokenize_route(const std::string& body, const Tokenizer& tokenizer, nlohmann::json* out,
                      ApiError* err);
// POST /apply-template {chat request} -> {"prompt": the rendered text}.
bool apply_template_route(const std::string& body, const RequestDefaults& defaults,
                          nlohmann::json* out, ApiError* err);

// One OpenAI logprobs entry: {"id","token","bytes","logprob","top_logprobs":[...]}, from the
// token's log-probabilities in its raw logits row (Backend::token_logprobs: log-softmax over the
// whole vocabulary, before any sampling setting). -inf becomes the lowest float (JSON has no
// -inf; llama-server does the same).
nlohmann::json logprob_entry(const TokenLogprobs& logprobs, int32_t token,
                             const Tokenizer& tokenizer);

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
// A text_completion chunk (or, with finish_reason set and no more text, the last one).
nlohmann::json completion_chunk_json(const ResponseMeta& meta, const std::string& text,
                                     const nlohmann::json& finish_reason);
nlohmann::json usage_json(const runtime::GenerateResult& r);
nlohmann::json timings_json(const runtime::GenerateResult& r);

// Parser events -> delta objects ({"reasoning_content"}, {"content"}, {"tool_calls":[...]}),
// with stop strings cut out of the content. Also accumulates the whole message for the
// non-streamed answer.
class DeltaAssembler {
 public:
  DeltaAssembler(std::vector<std::string> stop, std::mt19937_64* rng,
                 ReasoningFormat reasoning_format = ReasoningFormat::kAuto);
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

  void add_content(const std::string& text, std::vector<nlohmann::json>& deltas);

  std::vector<std::string> stop_;
  std::mt19937_64* rng_;
  bool reasoning_field_ = true;     // reasoning in reasoning_content
  bool reasoning_in_content_ = false;  // reasoning in content, between the thought markers
  bool in_thought_ = false;         // a thought is open in the content
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
