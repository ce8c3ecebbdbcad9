// The request path from body bytes to prompt tokens, shared by the server and the request fuzzer
// (fuzz/request_fuzz.cc), so the fuzzer exercises exactly what a client reaches: the nesting
// bound, parse_chat_request (validation), chat::render and the tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sampler/sampler.h"
#include "server/api.h"
#include "tokenizer/tokenizer.h"

namespace gem::server {

struct PreparedChat {
  ChatRequest req;
  std::vector<int32_t> prompt;
  int n_history = -1;  // prompt tokens the engine keeps cached afterwards (engine.h)
};

// Body -> validated request -> rendered conversation -> tokens. Any failure is a 4xx in *err.
// The body is read as JSON whatever its declared content type; its nesting is checked against
// `max_json_depth` before anything recursive sees it.
bool prepare_chat(const std::string& body, int max_json_depth, const RequestDefaults& defaults,
                  const Tokenizer& tokenizer, PreparedChat* out, ApiError* err);

}  // namespace gem::server
