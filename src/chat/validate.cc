// The chat request validator (validate.h). Nothing here recurses over request JSON: depth is
// checked iteratively first, and the checks below walk only fixed levels (messages, parts,
// calls), so hostile nesting is an error, never a stack overflow.
#include "chat/validate.h"

#include <utility>
#include <vector>

#include "chat/grammar.h"

namespace gem::chat {
namespace {

using json = nlohmann::json;
using detail::at_index;
using detail::at_key;
using detail::get;
using detail::type_error;
using detail::type_name;

// A field that is present and not null.
const json* given(const json& obj, const char* key) {
  const json* v = get(obj, key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

bool is_known_role(const std::string& r) {
  return r == "system" || r == "developer" || r == "user" || r == "assistant" || r == "tool";
}

// A path element for an error message: long keys are cut (a path names, it does not quote).
std::string path_key(const std::string& key) {
  constexpr size_t kMax = 40;
  return key.size() <= kMax ? key : key.substr(0, kMax) + "...";
}

// The content of one message as the renderer reads it: a string, or null.
Result<json> normalise_content(const json& msg, const std::string& where, const std::string& role) {
  const json* content = given(msg, "content");
  const std::string cw = at_key(where, "content");
  if (content == nullptr) {
    if (role == "assistant") return json();
    return errorf("%s: expected a string or an array of text parts (a %s message needs content), "
                  "got %s", cw.c_str(), role.c_str(), get(msg, "content") ? "null" : "nothing");
  }
  if (content->is_string()) return *content;
  if (!content->is_array()) {
    return type_error(cw, "a string, null or an array of text parts", *content);
  }
  std::string text;
  for (size_t j = 0; j < content->size(); ++j) {
    const json& part = (*content)[j];
    const std::string pw = at_index(cw, j);
    if (!part.is_object()) return type_error(pw, "a content part object", part);
    const json* type = get(part, "type");
    if (type == nullptr || !type->is_string()) {
      return errorf("%s.type: expected a string (\"text\"), got %s", pw.c_str(),
                    type == nullptr ? "nothing" : type_name(*type));
    }
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "image_url" || t == "input_image" || t == "image") {
      return errorf("%s.type: expected \"text\", got \"%s\": image input is not supported (gem "
                    "serves a text-only model; /props says modalities.vision = false)",
                    pw.c_str(), t.c_str());
    }
    if (t == "input_audio" || t == "audio") {
      return errorf("%s.type: expected \"text\", got \"%s\": audio input is not supported (gem "
                    "serves a text-only model)", pw.c_str(), t.c_str());
    }
    if (t != "text") {
      return errorf("%s.type: expected \"text\", got \"%s\" (gem serves a text-only model: only "
                    "text parts are read)", pw.c_str(), t.c_str());
    }
    const json* part_text = get(part, "text");
    if (part_text == nullptr || !part_text->is_string()) {
      return errorf("%s.text: expected a string, got %s", pw.c_str(),
                    part_text == nullptr ? "nothing" : type_name(*part_text));
    }
    if (j > 0) text += '\n';
    text += part_text->get_ref<const std::string&>();
  }
  return json(std::move(text));
}

// Parses string arguments into the object the template needs (as transformers passes them).
Result<json> normalise_arguments(const json* args, const std::string& where) {
  if (args == nullptr || args->is_null() || args->is_object()) {
    return args == nullptr ? json() : *args;
  }
  if (!args->is_string()) return type_error(where, "a JSON object or a string holding one", *args);
  const std::string& s = args->get_ref<const std::string&>();
  if (detail::python_strip(s).empty()) return json::object();
  // nlohmann's parser is iterative, so a deeply nested string parses without recursion; the
  // depth is checked before anything walks the result.
  json parsed = json::parse(s, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return errorf("%s: expected a string holding a JSON object, got \"%.80s\"", where.c_str(),
                  s.c_str());
  }
  GEM_RETURN_IF_ERROR(check_depth(parsed, where));
  return parsed;
}

Status validate_optional_string(const json& obj, const char* key, const std::string& where) {
  const json* v = given(obj, key);
  if (v != nullptr && !v->is_string()) return type_error(at_key(where, key), "a string", *v);
  return ok_status();
}

}  // namespace

Status check_depth(const json& value, const std::string& where, int max_depth) {
  if (!value.is_structured()) return ok_status();
  if (max_depth < 1) return detail::depth_error(where, max_depth);
  struct Frame {
    const json* node;
    json::const_iterator it;
    size_t index;
  };
  std::vector<Frame> stack;
  stack.push_back({&value, value.cbegin(), 0});
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.it == f.node->cend()) {
      stack.pop_back();
      if (!stack.empty()) {
        ++stack.back().it;
        ++stack.back().index;
      }
      continue;
    }
    const json& child = *f.it;
    if (!child.is_structured()) {
      ++f.it;
      ++f.index;
      continue;
    }
    if (static_cast<int>(stack.size()) >= max_depth) {
      std::string path = where;
      for (const Frame& fr : stack) {
        path = fr.node->is_object() ? at_key(path, path_key(fr.it.key())) : at_index(path, fr.index);
      }
      return detail::depth_error(path, max_depth);
    }
    stack.push_back({&child, child.cbegin(), 0});
  }
  return ok_status();
}

