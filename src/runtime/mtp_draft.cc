// MtpDraftSource (see mtp_draft.h).
#include "runtime/mtp_draft.h"

#include <utility>

#include "base/log.h"

namespace gem::runtime {

Result<std::unique_ptr<MtpDraftSource>> MtpDraftSource::make(
    Backend& backend, std::unique_ptr<model::Assistant> assistant) {
  auto drafter = backend.make_drafter(*assistant);
  if (!drafter.ok()) return drafter.status();
  backend.set_keep_hidden(true);
  return std::unique_ptr<MtpDraftSource>(
      new MtpDraftSource(backend, std::move(assistant), std::move(drafter).value()));
}

std::vector<int32_t> MtpDraftSource::propose(int32_t root, int pos, int row, int k) {
  // The root's row: the prompt's last row (row -1, eval) or a verification row (eval_batch).
  const std::span<const float> h0 = row < 0 ? backend_.hidden(-1) : backend_.batch_hidden(row);
  if (h0.empty()) return {};  // no hidden row kept: no drafts this round
  auto drafts = drafter_->draft_greedy(0, root, h0, pos, k);
  if (!drafts.ok()) {
    GEM_LOG_WARN("mtp: drafting failed, no drafts this round: %s", drafts.message().c_str());
    return {};
  }
  return std::move(drafts).value();
}

}  // namespace gem::runtime
