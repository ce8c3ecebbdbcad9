// The MTP assistant as the engine's DraftSource: each round drafts greedily from the root and
// the target's post-final-norm hidden state of the row that chose it (spec §7.6), every step at
// the root's position, through the backend's Drafter (which reads the target's caches only).
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "model/assistant.h"
#include "runtime/engine.h"

namespace gem::runtime {

class MtpDraftSource final : public DraftSource {
 public:
  // Pairs `assistant` (kept by the source) with the backend's model and turns on the backend's
  // kept hidden rows.
  static Result<std::unique_ptr<MtpDraftSource>> make(Backend& backend,
                                                      std::unique_ptr<model::Assistant> assistant);
  std::vector<int32_t> propose(int32_t root, int pos, int row, int k) override;

 private:
  MtpDraftSource(Backend& backend, std::unique_ptr<model::Assistant> assistant,
                 std::unique_ptr<Drafter> drafter)
      : backend_(backend), assistant_(std::move(assistant)), drafter_(std::move(drafter)) {}
  Backend& backend_;
  std::unique_ptr<model::Assistant> assistant_;  // before the drafter: it outlives it
  std::unique_ptr<Drafter> drafter_;
};

}  // namespace gem::runtime
