// MtpDraftSource (see mtp_draft.h).
#include "runtime/mtp_draft.h"

#include <algorithm>

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
  std::vector<int32_t> out;
  if (h0.empty()) return out;  // no hidden row kept: no drafts this round
  h_.assign(h0.begin(), h0.end());
  int32_t c = root;
  for (int i = 0; i < k; ++i) {
    if (Status st = drafter_->step(0, c, h_, pos); !st.ok()) {
      GEM_LOG_WARN("mtp: draft step failed, no drafts this round: %s", st.message().c_str());
      break;
    }
    const std::span<const float> logits = drafter_->logits();
    c = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(c);
    const std::span<const float> h = drafter_->h_next();
    h_.assign(h.begin(), h.end());
  }
  return out;
}

}  // namespace gem::runtime
