// ScriptedBackend: a TEST-ONLY Backend that computes no model. It keeps the token history as its
// "KV cache" and returns logits that put a huge value on the next token of a script chosen for
// the current prompt, so the real engine, parser and SSE code can be driven through tool calls,
// reasoning and text deterministically. Without a script its logits are a pseudo-random
// function of the whole history (so a leaked or lost token changes every later output).
// Reachable from the CLI only as `gem serve --backend scripted:FILE` (tests/e2e, scripts/soak).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace gem::runtime {

// Returns the scripted continuation for a prompt (the tokens before the first generated one), or
// an empty vector to use history-hash logits instead.
using ScriptFn = std::function<std::vector<int32_t>(std::span<const int32_t> prompt)>;

struct ScriptedOptions {
  int n_vocab = 262144;
  int token_delay_us = 0;  // slept per evaluated token (simulates a slow model)
  int tile_delay_us = 0;   // slept per prompt tile (evals of more than one token)
};

class ScriptedBackend : public Backend {
 public:
  ScriptedBackend(BackendOptions options, ScriptedOptions scripted, ScriptFn script);

  std::string_view name() const override { return "scripted"; }
  const BackendOptions& options() const override { return options_; }
  int n_past() const override { return static_cast<int>(tokens_.size()); }
  Status eval(std::span<const int32_t> tokens, bool all_logits,
              const TileCallback& on_tile = {}) override;
  std::span<const float> logits(int row = -1) override;
  void checkpoint() override;
  void restore() override;
  void reset() override;

  // Test introspection.
  int64_t n_evaluated_total() const { return n_evaluated_total_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  BackendOptions options_;
  ScriptedOptions scripted_;
  ScriptFn script_;
  // Where the prompt ends, so the script plays from there. The engine may checkpoint inside the
  // prompt (a history boundary) and evaluate the rest of it afterwards, so the prompt ends at the
  // checkpoint or after the last eval of several tokens (decode steps evaluate one), whichever
  // came last; restore() puts it back at the checkpoint. A one-token generation prompt after a
  // history boundary therefore passes for a decode step (the script starts one token early);
  // chat's thought channel has four.
  void set_prompt_end(int pos);

  std::vector<int32_t> tokens_;     // the sequence held, position = index
  int checkpoint_ = -1;             // n_past at the last checkpoint(), -1 = none
  int prompt_end_ = -1;             // n_past where the current prompt ends (generation starts)
  std::vector<int32_t> continuation_;  // script chosen for tokens_[0..prompt_end_)
  bool continuation_valid_ = false;    // chosen for the current prompt_end_
  std::vector<float> logits_;
  int64_t n_evaluated_total_ = 0;
};

// Reads a script file (JSON) for `gem serve --backend scripted:FILE`:
//   {"token_delay_ms": 0, "tile_delay_ms": 0, "load_delay_ms": 0 (slept while loading),
//    "entries": [{"match": "text in the prompt", "output": "generated text, specials allowed"}]}
// For each prompt, the entry whose `match` occurs latest in the decoded prompt is played ("" =
// a default that matches at position 0); no match means history-hash logits.
Result<std::unique_ptr<ScriptedBackend>> make_scripted_backend(const std::string& path,
                                                               const Tokenizer& tokenizer,
                                                               const BackendOptions& options);

}  // namespace gem::runtime
