// `gem template`: an OpenAI chat request on stdin -> the Gemma 4 prompt gem renders for it (the
// official template's text, byte for byte), or its token ids with exactly one <bos>.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "chat/chat.h"
#include "cli/command.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace gem::cli {
namespace {

using json = nlohmann::json;

struct TemplateArgs {
  std::string model;
  bool ids = false;
  bool no_thinking = false;
  bool reopen_turn = false;
};

// The request fields that shape the prompt: messages, tools, thinking, generation prompt.
Status read_request(const json& req, bool default_thinking, json* messages, json* tools,
                    chat::RenderOptions* opt) {
  if (!req.is_object()) return Status::error("the request must be a JSON object");
  if (!req.contains("messages")) return Status::error("the request has no \"messages\"");
  *messages = req["messages"];
  *tools = req.contains("tools") ? req["tools"] : json();
  opt->enable_thinking = default_thinking;
  if (req.contains("chat_template_kwargs")) {
    const json& kw = req["chat_template_kwargs"];
    if (!kw.is_object()) return Status::error("chat_template_kwargs: expected an object");
    if (kw.contains("enable_thinking")) {
      if (!kw["enable_thinking"].is_boolean()) {
        return errorf("chat_template_kwargs.enable_thinking: expected true or false, got %s",
                      kw["enable_thinking"].dump().c_str());
      }
      opt->enable_thinking = kw["enable_thinking"].get<bool>();
    }
  }
  if (req.contains("reasoning_effort")) {
    const json& effort = req["reasoning_effort"];
    if (!effort.is_string() && !effort.is_null()) {
      return errorf("reasoning_effort: expected a string, got %s", effort.dump().c_str());
    }
    if (effort.is_string() && effort.get<std::string>() == "none") opt->enable_thinking = false;
  }
  if (req.contains("add_generation_prompt")) {
    if (!req["add_generation_prompt"].is_boolean()) {
      return Status::error("add_generation_prompt: expected true or false");
    }
    opt->add_generation_prompt = req["add_generation_prompt"].get<bool>();
  }
  return ok_status();
}

RunFn setup_template(CLI::App& sub) {
  auto a = std::make_shared<TemplateArgs>();
  sub.add_option("-m,--model", a->model, "Gemma 4 GGUF (only its tokenizer is read; needed for --ids)");
  sub.add_flag("--ids", a->ids, "print the prompt's token ids (one <bos>), as a list like [2, 105]");
  sub.add_flag("--no-thinking", a->no_thinking,
               "thinking off unless the request asks (chat_template_kwargs.enable_thinking); "
               "reasoning_effort \"none\" always turns it off");
  sub.add_flag("--reopen-turn", a->reopen_turn,
               "open a new model turn where the template closed it after tool results "
               "(what gem serve does; see chat::RenderOptions::reopen_model_turn)");
  return [a]() -> int {
    const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const json req = json::parse(input, nullptr, /*allow_exceptions=*/false);
    if (req.is_discarded()) return fail("template", "stdin is not valid JSON");
    json messages, tools;
    chat::RenderOptions opt;
    opt.reopen_model_turn = a->reopen_turn;
    const Status st = read_request(req, !a->no_thinking, &messages, &tools, &opt);
    if (!st.ok()) return fail("template", st.message());
    // With --ids the tokenizer adds the one <bos>, so the template's "<bos>" text is left out.
    opt.emit_bos_text = !a->ids;
    auto prompt = chat::render(messages, tools, opt);
    if (!prompt.ok()) return fail("template", prompt.message());
    if (!a->ids) {
      std::fwrite(prompt->data(), 1, prompt->size(), stdout);
      return 0;
    }
    if (a->model.empty()) return fail("template", "--ids needs -m MODEL.gguf (for its tokenizer)");
    auto file = gguf::GgufFile::open(a->model);
    if (!file.ok()) return fail("template", file.message());
    auto tok = Tokenizer::from_gguf(**file);
    if (!tok.ok()) return fail("template", tok.message());
    const std::vector<int32_t> ids = (*tok)->encode(*prompt, /*add_bos=*/true, /*parse_special=*/true);
    std::string line = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) line += ", ";
      line += std::to_string(ids[i]);
    }
    line += "]\n";
    std::fputs(line.c_str(), stdout);
    return 0;
  };
}

GEM_COMMAND(template, "render an OpenAI chat request (stdin) as the Gemma 4 prompt, or its token ids",
            setup_template);

}  // namespace
}  // namespace gem::cli
