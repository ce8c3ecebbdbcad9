// Request validation and response shapes for the OpenAI Chat Completions mapping (api.h).
// nlohmann::json throws on a type mismatch, so every field is type-checked before it is read.
#include "server/api.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "chat/chat.h"
#include "chat/grammar.h"
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

// The body as a JSON object, or a 400.
bool parse_body(const std::string& body, json* out, ApiError* err) {
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
  *out = std::move(j);
  return true;
}

// The fields chat and text completions share: streaming, length, stop strings, sampling.
bool read_generation(const json& j, const RequestDefaults& d, GenerationOptions* r,
                     ApiError* err) {
  r->sampling = d.sampling;
  r->max_tokens = d.max_tokens;
  if (!read_bool(j, "stream", &r->stream, err)) return false;
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) {
      *err = type_error("stream_options", "an object", *so);
      return false;
    }
    if (!read_bool(*so, "include_usage", &r->include_usage, err, "stream_options.include_usage")) {
      return false;
    }
  }
  if (!read_bool(j, "return_progress", &r->return_progress, err)) return false;
  if (!read_bool(j, "ignore_eos", &r->ignore_eos, err)) return false;

  // Length: max_completion_tokens, max_tokens and n_predict are one limit (-1 = none).
  for (const char* key : {"n_predict", "max_tokens", "max_completion_tokens"}) {
    int64_t v = r->max_tokens;
    if (!read_int(j, key, -1, std::numeric_limits<int32_t>::max(), &v, err)) return false;
    r->max_tokens = static_cast<int>(v);
  }

  // Sampling.
  SamplingParams& s = r->sampling;
  if (!read_number(j, "temperature", 0.0f, 100.0f, &s.temperature, err)) return false;
  if (!read_number(j, "top_p", 0.0f, 1.0f, &s.top_p, err)) return false;
  if (!read_number(j, "min_p", 0.0f, 1.0f, &s.min_p, err)) return false;
  if (!read_number(j, "presence_penalty", -2.0f, 2.0f, &s.presence_penalty, err)) return false;
  if (!read_number(j, "frequency_penalty", -2.0f, 2.0f, &s.frequency_penalty, err)) return false;
  if (!read_number(j, "repeat_penalty", 0.0f, 100.0f, &s.repeat_penalty, err)) return false;
  int64_t top_k = s.top_k;
  if (!read_int(j, "top_k", -1, 1 << 30, &top_k, err)) return false;
  s.top_k = static_cast<int>(top_k);
  int64_t last_n = s.repeat_last_n;
  if (!read_int(j, "repeat_last_n", -1, 1 << 30, &last_n, err)) return false;
  s.repeat_last_n = static_cast<int>(last_n);
  int64_t seed = s.seed == 0xFFFFFFFFu ? -1 : static_cast<int64_t>(s.seed);
  if (!read_int(j, "seed", std::numeric_limits<int64_t>::min(),
                std::numeric_limits<int64_t>::max(), &seed, err)) {
    return false;
  }
  s.seed = seed < 0 ? 0xFFFFFFFFu : static_cast<uint64_t>(seed);

  if (const json* stop = field(j, "stop")) {
    if (stop->is_string()) {
      if (!stop->get<std::string>().empty()) r->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        const json& st = (*stop)[i];
        if (!st.is_string()) {
          *err = type_error(strprintf("stop[%zu]", i), "a string", st);
          return false;
        }
        if (!st.get<std::string>().empty()) r->stop.push_back(st.get<std::string>());
      }
      if (r->stop.size() > 16) {
        *err = bad_request(strprintf("stop: expected at most 16 strings, got %zu", r->stop.size()));
        return false;
      }
    } else {
      *err = type_error("stop", "a string or an array of strings", *stop);
      return false;
    }
  }

  // One choice per request.
  if (const json* n = field(j, "n")) {
    if (!n->is_number_integer() || n->get<int64_t>() != 1) {
      *err = bad_request(n->is_number_integer()
                             ? strprintf("n: expected 1 (one choice per request), got %lld",
                                         static_cast<long long>(n->get<int64_t>()))
                             : type_error("n", "the integer 1", *n).message);
      return false;
    }
  }
  if (const json* g = field(j, "grammar")) {
    if (!g->is_string() || !g->get<std::string>().empty()) {
      *err = bad_request("grammar: GBNF grammars are not supported; use response_format "
                         "{\"type\":\"json_schema\",...} for structured output");
      return false;
    }
  }
  return true;
}