Result<json> validate_tools(const json& tools) {
  if (tools.is_null()) return json::array();
  if (!tools.is_array()) return type_error("tools", "an array of tool objects", tools);
  GEM_RETURN_IF_ERROR(check_depth(tools, "tools"));
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& tool = tools[i];
    const std::string tw = at_index("tools", i);
    if (!tool.is_object()) return type_error(tw, "a tool object", tool);
    if (const json* type = get(tool, "type")) {
      if (!type->is_string() || type->get_ref<const std::string&>() != "function") {
        return errorf("%s.type: expected \"function\" (only function tools are supported), got %s",
                      tw.c_str(), type->dump().c_str());
      }
    }
    const json* fn = get(tool, "function");
    const std::string fw = at_key(tw, "function");
    if (fn == nullptr) return errorf("%s: expected a function object, got nothing", fw.c_str());
    if (!fn->is_object()) return type_error(fw, "a function object", *fn);
    const json* name = get(*fn, "name");
    if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      return errorf("%s.name: expected a non-empty string, got %s", fw.c_str(),
                    name == nullptr ? "nothing" : name->is_string() ? "\"\"" : type_name(*name));
    }
    const std::string& n = name->get_ref<const std::string&>();
    for (char c : n) {
      if (grammar::is_name_breaker(c)) {
        return errorf("%s.name: expected a name without whitespace or any of , : { } [ ] (the "
                      "Gemma 4 call syntax ends a name there), got \"%.80s\"", fw.c_str(),
                      n.c_str());
      }
    }
    GEM_RETURN_IF_ERROR(validate_optional_string(*fn, "description", fw));
    if (const json* params = given(*fn, "parameters")) {
      const std::string pw = at_key(fw, "parameters");
      if (!params->is_object()) return type_error(pw, "a JSON schema object", *params);
      if (const json* props = given(*params, "properties")) {
        if (!props->is_object()) {
          return type_error(at_key(pw, "properties"), "an object of property schemas", *props);
        }
      }
      if (const json* req = given(*params, "required")) {
        if (!req->is_array()) return type_error(at_key(pw, "required"), "an array of property names", *req);
      }
    }
    if (const json* resp = given(*fn, "response")) {
      if (!resp->is_object()) return type_error(at_key(fw, "response"), "a schema object", *resp);
    }
  }
  return tools;
}

