// Request validation and response shapes for the OpenAI Chat Completions mapping (api.h).
// nlohmann::json throws on a type mismatch, so every field is type-checked before it is read.
#include "server/api.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>

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

bool read_bool(const json& obj, const char* key, bool* out, ApiError* err) {
  const json* v = field(obj, key);
  if (v == nullptr) return true;
  if (!v->is_boolean()) {
    *err = bad_request(std::string("'") + key + "' must be a boolean, got " + v->type_name());
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
    *err = bad_request(std::string("'") + key + "' must be a number, got " + v->type_name());
    return false;
  }
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    *err = bad_request(strprintf("'%s' must be in [%g, %g], got %g", key, static_cast<double>(lo),
                                 static_cast<double>(hi), d));
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
    *err = bad_request(std::string("'") + key + "' must be an integer, got " + v->type_name());
    return false;
  }
  if (x < lo || x > hi) {
    *err = bad_request(strprintf("'%s' must be in [%lld, %lld], got %lld", key,
                                 static_cast<long long>(lo), static_cast<long long>(hi),
                                 static_cast<long long>(x)));
    return false;
  }
  *out = x;
  return true;
}

// Content: a string, null, or an array of parts; text parts are joined with "\n" (as
// llama.cpp's concat_content_parts does); media parts are refused (gem is text-only).
bool normalise_content(const json& msg, size_t index, json* out, ApiError* err) {
  const json* c = field(msg, "content");
  if (c == nullptr) {
    *out = nullptr;
    return true;
  }
  if (c->is_string()) {
    *out = *c;
    return true;
  }
  if (!c->is_array()) {
    *err = bad_request(strprintf("messages[%zu].content must be a string, null or an array of "
                                 "parts, got %s",
                                 index, c->type_name()));
    return false;
  }
  std::string text;
  bool first = true;
  for (size_t p = 0; p < c->size(); ++p) {
    const json& part = (*c)[p];
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    if (type == nullptr || !type->is_string()) {
      *err = bad_request(strprintf("messages[%zu].content[%zu] must be an object with a string "
                                   "'type'",
                                   index, p));
      return false;
    }
    const std::string t = type->get<std::string>();
    if (t == "text") {
      const json* tx = field(part, "text");
      if (tx == nullptr || !tx->is_string()) {
        *err = bad_request(strprintf("messages[%zu].content[%zu].text must be a string", index, p));
        return false;
      }
      if (!first) text += '\n';
      text += tx->get<std::string>();
      first = false;
    } else if (t == "image_url" || t == "input_image" || t == "image") {
      *err = bad_request("image input is not supported: this server runs a text-only model "
                         "(/props says modalities.vision = false)");
      return false;
    } else if (t == "input_audio" || t == "audio") {
      *err = bad_request("audio input is not supported by this server");
      return false;
    } else if (t == "input_video" || t == "video_url" || t == "file") {
      *err = bad_request("'" + t + "' content is not supported by this server");
      return false;
    } else {
      *err = bad_request(strprintf("messages[%zu].content[%zu]: unsupported part type '%s'",
                                   index, p, t.c_str()));
      return false;
    }
  }
  *out = text;
  return true;
}