// response_format (and llama-server's json_schema field) -> a compiled grammar, or null for
// free text. Schemas are read again from the body as ordered JSON so that objects keep their
// keys in the schema's order.
bool read_response_format(const json& j, const std::string& body,
                          std::shared_ptr<const chat::JsonGrammar>* out, ApiError* err) {
  const json* rf = field(j, "response_format");
  const json* top_schema = field(j, "json_schema");
  if (rf == nullptr && top_schema == nullptr) return true;
  std::vector<std::string> path;  // where the schema sits in the body
  std::string where;
  if (rf != nullptr) {
    if (!rf->is_object()) {
      *err = type_error("response_format", "an object such as {\"type\": \"json_object\"}", *rf);
      return false;
    }
    const json* type = field(*rf, "type");
    if (type == nullptr || !type->is_string()) {
      *err = type == nullptr ? bad_request("response_format.type: expected \"text\", \"json_object\" or "
                                           "\"json_schema\", got nothing")
                             : type_error("response_format.type", "a string", *type);
      return false;
    }
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "text") {
      if (top_schema == nullptr) return true;
    } else if (t == "json_object") {
      if (field(*rf, "schema") != nullptr) {
        path = {"response_format", "schema"};
        where = "response_format.schema";
      } else if (top_schema == nullptr) {
        *out = chat::json_object_grammar();
        return true;
      }
    } else if (t == "json_schema") {
      const json* js = field(*rf, "json_schema");
      if (js == nullptr || !js->is_object()) {
        *err = js == nullptr ? bad_request("response_format.json_schema: expected an object with "
                                           "a \"schema\", got nothing")
                             : type_error("response_format.json_schema", "an object", *js);
        return false;
      }
      if (const json* name = field(*js, "name"); name != nullptr && !name->is_string()) {
        *err = type_error("response_format.json_schema.name", "a string", *name);
        return false;
      }
      path = {"response_format", "json_schema", "schema"};
      where = "response_format.json_schema.schema";
    } else {
      *err = bad_request("response_format.type: expected \"text\", \"json_object\" or "
                         "\"json_schema\", got \"" + t.substr(0, 64) + "\"");
      return false;
    }
  }
  if (path.empty()) {
    path = {"json_schema"};
    where = "json_schema";
  }
  nlohmann::ordered_json oj = nlohmann::ordered_json::parse(body, nullptr, false);
  const nlohmann::ordered_json* schema = &oj;
  for (const std::string& key : path) {
    if (schema == nullptr || !schema->is_object()) {
      schema = nullptr;
      break;
    }
    auto it = schema->find(key);
    schema = it == schema->end() || it->is_null() ? nullptr : &*it;
  }
  // An absent schema accepts any JSON value (llama-server's default).
  const nlohmann::ordered_json any = nlohmann::ordered_json::object();
  Result<std::shared_ptr<const chat::JsonGrammar>> g =
      chat::compile_json_schema(schema != nullptr ? *schema : any, where);
  if (!g.ok()) {
    *err = bad_request(g.message());
    return false;
  }
  *out = *g;
  return true;
}

}  // namespace

bool parse_reasoning_format(std::string_view name, ReasoningFormat* out) {
  if (name == "auto") {
    *out = ReasoningFormat::kAuto;
  } else if (name == "none") {
    *out = ReasoningFormat::kNone;
  } else if (name == "deepseek") {
    *out = ReasoningFormat::kDeepseek;
  } else if (name == "deepseek-legacy") {
    *out = ReasoningFormat::kDeepseekLegacy;
  } else {
    return false;
  }
  return true;
}

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::kAuto: return "auto";
    case ReasoningFormat::kNone: return "none";
    case ReasoningFormat::kDeepseek: return "deepseek";
    case ReasoningFormat::kDeepseekLegacy: return "deepseek-legacy";
  }
  return "auto";
}