Result<json> validate_messages(const json& messages) {
  if (!messages.is_array()) return type_error("messages", "an array of messages", messages);
  if (messages.empty()) return errorf("messages: expected at least one message, got none");
  // Before the copy below (nlohmann copies recursively).
  GEM_RETURN_IF_ERROR(check_depth(messages, "messages"));
  json out = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& in = messages[i];
    const std::string mw = at_index("messages", i);
    if (!in.is_object()) return type_error(mw, "a message object", in);
    const json* role = get(in, "role");
    if (role == nullptr || !role->is_string()) {
      return errorf("%s.role: expected system, developer, user, assistant or tool, got %s",
                    mw.c_str(), role == nullptr ? "nothing" : type_name(*role));
    }
    std::string r = role->get<std::string>();
    if (!is_known_role(r)) {
      return errorf("%s.role: expected system, developer, user, assistant or tool, got \"%s\"",
                    mw.c_str(), r.c_str());
    }
    if (r == "developer") r = "system";
    json msg = in;
    msg["role"] = r;
    GEM_ASSIGN_OR_RETURN(msg["content"], normalise_content(in, mw, r));
    for (const char* key : {"reasoning", "reasoning_content", "tool_call_id", "name"}) {
      GEM_RETURN_IF_ERROR(validate_optional_string(in, key, mw));
    }
    const json* calls = given(in, "tool_calls");
    if (calls != nullptr) {
      const std::string cw = at_key(mw, "tool_calls");
      if (r != "assistant") {
        return errorf("%s: expected no tool calls on a %s message (only assistant messages carry "
                      "them), got %s", cw.c_str(), r.c_str(), type_name(*calls));
      }
      if (!calls->is_array()) return type_error(cw, "an array of tool calls", *calls);
      for (size_t j = 0; j < calls->size(); ++j) {
        json& call = msg["tool_calls"][j];
        const std::string callw = at_index(cw, j);
        if (!call.is_object()) return type_error(callw, "a tool call object", call);
        GEM_RETURN_IF_ERROR(validate_optional_string(call, "id", callw));
        const std::string fw = at_key(callw, "function");
        json* fn = call.contains("function") ? &call["function"] : nullptr;
        if (fn == nullptr || !fn->is_object()) {
          return errorf("%s: expected a function object, got %s", fw.c_str(),
                        fn == nullptr ? "nothing" : type_name(*fn));
        }
        const json* name = get(*fn, "name");
        if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
          return errorf("%s.name: expected a non-empty string (a tool call needs a name), got %s",
                        fw.c_str(),
                        name == nullptr ? "nothing" : name->is_string() ? "\"\"" : type_name(*name));
        }
        GEM_ASSIGN_OR_RETURN(json args, normalise_arguments(get(*fn, "arguments"),
                                                            at_key(fw, "arguments")));
        if (fn->contains("arguments")) (*fn)["arguments"] = std::move(args);
      }
    } else if (msg.contains("tool_calls")) {
      msg.erase("tool_calls");  // null
    }
    const json* responses = given(in, "tool_responses");
    if (responses != nullptr) {
      const std::string rw = at_key(mw, "tool_responses");
      if (r != "assistant") {
        return errorf("%s: expected no tool_responses on a %s message (only assistant messages "
                      "carry them), got %s", rw.c_str(), r.c_str(), type_name(*responses));
      }
      if (!responses->is_array()) return type_error(rw, "an array", *responses);
      for (size_t j = 0; j < responses->size(); ++j) {
        const json& tr = (*responses)[j];
        if (!tr.is_object()) return type_error(at_index(rw, j), "an object", tr);
        const json* name = get(tr, "name");
        if (name != nullptr && !name->is_string()) {
          return type_error(at_key(at_index(rw, j), "name"), "a string", *name);
        }
      }
    }
    out.push_back(std::move(msg));
  }
  // Parsed arguments strings sit deeper than the strings did.
  GEM_RETURN_IF_ERROR(check_depth(out, "messages"));
  return out;
}

Result<ChatInput> read_chat_input(const json& request, bool default_thinking) {
  if (!request.is_object()) return type_error("the request body", "a JSON object", request);
  ChatInput in;
  const json* messages = given(request, "messages");
  if (messages == nullptr) {
    return errorf("messages: expected an array of messages (the field is required), got %s",
                  request.contains("messages") ? "null" : "nothing");
  }
  GEM_ASSIGN_OR_RETURN(in.messages, validate_messages(*messages));
  const json* tools = get(request, "tools");
  // (Not `tools ? *tools : json()`: that would copy the unchecked tools, recursively.)
  GEM_ASSIGN_OR_RETURN(in.tools, tools != nullptr ? validate_tools(*tools) : validate_tools(json()));
  in.enable_thinking = default_thinking;
  if (const json* effort = given(request, "reasoning_effort")) {
    if (!effort->is_string()) return type_error("reasoning_effort", "a string", *effort);
    if (effort->get_ref<const std::string&>() == "none") in.enable_thinking = false;
  }
  if (const json* kw = given(request, "chat_template_kwargs")) {
    if (!kw->is_object()) return type_error("chat_template_kwargs", "an object", *kw);
    if (const json* et = given(*kw, "enable_thinking")) {
      if (!et->is_boolean()) {
        return type_error("chat_template_kwargs.enable_thinking", "true or false", *et);
      }
      in.enable_thinking = et->get<bool>();
    }
  }
  return in;
}

}  // namespace gem::chat
