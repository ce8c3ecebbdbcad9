// prepare.h: body -> tokens.
#include "server/prepare.h"

#include "chat/chat.h"
#include "server/json_limits.h"

namespace gem::server {

bool prepare_chat(const std::string& body, int max_json_depth, const SamplingParams& defaults,
                  const Tokenizer& tok, PreparedChat* out, ApiError* err) {
  size_t deep_at = 0;
  if (!json_depth_within(body, max_json_depth, &deep_at)) {
    *err = bad_request(json_depth_message("request body", max_json_depth, deep_at));
    return false;
  }
  if (!parse_chat_request(body, defaults, &out->req, err)) return false;
  const ChatRequest& cr = out->req;
  chat::RenderOptions ro;
  ro.add_generation_prompt = true;
  ro.enable_thinking = cr.enable_thinking;
  ro.emit_bos_text = false;  // the tokenizer adds <bos> (spec §6.4: no double BOS)
  ro.reopen_model_turn = true;
  Result<std::string> text = chat::render(cr.messages, cr.tools, ro);
  if (!text.ok()) {
    *err = bad_request("cannot format the conversation: " + text.message());
    return false;
  }
  // The conversation part and the rest are encoded apart (the rest starts with a special token,
  // where the tokenizer cuts the text anyway), so the engine knows where the history ends: with
  // thinking off the generation prompt's empty thought channel is not rendered back next turn,
  // and only the history before it stays cached (engine.h).
  const std::string_view rendered(*text);
  const size_t history_bytes = chat::history_size(rendered, ro);
  out->prompt = tok.encode(rendered.substr(0, history_bytes), /*add_bos=*/true,
                           /*parse_special=*/true);
  out->n_history = static_cast<int>(out->prompt.size());
  if (history_bytes < rendered.size()) {
    const std::vector<int32_t> rest =
        tok.encode(rendered.substr(history_bytes), /*add_bos=*/false, /*parse_special=*/true);
    out->prompt.insert(out->prompt.end(), rest.begin(), rest.end());
  }
  return true;
}

}  // namespace gem::server