bool parse_chat_request(const std::string& body, const RequestDefaults& defaults, ChatRequest* out,
                        ApiError* err) {
  json j;
  if (!parse_body(body, &j, err)) return false;
  ChatRequest r;
  r.reasoning_format = defaults.reasoning_format;
  r.reasoning_budget = defaults.reasoning_budget;
  // The thinking budget: reasoning_budget_tokens (or thinking_budget_tokens); -1 keeps the
  // server's; 0 turns thinking off.
  for (const char* key : {"thinking_budget_tokens", "reasoning_budget_tokens"}) {
    int64_t v = -1;
    if (!read_int(j, key, -1, std::numeric_limits<int32_t>::max(), &v, err)) return false;
    if (v >= 0) r.reasoning_budget = static_cast<int>(v);
  }
  {
    const bool thinking = defaults.enable_thinking && r.reasoning_budget != 0;
    Result<chat::ChatInput> in = chat::read_chat_input(j, thinking);
    if (!in.ok()) {
      *err = bad_request(in.message());
      return false;
    }
    r.messages = std::move(in->messages);
    r.tools = std::move(in->tools);
    r.enable_thinking = in->enable_thinking;
  }
  if (!read_generation(j, defaults, &r, err)) return false;
  if (const json* rf = field(j, "reasoning_format")) {
    if (!rf->is_string() ||
        !parse_reasoning_format(rf->get_ref<const std::string&>(), &r.reasoning_format)) {
      *err = rf->is_string() ? bad_request("reasoning_format: expected \"none\", \"auto\", \"deepseek\" "
                                           "or \"deepseek-legacy\", got \"" +
                                           rf->get<std::string>().substr(0, 64) + "\"")
                             : type_error("reasoning_format", "a string", *rf);
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

  // logprobs (bool) with top_logprobs (0-20 alternatives).
  bool logprobs = false;
  if (!read_bool(j, "logprobs", &logprobs, err)) return false;
  int64_t top = 0;
  if (!read_int(j, "top_logprobs", 0, kMaxTopLogprobs, &top, err)) return false;
  if (field(j, "top_logprobs") != nullptr && !logprobs) {
    *err = bad_request("top_logprobs: requires \"logprobs\": true");
    return false;
  }
  r.top_logprobs = logprobs ? static_cast<int>(top) : -1;

  if (!read_response_format(j, body, &r.json_grammar, err)) return false;
  if (r.json_grammar && (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed)) {
    *err = bad_request("response_format: a JSON reply cannot be combined with a required tool call "
                       "(tool_choice); use one of them");
    return false;
  }
  *out = std::move(r);
  return true;
}

bool parse_completion_request(const std::string& body, const RequestDefaults& defaults,
                              CompletionRequest* out, ApiError* err) {
  json j;
  if (!parse_body(body, &j, err)) return false;
  CompletionRequest r;
  if (!read_generation(j, defaults, &r, err)) return false;
  const json* prompt = field(j, "prompt");
  if (prompt == nullptr) {
    *err = bad_request("prompt: expected a string or an array of token ids (the field is required), "
                       "got nothing");
    return false;
  }
  json p = *prompt;
  // ["one prompt"] is that prompt; more strings would be more prompts (more choices).
  if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& e) {
        return e.is_string() || e.is_array();
      })) {
    if (p.size() > 1) {
      *err = bad_request(strprintf("prompt: expected one prompt (one choice per request), got %zu",
                                   p.size()));
      return false;
    }
    json first = p[0];
    p = std::move(first);
  }
  if (p.is_string()) {
    if (p.get_ref<const std::string&>().empty()) {
      *err = bad_request("prompt: expected a non-empty string, got \"\"");
      return false;
    }
  } else if (p.is_array()) {
    if (p.empty()) {
      *err = bad_request("prompt: expected a non-empty array of token ids, got []");
      return false;
    }
    for (size_t i = 0; i < p.size(); ++i) {
      if (!p[i].is_string() && !p[i].is_number_integer()) {
        *err = type_error(strprintf("prompt[%zu]", i), "a token id (an integer) or a string", p[i]);
        return false;
      }
    }
  } else {
    *err = type_error("prompt", "a string or an array of token ids", p);
    return false;
  }
  r.prompt = std::move(p);
  if (const json* echo = field(j, "echo"); echo != nullptr && (!echo->is_boolean() || echo->get<bool>())) {
    *err = bad_request("echo: expected false (echoing the prompt is not supported)");
    return false;
  }
  for (const char* key : {"best_of", "suffix"}) {
    if (field(j, key) != nullptr) {
      *err = bad_request(std::string(key) + ": not supported by this server");
      return false;
    }
  }
  // logprobs here is a count of alternatives (OpenAI's legacy completions; llama-server's n_probs).
  if (const json* lp = field(j, "logprobs")) {
    if (lp->is_boolean()) {
      r.top_logprobs = lp->get<bool>() ? 0 : -1;
    } else {
      int64_t n = 0;
      if (!read_int(j, "logprobs", 0, kMaxTopLogprobs, &n, err)) return false;
      r.top_logprobs = static_cast<int>(n);
    }
  }
  *out = std::move(r);
  return true;
}

