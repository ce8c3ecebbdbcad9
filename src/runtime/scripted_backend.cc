// ScriptedBackend (test-only, see scripted_backend.h) and its script-file loader.
#include "runtime/scripted_backend.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace gem::runtime {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

void sleep_us(int us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

}  // namespace

ScriptedBackend::ScriptedBackend(BackendOptions options, ScriptedOptions scripted,
                                 ScriptFn script)
    : options_(options), scripted_(scripted), script_(std::move(script)) {
  if (options_.n_tile <= 0) options_.n_tile = 256;
  logits_.assign(static_cast<size_t>(scripted_.n_vocab), 0.0f);
}

Status ScriptedBackend::eval(std::span<const int32_t> tokens, bool /*all_logits*/,
                             const TileCallback& on_tile) {
  if (tokens.empty()) return errorf("scripted backend: eval of zero tokens");
  if (n_past() + static_cast<int>(tokens.size()) > options_.n_ctx) {
    return errorf("scripted backend: %zu tokens at position %d exceed the context (%d)",
                  tokens.size(), n_past(), options_.n_ctx);
  }
  const int total = static_cast<int>(tokens.size());
  for (int done = 0; done < total;) {
    const int step = std::min(options_.n_tile, total - done);
    for (int i = 0; i < step; ++i) {
      const int32_t t = tokens[static_cast<size_t>(done + i)];
      if (t < 0 || t >= scripted_.n_vocab) {
        return errorf("scripted backend: token id %d outside the vocabulary (%d)", t,
                      scripted_.n_vocab);
      }
      tokens_.push_back(t);
      sleep_us(scripted_.token_delay_us);
    }
    n_evaluated_total_ += step;
    done += step;
    if (total > 1) sleep_us(scripted_.tile_delay_us);  // prompt tiles only, not decode steps
    if (total > 1 && on_tile && !on_tile(done, total)) {
      return cancelledf("cancelled after %d of %d prompt tokens", done, total);
    }
  }
  if (total > 1) set_prompt_end(n_past());
  return ok_status();
}

void ScriptedBackend::set_prompt_end(int pos) {
  prompt_end_ = pos;
  continuation_valid_ = false;
}

std::span<const float> ScriptedBackend::logits(int /*row*/) {
  const int p = n_past();
  std::fill(logits_.begin(), logits_.end(), 0.0f);
  if (checkpoint_ >= 0 && prompt_end_ >= 0 && p >= prompt_end_ && script_) {
    if (!continuation_valid_) {
      continuation_ = script_(std::span<const int32_t>(tokens_.data(), prompt_end_));
      continuation_valid_ = true;
    }
    const size_t k = static_cast<size_t>(p - prompt_end_);
    if (k < continuation_.size()) {
      const int32_t t = continuation_[k];
      if (t >= 0 && t < scripted_.n_vocab) logits_[static_cast<size_t>(t)] = 100.0f;
      return logits_;
    }
  }
  // History-hash logits: a pseudo-random row that depends on every token held.
  uint64_t h = 0x1234567ull;
  for (int32_t t : tokens_) h = mix(h, static_cast<uint64_t>(t));
  uint64_t s = h | 1;
  for (float& v : logits_) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    v = static_cast<float>(s >> 40) * (8.0f / 16777216.0f);
  }
  return logits_;
}

void ScriptedBackend::checkpoint() {
  checkpoint_ = n_past();
  set_prompt_end(checkpoint_);
}

void ScriptedBackend::restore() {
  if (checkpoint_ < 0) {
    reset();
    return;
  }
  tokens_.resize(static_cast<size_t>(std::min(checkpoint_, n_past())));
  set_prompt_end(n_past());
}

void ScriptedBackend::reset() {
  tokens_.clear();
  checkpoint_ = -1;
  set_prompt_end(-1);
  continuation_.clear();
}

Result<std::unique_ptr<ScriptedBackend>> make_scripted_backend(const std::string& path,
                                                               const Tokenizer& tokenizer,
                                                               const BackendOptions& options) {
  std::ifstream in(path);
  if (!in) return errorf("scripted backend: cannot open script %s", path.c_str());
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("entries") || !j["entries"].is_array()) {
    return errorf("scripted backend: %s: expected an object with an \"entries\" array",
                  path.c_str());
  }
  struct Entry {
    std::string match;
    std::vector<int32_t> output;
  };
  auto entries = std::make_shared<std::vector<Entry>>();
  for (const auto& e : j["entries"]) {
    if (!e.is_object() || !e.contains("match") || !e["match"].is_string() ||
        !e.contains("output") || !e["output"].is_string()) {
      return errorf("scripted backend: %s: each entry needs string \"match\" and \"output\"",
                    path.c_str());
    }
    entries->push_back({e["match"].get<std::string>(),
                        tokenizer.encode(e["output"].get<std::string>(), false, true)});
  }
  ScriptedOptions so;
  so.n_vocab = tokenizer.n_vocab();
  so.token_delay_us = static_cast<int>(j.value("token_delay_ms", 0.0) * 1000);
  so.tile_delay_us = static_cast<int>(j.value("tile_delay_ms", 0.0) * 1000);
  // A slow load, so that tests can watch a server that is still loading (/props, /health).
  if (const double ms = j.value("load_delay_ms", 0.0); ms > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
  }
  const Tokenizer* tok = &tokenizer;
  ScriptFn fn = [entries, tok](std::span<const int32_t> prompt) -> std::vector<int32_t> {
    const std::string text = tok->decode(prompt, /*render_special=*/true);
    const Entry* best = nullptr;
    size_t best_pos = 0;
    for (const Entry& e : *entries) {
      const size_t pos = e.match.empty() ? 0 : text.rfind(e.match);
      if (pos == std::string::npos) continue;
      if (best == nullptr || pos >= best_pos) {
        best = &e;
        best_pos = pos;
      }
    }
    return best != nullptr ? best->output : std::vector<int32_t>{};
  };
  return std::make_unique<ScriptedBackend>(options, so, std::move(fn));
}

}  // namespace gem::runtime
