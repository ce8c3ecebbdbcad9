// `gem template`: an OpenAI chat request on stdin -> the Gemma 4 prompt gem serve renders for it
// (the official template's text, byte for byte, for the validated messages), or its token ids
// with exactly one <bos>, tokenized as the server does (message text as text).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "chat/chat.h"
#include "chat/validate.h"
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

// The request fields that shape the prompt, read by the server's validator
// (chat::read_chat_input), plus the one option only this command has.
Result<chat::ChatInput> read_request(const json& req, bool default_thinking,
                                     chat::RenderOptions* opt) {
  GEM_ASSIGN_OR_RETURN(chat::ChatInput in, chat::read_chat_input(req, default_thinking));
  opt->enable_thinking = in.enable_thinking;
  if (req.contains("add_generation_prompt") && !req["add_generation_prompt"].is_null()) {
    if (!req["add_generation_prompt"].is_boolean()) {
      return errorf("add_generation_prompt: expected true or false, got %s",
                    req["add_generation_prompt"].dump().c_str());
    }
    opt->add_generation_prompt = req["add_generation_prompt"].get<bool>();
  }
  return in;
}

RunFn setup_template(CLI::App& sub) {
  auto a = std::make_shared<TemplateArgs>();
  sub.add_option("-m,--model", a->model, "Gemma 4 GGUF (only its tokenizer is read; needed for --ids)");
  sub.add_flag("--ids", a->ids, "print the prompt's token ids (one <bos>), as a list like [2, 105]");
  sub.add_flag("--no-thinking", a->no_thinking,
               "thinking off unless the request asks (chat_template_kwargs.enable_thinking, "
               "which decides when given; otherwise reasoning_effort \"none\" turns it off), "
               "as gem serve reads it");
  sub.add_flag("--reopen-turn", a->reopen_turn,
               "open a new model turn where the template closed it after tool results "
               "(what gem serve does; see chat::RenderOptions::reopen_model_turn)");
  return [a]() -> int {
    const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const json req = json::parse(input, nullptr, /*allow_exceptions=*/false);
    if (req.is_discarded()) return fail("template", "stdin is not valid JSON");
    chat::RenderOptions opt;
    opt.reopen_model_turn = a->reopen_turn;
    auto in = read_request(req, !a->no_thinking, &opt);
    if (!in.ok()) return fail("template", in.message());
    // With --ids the tokenizer adds the one <bos>, so the template's "<bos>" text is left out.
    opt.emit_bos_text = !a->ids;
    auto prompt = chat::render_prompt(in->messages, in->tools, opt);
    if (!prompt.ok()) return fail("template", prompt.message());
    if (!a->ids) {
      std::fwrite(prompt->text.data(), 1, prompt->text.size(), stdout);
      return 0;
    }
    if (a->model.empty()) return fail("template", "--ids needs -m MODEL.gguf (for its tokenizer)");
    auto file = gguf::GgufFile::open(a->model);
    if (!file.ok()) return fail("template", file.message());
    auto tok = Tokenizer::from_gguf(**file);
    if (!tok.ok()) return fail("template", tok.message());
    // As gem serve tokenizes it: message text as text, one <bos>.
    const std::vector<int32_t> ids = chat::tokenize_prompt(*prompt, **tok, /*add_bos=*/true).ids;
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