bool build_completion_prompt(const CompletionRequest& request, const Tokenizer& tokenizer,
                             std::vector<int32_t>* ids, ApiError* err) {
  ids->clear();
  const int n_vocab = tokenizer.n_vocab();
  auto add_text = [&](const std::string& text, bool first) {
    std::vector<int32_t> t = tokenizer.encode(text, /*add_bos=*/first, /*parse_special=*/true);
    ids->insert(ids->end(), t.begin(), t.end());
  };
  if (request.prompt.is_string()) {
    add_text(request.prompt.get<std::string>(), true);
    return true;
  }
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    const json& e = request.prompt[i];
    if (e.is_string()) {
      add_text(e.get<std::string>(), i == 0);
      continue;
    }
    const bool in_range = e.is_number_unsigned() ? e.get<uint64_t>() < static_cast<uint64_t>(n_vocab)
                                                 : e.get<int64_t>() >= 0 && e.get<int64_t>() < n_vocab;
    if (!in_range) {
      *err = bad_request(strprintf("prompt[%zu]: expected a token id in [0, %d), got %s", i, n_vocab,
                                   e.dump().c_str()));
      return false;
    }
    ids->push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  if (ids->empty()) {
    *err = bad_request("prompt: expected text or token ids, got nothing to evaluate");
    return false;
  }
  return true;
}

