// Request validation and response shapes for the OpenAI Chat Completions mapping (api.h).
// nlohmann::json throws on a type mismatch, so every field is type-checked before it is read.
#include "server/api.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "chat/chat.h"
#include "chat/json_util.h"
#include "chat/validate.h"

#include "server/json_limits.h"

namespace gem::server {

using nlohmann::json;

json error_json(const ApiError& e) {
  json err = {{"code", e.status}, {"message", e.message}, {"type", e.type}};
  if (e.extra.is_object()) {
    for (auto it = e.extra.begin(); it != e.extra.end(); ++it) err[it.key()] = it.value();
  }
  return json{{"error", err}};
}

ApiError bad_request(std::string message) {
  ApiError e;
  e.status = 400;
  e.type = "invalid_request_error";
  e.message = std::move(message);
  return e;
}

namespace {

// A field that is absent or null counts as "not given".
const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// "WHERE: expected X, got Y" (chat/validate.h's style, which every 400 here follows).
ApiError type_error(const std::string& where, const char* expected, const json& v) {
  return bad_request(chat::detail::type_error(where, expected, v).message());
}

// `where`: the field's path for the message ("stream_options.include_usage"); default the key.
bool read_bool(const json& obj, const char* key, bool* out, ApiError* err,
               const char* where = nullptr) {
  const json* v = field(obj, key);
  if (v == nullptr) return true;
  if (!v->is_boolean()) {
    *err = type_error(where ? where : key, "true or false", *v);
    return false;
  }
  *out = v->get<bool>();
  return true;
}

bool read_number(const json& obj, const char* key, float lo, float hi, float* out,
                 ApiError* err) {
  const json* v = field(obj, key);
  if (v == nullptr) return true;
  if (!v->is_number()) {
    *err = type_error(key, "a number", *v);
    return false;
  }
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    *err = bad_request(strprintf("%s: expected a number in [%g, %g], got %g", key,
                                 static_cast<double>(lo), static_cast<double>(hi), d));
    return false;
  }
  *out = static_cast<float>(d);
  return true;
}

bool read_int(const json& obj, const char* key, int64_t lo, int64_t hi, int64_t* out,
              ApiError* err) {
  const json* v = field(obj, key);
  if (v == nullptr) return true;
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      x = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
              ? std::numeric_limits<int64_t>::max()
              : static_cast<int64_t>(u);
    } else {
      x = v->get<int64_t>();
    }
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    *err = type_error(key, "an integer", *v);
    return false;
  }
  if (x < lo || x > hi) {
    *err = bad_request(strprintf("%s: expected an integer in [%lld, %lld], got %lld", key,
                                 static_cast<long long>(lo), static_cast<long long>(hi),
                                 static_cast<long long>(x)));
    return false;
  }
  *out = x;
  return true;
}

}  // namespace

