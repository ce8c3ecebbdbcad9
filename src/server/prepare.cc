// prepare.h: body -> tokens.
#include "server/prepare.h"

#include "server/json_limits.h"

namespace gem::server {

bool prepare_chat(const std::string& body, int max_json_depth, const RequestDefaults& defaults,
                  const Tokenizer& tok, PreparedChat* out, ApiError* err) {
  size_t deep_at = 0;
  if (!json_depth_within(body, max_json_depth, &deep_at)) {
    *err = bad_request(json_depth_message("request body", max_json_depth, deep_at));
    return false;
  }
  if (!parse_chat_request(body, defaults, &out->req, err)) return false;
  // Message text is tokenized as text; n_history marks where the conversation ends (engine.h).
  return build_prompt(out->req, tok, &out->prompt, &out->n_history, err);
}

}  // namespace gem::server