bool validate_messages(const json& body, json* out, ApiError* err) {
  const json* msgs = field(body, "messages");
  if (msgs == nullptr) {
    *err = bad_request("'messages' is required");
    return false;
  }
  if (!msgs->is_array() || msgs->empty()) {
    *err = bad_request("'messages' must be a non-empty array");
    return false;
  }
  *out = json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    if (!m.is_object()) {
      *err = bad_request(strprintf("messages[%zu] must be an object, got %s", i, m.type_name()));
      return false;
    }
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string()) {
      *err = bad_request(strprintf("messages[%zu].role must be a string", i));
      return false;
    }
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      *err = bad_request(strprintf("messages[%zu].role '%s' is not one of system, developer, "
                                   "user, assistant, tool",
                                   i, r.c_str()));
      return false;
    }
    json msg = m;
    json content;
    if (!normalise_content(m, i, &content, err)) return false;
    msg["content"] = content;
    const json* calls = field(m, "tool_calls");
    if (calls != nullptr) {
      if (r != "assistant" || !calls->is_array()) {
        *err = bad_request(strprintf("messages[%zu].tool_calls must be an array on an assistant "
                                     "message",
                                     i));
        return false;
      }
      for (size_t k = 0; k < calls->size(); ++k) {
        const json& call = (*calls)[k];
        const json* fn = call.is_object() ? field(call, "function") : nullptr;
        const json* name = (fn != nullptr && fn->is_object()) ? field(*fn, "name") : nullptr;
        if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
          *err = bad_request(strprintf("messages[%zu].tool_calls[%zu].function.name must be a "
                                       "non-empty string",
                                       i, k));
          return false;
        }
        const json* args = field(*fn, "arguments");
        if (args != nullptr && !args->is_string() && !args->is_object()) {
          *err = bad_request(strprintf("messages[%zu].tool_calls[%zu].function.arguments must be "
                                       "a string or an object",
                                       i, k));
          return false;
        }
        if (args != nullptr && args->is_string()) {
          std::string depth_error;
          json parsed = parse_json_bounded(
              args->get<std::string>(),
              strprintf("messages[%zu].tool_calls[%zu].function.arguments", i, k), &depth_error);
          if (!depth_error.empty()) {
            *err = bad_request(depth_error);
            return false;
          }
          if (parsed.is_discarded() || !parsed.is_object()) {
            *err = bad_request(strprintf("messages[%zu].tool_calls[%zu].function.arguments is not "
                                         "a JSON object",
                                         i, k));
            return false;
          }
        }
      }
    } else if (m.contains("tool_calls")) {
      msg.erase("tool_calls");  // null
    }
    const json* rc = field(m, "reasoning_content");
    if (rc != nullptr && !rc->is_string()) {
      *err = bad_request(strprintf("messages[%zu].reasoning_content must be a string", i));
      return false;
    }
    if (r != "assistant" && content.is_null()) {
      *err = bad_request(strprintf("messages[%zu] (%s) needs 'content'", i, r.c_str()));
      return false;
    }
    const json* tcid = field(m, "tool_call_id");
    if (tcid != nullptr && !tcid->is_string()) {
      *err = bad_request(strprintf("messages[%zu].tool_call_id must be a string", i));
      return false;
    }
    const json* name = field(m, "name");
    if (name != nullptr && !name->is_string()) {
      *err = bad_request(strprintf("messages[%zu].name must be a string", i));
      return false;
    }
    out->push_back(std::move(msg));
  }
  return true;
}

bool validate_tools(const json& body, json* out, ApiError* err) {
  *out = json::array();
  const json* tools = field(body, "tools");
  if (tools == nullptr) return true;
  if (!tools->is_array()) {
    *err = bad_request("'tools' must be an array");
    return false;
  }
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const json* type = t.is_object() ? field(t, "type") : nullptr;
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "function") {
      *err = bad_request(strprintf("tools[%zu]: only {\"type\": \"function\", ...} tools are "
                                   "supported",
                                   i));
      return false;
    }
    const json* fn = field(t, "function");
    const json* name = (fn != nullptr && fn->is_object()) ? field(*fn, "name") : nullptr;
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      *err = bad_request(strprintf("tools[%zu].function.name must be a non-empty string", i));
      return false;
    }
    const json* desc = field(*fn, "description");
    if (desc != nullptr && !desc->is_string()) {
      *err = bad_request(strprintf("tools[%zu].function.description must be a string", i));
      return false;
    }
    const json* params = field(*fn, "parameters");
    if (params != nullptr && !params->is_object()) {
      *err = bad_request(strprintf("tools[%zu].function.parameters must be an object", i));
      return false;
    }
    out->push_back(t);
  }
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
    *err = bad_request("the request body is not valid JSON");
    return false;
  }
  if (!j.is_object()) {
    *err = bad_request(std::string("the request body must be a JSON object, got ") + j.type_name());
    return false;
  }
  ChatRequest r;
  r.sampling = defaults;
  if (!validate_messages(j, &r.messages, err)) return false;
  if (!validate_tools(j, &r.tools, err)) return false;
  if (!read_bool(j, "stream", &r.stream, err)) return false;
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) {
      *err = bad_request("'stream_options' must be an object");
      return false;
    }
    if (!read_bool(*so, "include_usage", &r.include_usage, err)) return false;
  }
  if (!read_bool(j, "return_progress", &r.return_progress, err)) return false;

  // Thinking: on unless reasoning_effort is "none" or chat_template_kwargs.enable_thinking=false.
  if (const json* effort = field(j, "reasoning_effort")) {
    if (!effort->is_string()) {
      *err = bad_request("'reasoning_effort' must be a string");
      return false;
    }
    if (effort->get<std::string>() == "none") r.enable_thinking = false;
  }
  if (const json* kw = field(j, "chat_template_kwargs")) {
    if (!kw->is_object()) {
      *err = bad_request("'chat_template_kwargs' must be an object");
      return false;
    }
    if (!read_bool(*kw, "enable_thinking", &r.enable_thinking, err)) return false;
  }

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
      for (const json& st : *stop) {
        if (!st.is_string()) {
          *err = bad_request("'stop' must be a string or an array of strings");
          return false;
        }
        if (!st.get<std::string>().empty()) r.stop.push_back(st.get<std::string>());
      }
      if (r.stop.size() > 16) {
        *err = bad_request("'stop' holds more than 16 strings");
        return false;
      }
    } else {
      *err = bad_request("'stop' must be a string or an array of strings");
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
        *err = bad_request("'tool_choice' must be \"auto\", \"none\", \"required\" or a named "
                           "function, got \"" + v + "\"");
        return false;
      }
    } else if (tc->is_object()) {
      const json* fn = field(*tc, "function");
      const json* name = (fn != nullptr && fn->is_object()) ? field(*fn, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        *err = bad_request("'tool_choice' object needs function.name");
        return false;
      }
      r.tool_choice = ToolChoice::kNamed;
      r.tool_name = name->get<std::string>();
      bool found = false;
      for (const json& t : r.tools) found |= t["function"]["name"] == r.tool_name;
      if (!found) {
        *err = bad_request("'tool_choice' names function '" + r.tool_name +
                           "', which is not in 'tools'");
        return false;
      }
    } else {
      *err = bad_request("'tool_choice' must be a string or an object");
      return false;
    }
    if (r.tools.empty() && r.tool_choice != ToolChoice::kNone) r.tool_choice = ToolChoice::kAuto;
  }

  // Options gem does not implement are refused rather than silently ignored.
  if (const json* n = field(j, "n")) {
    if (!n->is_number_integer() || n->get<int64_t>() != 1) {
      *err = bad_request("'n' other than 1 is not supported");
      return false;
    }
  }
  if (const json* lp = field(j, "logprobs")) {
    if (!lp->is_boolean()) {
      *err = bad_request("'logprobs' must be a boolean");
      return false;
    }
    if (lp->get<bool>()) {
      *err = bad_request("'logprobs' is not supported by this server");
      return false;
    }
  }
  if (const json* rf = field(j, "response_format")) {
    const json* type = rf->is_object() ? field(*rf, "type") : nullptr;
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "text") {
      *err = bad_request("'response_format' other than {\"type\": \"text\"} is not supported");
      return false;
    }
  }
  *out = std::move(r);
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