bool parse_chat_request(const std::string& body, const SamplingParams& defaults, ChatRequest* out,
                        ApiError* err) {
  std::string depth_error;
  json j = parse_json_bounded(body, "request body", &depth_error);
  if (!depth_error.empty()) {
    *err = bad_request(depth_error);
    return false;
  }
  if (j.is_discarded()) {
    *err = bad_request("the request body: expected JSON, got text that does not parse as JSON");
    return false;
  }
  if (!j.is_object()) {
    *err = type_error("the request body", "a JSON object", j);
    return false;
  }
  ChatRequest r;
  r.sampling = defaults;
  {
    Result<chat::ChatInput> in = chat::read_chat_input(j, r.enable_thinking);
    if (!in.ok()) {
      *err = bad_request(in.message());
      return false;
    }
    r.messages = std::move(in->messages);
    r.tools = std::move(in->tools);
    r.enable_thinking = in->enable_thinking;
  }
  if (!read_bool(j, "stream", &r.stream, err)) return false;
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) {
      *err = type_error("stream_options", "an object", *so);
      return false;
    }
    if (!read_bool(*so, "include_usage", &r.include_usage, err, "stream_options.include_usage")) {
      return false;
    }
  }
  if (!read_bool(j, "return_progress", &r.return_progress, err)) return false;
  if (!read_bool(j, "ignore_eos", &r.ignore_eos, err)) return false;

  // Length: max_completion_tokens, max_tokens and n_predict are one limit (-1 = none).
  for (const char* key : {"n_predict", "max_tokens", "max_completion_tokens"}) {
    int64_t v = r.max_tokens;
    if (!read_int(j, key, -1, std::numeric_limits<int32_t>::max(), &v, err)) return false;
    r.max_tokens = static_cast<int>(v);
  }

  // Sampling.
  SamplingParams& s = r.sampling;
  if (!read_number(j, "temperature", 0.0f, 100.0f, &s.temperature, err)) return false;
  if (!read_number(j, "top_p", 0.0f, 1.0f, &s.top_p, err)) return false;
  if (!read_number(j, "min_p", 0.0f, 1.0f, &s.min_p, err)) return false;
  if (!read_number(j, "presence_penalty", -2.0f, 2.0f, &s.presence_penalty, err)) return false;
  if (!read_number(j, "frequency_penalty", -2.0f, 2.0f, &s.frequency_penalty, err)) return false;
  if (!read_number(j, "repeat_penalty", 0.0f, 100.0f, &s.repeat_penalty, err)) return false;
  int64_t top_k = s.top_k;
  if (!read_int(j, "top_k", -1, 1 << 30, &top_k, err)) return false;
  s.top_k = static_cast<int>(top_k);
  int64_t seed = -1;
  if (!read_int(j, "seed", std::numeric_limits<int64_t>::min(),
                std::numeric_limits<int64_t>::max(), &seed, err)) {
    return false;
  }
  s.seed = seed < 0 ? 0xFFFFFFFFu : static_cast<uint64_t>(seed);

  if (const json* stop = field(j, "stop")) {
    if (stop->is_string()) {
      if (!stop->get<std::string>().empty()) r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        const json& st = (*stop)[i];
        if (!st.is_string()) {
          *err = type_error(strprintf("stop[%zu]", i), "a string", st);
          return false;
        }
        if (!st.get<std::string>().empty()) r.stop.push_back(st.get<std::string>());
      }
      if (r.stop.size() > 16) {
        *err = bad_request(strprintf("stop: expected at most 16 strings, got %zu", r.stop.size()));
        return false;
      }
    } else {
      *err = type_error("stop", "a string or an array of strings", *stop);
      return false;
    }
  }

  // tool_choice: "auto" | "none" | "required" | {"type":"function","function":{"name":...}}.
  if (const json* tc = field(j, "tool_choice")) {
    if (tc->is_string()) {
      const std::string v = tc->get<std::string>();
      if (v == "auto") {
        r.tool_choice = ToolChoice::kAuto;
      } else if (v == "none") {
        r.tool_choice = ToolChoice::kNone;
      } else if (v == "required") {
        r.tool_choice = ToolChoice::kRequired;
      } else {
        *err = bad_request("tool_choice: expected \"auto\", \"none\", \"required\" or a named "
                           "function, got \"" + v + "\"");
        return false;
      }
    } else if (tc->is_object()) {
      const json* fn = field(*tc, "function");
      const json* name = (fn != nullptr && fn->is_object()) ? field(*fn, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        *err = bad_request(strprintf("tool_choice.function.name: expected a string, got %s",
                                     name == nullptr ? "nothing" : chat::detail::type_name(*name)));
        return false;
      }
      r.tool_choice = ToolChoice::kNamed;
      r.tool_name = name->get<std::string>();
      bool found = false;
      for (const json& t : r.tools) found |= t["function"]["name"] == r.tool_name;
      if (!found) {
        *err = bad_request("tool_choice.function.name: expected the name of a function in tools, "
                           "got \"" + r.tool_name + "\"");
        return false;
      }
    } else {
      *err = type_error("tool_choice", "a string or an object", *tc);
      return false;
    }
    if (r.tools.empty() && r.tool_choice != ToolChoice::kNone) r.tool_choice = ToolChoice::kAuto;
  }

  // Options gem does not implement are refused rather than silently ignored.
  if (const json* n = field(j, "n")) {
    if (!n->is_number_integer() || n->get<int64_t>() != 1) {
      *err = bad_request(n->is_number_integer()
                             ? strprintf("n: expected 1 (one choice per request), got %lld",
                                         static_cast<long long>(n->get<int64_t>()))
                             : type_error("n", "the integer 1", *n).message);
      return false;
    }
  }
  if (const json* lp = field(j, "logprobs")) {
    if (!lp->is_boolean()) {
      *err = type_error("logprobs", "true or false", *lp);
      return false;
    }
    if (lp->get<bool>()) {
      *err = bad_request("logprobs: expected false, got true (logprobs are not supported by this "
                         "server)");
      return false;
    }
  }
  if (const json* rf = field(j, "response_format")) {
    const json* type = rf->is_object() ? field(*rf, "type") : nullptr;
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "text") {
      // (The value is not echoed: dumping client JSON recurses.)
      *err = bad_request(
          type != nullptr && type->is_string()
              ? "response_format.type: expected \"text\" (other formats are not supported), got \"" +
                    type->get<std::string>() + "\""
              : type_error("response_format", "an object with \"type\": \"text\"", *rf).message);
      return false;
    }
  }
  *out = std::move(r);
  return true;
}

