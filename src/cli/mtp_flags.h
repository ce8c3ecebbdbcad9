// Speculative decoding flags shared by run, serve, agent and bench, with llama-server's names:
// --mtp FILE (the MTP assistant), --no-mtp, --draft-max N, --draft-min N; and the one function
// that turns them into the engine's drafter.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "base/status.h"
#include "runtime/mtp_draft.h"

namespace gem::cli {

struct MtpFlags {
  std::string mtp;     // --mtp: the MTP assistant GGUF (gemma4-assistant)
  bool no_mtp = false;  // --no-mtp: no drafting, whatever --mtp (or gem agent's lookup) says
  int draft_max = 8;   // --draft-max: tokens drafted per round at most
  int draft_min = 0;   // --draft-min: a shorter draft is dropped (llama-server's meaning)
  bool on() const { return !mtp.empty() && !no_mtp; }
};

// Adds the four flags to `app`, in `group` when one is given.
void add_mtp_flags(CLI::App& app, MtpFlags& flags, const std::string& group = "");

// The drafter of flags.mtp over `backend` (its hidden rows turned on); null when drafting is off
// (no --mtp, or --no-mtp). Errors name the flag: a bad --draft-max/--draft-min, an unreadable or
// non-assistant file, an assistant that does not pair with the model, a backend that cannot draft.
Result<std::unique_ptr<runtime::MtpDraftSource>> make_mtp_drafter(Backend& backend,
                                                                  const MtpFlags& flags);

// gem agent's assistant: "mtp-<model file name>" in the model's folder, when that file exists;
// empty otherwise.
std::string assistant_beside(const std::string& model_path);

}  // namespace gem::cli