runtime::Constraint make_tool_constraint(ToolChoice choice, const std::string& name,
                                         bool thinking, const Tokenizer& tokenizer) {
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  if (choice == ToolChoice::kAuto) return {};
  if (choice == ToolChoice::kNone) {
    return [kBanned](std::span<float> logits, std::span<const int32_t>) -> int32_t {
      if (static_cast<size_t>(tok::kToolCallStart) < logits.size()) {
        logits[tok::kToolCallStart] = kBanned;
      }
      return -1;
    };
  }
  // required / named: state tracked incrementally over the generated tokens.
  struct State {
    size_t seen = 0;
    bool in_thought = false;
    bool in_call = false;
    int calls_closed = 0;
    bool name_queued = false;
    std::deque<int32_t> forced;
  };
  auto state = std::make_shared<State>();
  std::vector<int32_t> name_tokens;
  if (choice == ToolChoice::kNamed) name_tokens = tokenizer.encode("call:" + name + "{", false, false);
  const bool named = choice == ToolChoice::kNamed;
  return [state, name_tokens, named, thinking, kBanned](std::span<float> logits,
                                                       std::span<const int32_t> gen) -> int32_t {
    State& s = *state;
    for (; s.seen < gen.size(); ++s.seen) {
      const int32_t t = gen[s.seen];
      if (t == tok::kChannelStart) s.in_thought = true;
      if (t == tok::kChannelEnd) s.in_thought = false;
      if (t == tok::kToolCallStart && !s.in_call) {
        s.in_call = true;
        if (named && !s.name_queued) {
          // The named call: its opening text is forced right after <|tool_call>.
          s.forced.assign(name_tokens.begin(), name_tokens.end());
          s.name_queued = true;
        }
      }
      if (t == tok::kToolCallEnd && s.in_call) {
        s.in_call = false;
        s.calls_closed++;
      }
    }
    if (!s.forced.empty()) {
      const int32_t t = s.forced.front();
      s.forced.pop_front();
      return t;
    }
    if (s.in_call) return -1;
    if (s.calls_closed > 0) return named ? tok::kToolRespStart : -1;
    auto ban = [&](int32_t id) {
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] = kBanned;
    };
    // No call yet: the turn may not end.
    ban(tok::kEos);
    ban(tok::kTurnEnd);
    ban(tok::kToolRespStart);
    if (s.in_thought) return -1;  // let it finish thinking first
    if (thinking && gen.empty()) {
      // First step with thinking on: open the thought channel or start the call.
      for (size_t i = 0; i < logits.size(); ++i) {
        if (i != static_cast<size_t>(tok::kChannelStart) &&
            i != static_cast<size_t>(tok::kToolCallStart)) {
          logits[i] = kBanned;
        }
      }
      return -1;
    }
    return tok::kToolCallStart;
  };
}

}  // namespace gem::server