bool build_prompt(const ChatRequest& request, const Tokenizer& tokenizer,
                  std::vector<int32_t>* ids, int* n_history, ApiError* err) {
  chat::RenderOptions ro;
  ro.add_generation_prompt = true;
  ro.enable_thinking = request.enable_thinking;
  ro.emit_bos_text = false;  // the tokenizer adds <bos> (spec §6.4: no double BOS)
  ro.reopen_model_turn = true;
  Result<chat::Prompt> prompt = chat::render_prompt(request.messages, request.tools, ro);
  if (!prompt.ok()) {
    *err = bad_request("cannot format the conversation: " + prompt.message());
    return false;
  }
  chat::PromptTokens tokens = chat::tokenize_prompt(*prompt, tokenizer, /*add_bos=*/true);
  *ids = std::move(tokens.ids);
  *n_history = tokens.n_history;
  return true;
}

std::string random_alnum(std::mt19937_64& rng, int n) {
  static const char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string s;
  s.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) s += kChars[rng() % (sizeof(kChars) - 1)];
  return s;
}

json chunk_json(const ResponseMeta& meta, const json& delta, const json& finish_reason) {
  return json{{"choices", json::array({json{{"finish_reason", finish_reason},
                                             {"index", 0},
                                             {"delta", delta}}})},
              {"created", meta.created},
              {"id", meta.id},
              {"model", meta.model},
              {"system_fingerprint", meta.fingerprint},
              {"object", "chat.completion.chunk"}};
}

json usage_json(const runtime::GenerateResult& r) {
  return json{{"completion_tokens", r.n_generated},
              {"prompt_tokens", r.n_prompt},
              {"total_tokens", r.n_prompt + r.n_generated},
              {"prompt_tokens_details", {{"cached_tokens", r.n_cached}}}};
}

json timings_json(const runtime::GenerateResult& r) {
  const int prompt_n = r.n_prompt - r.n_cached;
  const double prompt_ms = r.prompt_seconds * 1e3;
  const double predicted_ms = r.decode_seconds * 1e3;
  return json{{"cache_n", r.n_cached},
              {"prompt_n", prompt_n},
              {"prompt_ms", prompt_ms},
              {"prompt_per_token_ms", prompt_n > 0 ? prompt_ms / prompt_n : 0.0},
              {"prompt_per_second", prompt_ms > 0 ? prompt_n * 1e3 / prompt_ms : 0.0},
              {"predicted_n", r.n_generated},
              {"predicted_ms", predicted_ms},
              {"predicted_per_token_ms", r.n_generated > 0 ? predicted_ms / r.n_generated : 0.0},
              {"predicted_per_second",
               predicted_ms > 0 ? r.n_generated * 1e3 / predicted_ms : 0.0},
              // gem's own: of predicted_ms, the time spent mapping tokens to SSE/JSON and writing
              // them (the server's per-token overhead over the engine loop).
              {"predicted_server_ms", r.callback_seconds * 1e3},
              {"predicted_server_cpu_ms", r.callback_cpu_seconds * 1e3}};
}