namespace {

// A token's bytes as llama-server shows them: "token" is the longest valid UTF-8 prefix (a
// character split across tokens shows in the token that completes it), "bytes" all of them.
json token_fields(const Tokenizer& tokenizer, int32_t id) {
  const std::string_view piece = tokenizer.piece_view(id, /*render_special=*/true);
  size_t valid = 0;
  for (size_t i = 0; i < piece.size();) {
    const auto c = static_cast<uint8_t>(piece[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > piece.size()) break;
    bool ok = true;
    for (size_t k = 1; k < len; ++k) ok &= (static_cast<uint8_t>(piece[i + k]) & 0xC0) == 0x80;
    if (!ok) break;
    i += len;
    valid = i;
  }
  json bytes = json::array();
  for (char c : piece) bytes.push_back(static_cast<int>(static_cast<uint8_t>(c)));
  return json{{"id", id}, {"token", std::string(piece.substr(0, valid))}, {"bytes", std::move(bytes)}};
}

}  // namespace

json logprob_entry(const TokenLogprobs& logprobs, int32_t token, const Tokenizer& tokenizer) {
  auto finite = [](float lp) {
    return std::isfinite(lp) ? static_cast<double>(lp)
                             : static_cast<double>(std::numeric_limits<float>::lowest());
  };
  json entry = token_fields(tokenizer, token);
  entry["logprob"] = finite(logprobs.logprob);
  json top = json::array();
  for (const auto& [id, lp] : logprobs.top) {
    json alt = token_fields(tokenizer, id);
    alt["logprob"] = finite(lp);
    top.push_back(std::move(alt));
  }
  entry["top_logprobs"] = std::move(top);
  return entry;
}

bool tokenize_route(const std::string& body, const Tokenizer& tokenizer, json* out, ApiError* err) {
  json j;
  if (!parse_body(body, &j, err)) return false;
  bool add_special = false, parse_special = true, with_pieces = false;
  if (!read_bool(j, "add_special", &add_special, err)) return false;
  if (!read_bool(j, "parse_special", &parse_special, err)) return false;
  if (!read_bool(j, "with_pieces", &with_pieces, err)) return false;
  json tokens = json::array();
  if (const json* content = field(j, "content")) {
    if (!content->is_string()) {
      *err = type_error("content", "a string", *content);
      return false;
    }
    for (int32_t id : tokenizer.encode(content->get<std::string>(), add_special, parse_special)) {
      if (!with_pieces) {
        tokens.push_back(id);
        continue;
      }
      // The piece as a string when it is valid UTF-8, else as its byte values (llama-server).
      json f = token_fields(tokenizer, id);
      json piece = f["token"].get<std::string>().size() == f["bytes"].size()
                       ? json(f["token"])
                       : f["bytes"];
      tokens.push_back(json{{"id", id}, {"piece", std::move(piece)}});
    }
  }
  *out = json{{"tokens", std::move(tokens)}};
  return true;
}

bool detokenize_route(const std::string& body, const Tokenizer& tokenizer, json* out, ApiError* err) {
  json j;
  if (!parse_body(body, &j, err)) return false;
  std::vector<int32_t> ids;
  if (const json* tokens = field(j, "tokens")) {
    if (!tokens->is_array()) {
      *err = type_error("tokens", "an array of token ids", *tokens);
      return false;
    }
    const int n_vocab = tokenizer.n_vocab();
    for (size_t i = 0; i < tokens->size(); ++i) {
      const json& t = (*tokens)[i];
      if (!t.is_number_integer()) {
        *err = type_error(strprintf("tokens[%zu]", i), "a token id (an integer)", t);
        return false;
      }
      const bool in_range = t.is_number_unsigned() ? t.get<uint64_t>() < static_cast<uint64_t>(n_vocab)
                                                   : t.get<int64_t>() >= 0 && t.get<int64_t>() < n_vocab;
      if (!in_range) {
        *err = bad_request(strprintf("tokens[%zu]: expected a token id in [0, %d), got %s", i,
                                     n_vocab, t.dump().c_str()));
        return false;
      }
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  *out = json{{"content", tokenizer.decode(ids, /*render_special=*/true)}};
  return true;
}

bool apply_template_route(const std::string& body, const RequestDefaults& defaults, json* out,
                          ApiError* err) {
  ChatRequest r;
  if (!parse_chat_request(body, defaults, &r, err)) return false;
  chat::RenderOptions ro;
  ro.add_generation_prompt = true;
  ro.enable_thinking = r.enable_thinking;
  ro.reopen_model_turn = true;
  Result<std::string> text = chat::render(r.messages, r.tools, ro);
  if (!text.ok()) {
    *err = bad_request("cannot format the conversation: " + text.message());
    return false;
  }
  *out = json{{"prompt", *text}};
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

json completion_chunk_json(const ResponseMeta& meta, const std::string& text,
                           const json& finish_reason) {
  return json{{"choices", json::array({json{{"text", text},
                                             {"index", 0},
                                             {"logprobs", nullptr},
                                             {"finish_reason", finish_reason}}})},
              {"created", meta.created},
              {"id", meta.id},
              {"model", meta.model},
              {"system_fingerprint", meta.fingerprint},
              {"object", "text_completion"}};
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
  json t = json{{"cache_n", r.n_cached},
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
  if (r.n_drafted > 0) {  // llama-server's fields when drafting
    t["draft_n"] = r.n_drafted;
    t["draft_n_accepted"] = r.n_draft_accepted;
  }
  return t;
}

DeltaAssembler::DeltaAssembler(std::vector<std::string> stop, std::mt19937_64* rng,
                               ReasoningFormat reasoning_format)
    : stop_(std::move(stop)),
      rng_(rng),
      reasoning_field_(reasoning_format != ReasoningFormat::kNone),
      reasoning_in_content_(reasoning_format == ReasoningFormat::kNone ||
                            reasoning_format == ReasoningFormat::kDeepseekLegacy) {}

void DeltaAssembler::emit_content(const std::string& text, std::vector<json>& deltas) {
  if (text.empty()) return;
  content_ += text;
  deltas.push_back(json{{"content", text}});
}

// Content with stop strings applied: text that may begin a stop string is held back until it
// is known not to.
void DeltaAssembler::add_content(const std::string& text, std::vector<json>& deltas) {
  if (stopped_) return;
  if (stop_.empty()) {
    emit_content(text, deltas);
    return;
  }
  held_ += text;
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    emit_content(held_.substr(0, cut), deltas);
    held_.clear();
    stopped_ = true;
    return;
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
}

bool DeltaAssembler::add(const chat::Event& e, std::vector<json>& deltas) {
  if (stopped_) return true;
  // reasoning_format none / deepseek-legacy: the thought stays in the content, between the
  // markers the model wrote (llama-server leaves it unparsed there).
  if (reasoning_in_content_) {
    if (e.kind == chat::EventKind::kReasoning && !in_thought_) {
      in_thought_ = true;
      add_content(std::string(chat::grammar::kChannelOpen) + std::string(chat::grammar::kThoughtWord) + "\n",
                  deltas);
    } else if (e.kind != chat::EventKind::kReasoning && in_thought_) {
      in_thought_ = false;
      add_content(std::string(chat::grammar::kChannelClose), deltas);
    }
    if (stopped_) return true;
  }
  switch (e.kind) {
    case chat::EventKind::kReasoning:
      if (!e.text.empty() && reasoning_field_) {
        reasoning_ += e.text;
        deltas.push_back(json{{"reasoning_content", e.text}});
      }
      if (reasoning_in_content_) add_content(e.text, deltas);
      break;
    case chat::EventKind::kContent:
      add_content(e.text, deltas);
      break;
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
