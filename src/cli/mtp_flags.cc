// Speculative decoding flags (see mtp_flags.h).
#include "cli/mtp_flags.h"

#include <filesystem>
#include <utility>

#include "model/assistant.h"

namespace gem::cli {

void add_mtp_flags(CLI::App& app, MtpFlags& f, const std::string& group) {
  CLI::Option* opts[] = {
      app.add_option("--mtp", f.mtp,
                     "MTP assistant GGUF (gemma4-assistant): speculative decoding, lossless "
                     "(greedy output and sampling's distribution unchanged)"),
      app.add_flag("--no-mtp", f.no_mtp, "no speculative decoding, even with --mtp (or gem "
                                         "agent's mtp-<model> beside the model)"),
      app.add_option("--draft-max", f.draft_max, "tokens drafted per round with --mtp (default 8)"),
      app.add_option("--draft-min", f.draft_min,
                     "fewest tokens a round drafts with --mtp; a shorter draft is dropped "
                     "(default 0)"),
  };
  if (!group.empty()) {
    for (CLI::Option* o : opts) o->group(group);
  }
}

Result<std::unique_ptr<runtime::MtpDraftSource>> make_mtp_drafter(Backend& backend,
                                                                  const MtpFlags& f) {
  // The draft lengths are checked with or without an assistant: a bad value is never ignored.
  if (f.draft_max < 1) return errorf("--draft-max %d: expected at least 1", f.draft_max);
  if (f.draft_min < 0 || f.draft_min > f.draft_max) {
    return errorf("--draft-min %d: expected 0..%d (--draft-max)", f.draft_min, f.draft_max);
  }
  if (!f.on()) return std::unique_ptr<runtime::MtpDraftSource>();
  auto a = model::load_assistant(f.mtp);
  if (!a.ok()) return a.status().with_context("--mtp " + f.mtp + ": ");
  auto d = runtime::MtpDraftSource::make(backend, std::move(a).value());
  if (!d.ok()) return d.status().with_context("--mtp " + f.mtp + ": ");
  return std::move(d).value();
}

std::string assistant_beside(const std::string& model_path) {
  const std::filesystem::path p(model_path);
  const std::filesystem::path candidate = p.parent_path() / ("mtp-" + p.filename().string());
  std::error_code ec;
  return std::filesystem::is_regular_file(candidate, ec) ? candidate.string() : std::string();
}

}  // namespace gem::cli