DeltaAssembler::DeltaAssembler(std::vector<std::string> stop, std::mt19937_64* rng)
    : stop_(std::move(stop)), rng_(rng) {}

void DeltaAssembler::emit_content(const std::string& text, std::vector<json>& deltas) {
  if (text.empty()) return;
  content_ += text;
  deltas.push_back(json{{"content", text}});
}

bool DeltaAssembler::add(const chat::Event& e, std::vector<json>& deltas) {
  if (stopped_) return true;
  switch (e.kind) {
    case chat::EventKind::kReasoning:
      if (!e.text.empty()) {
        reasoning_ += e.text;
        deltas.push_back(json{{"reasoning_content", e.text}});
      }
      break;
    case chat::EventKind::kContent: {
      if (stop_.empty()) {
        emit_content(e.text, deltas);
        break;
      }
      held_ += e.text;
      size_t cut = std::string::npos;
      for (const std::string& s : stop_) cut = std::min(cut, held_.find(s));
      if (cut != std::string::npos) {
        emit_content(held_.substr(0, cut), deltas);
        held_.clear();
        stopped_ = true;
        return true;
      }
      // Hold back the longest tail that could still become a stop string.
      size_t keep = 0;
      for (const std::string& s : stop_) {
        for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
          if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
            keep = k;
            break;
          }
        }
      }
      emit_content(held_.substr(0, held_.size() - keep), deltas);
      held_.erase(0, held_.size() - keep);
      break;
    }
    case chat::EventKind::kToolCallBegin: {
      // Text held as a possible stop prefix precedes the call.
      emit_content(held_, deltas);
      held_.clear();
      const int index = static_cast<int>(tool_calls_.size());
      const std::string id = random_alnum(*rng_, 32);
      tool_calls_.push_back(
          json{{"id", id}, {"type", "function"}, {"function", {{"name", e.text}, {"arguments", ""}}}});
      deltas.push_back(json{{"tool_calls", json::array({json{
                                               {"index", index},
                                               {"id", id},
                                               {"type", "function"},
                                               {"function", {{"name", e.text}, {"arguments", ""}}}}})}});
      break;
    }
    case chat::EventKind::kToolCallArgs: {
      if (tool_calls_.empty() || e.text.empty()) break;
      const int index = static_cast<int>(tool_calls_.size()) - 1;
      json& args = tool_calls_.back()["function"]["arguments"];
      args = args.get<std::string>() + e.text;
      deltas.push_back(json{{"tool_calls", json::array({json{
                                               {"index", index},
                                               {"function", {{"arguments", e.text}}}}})}});
      break;
    }
    case chat::EventKind::kToolCallEnd:
      break;
  }
  return stopped_;
}

void DeltaAssembler::flush(std::vector<json>& deltas) {
  if (!stopped_) emit_content(held_, deltas);
  held_.clear();
}

json DeltaAssembler::message() const {
  json m = {{"role", "assistant"}, {"content", content_}};
  if (!reasoning_.empty()) m["reasoning_content"] = reasoning_;
  if (!tool_calls_.empty()) m["tool_calls"] = tool_calls_;
  return m;
}

std::string finish_reason(runtime::FinishReason f, bool stop_string, int n_tool_calls) {
  if (!stop_string && (f == runtime::FinishReason::kLength ||
                       f == runtime::FinishReason::kContextFull)) {
    return "length";
  }
  return n_tool_calls > 0 ? "tool_calls" : "stop";
}

}  // namespace gem::server
