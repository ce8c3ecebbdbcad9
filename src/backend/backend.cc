// The Backend interface's shared parts: batch validation and the one-slot defaults of the
// batched calls, served through eval().
#include "backend/backend.h"

#include <vector>

namespace gem {

Status Backend::validate_batch(std::span<const BatchRow> rows, int n_vocab,
                               std::vector<int>* ends) const {
  const int n_slots = options().n_slots;
  if (rows.empty()) return Status::error("eval_batch: no rows given (expected at least 1)");
  ends->assign(n_slots, 0);
  for (int s = 0; s < n_slots; ++s) (*ends)[s] = slot_n_past(s);
  for (size_t i = 0; i < rows.size(); ++i) {
    const BatchRow& r = rows[i];
    if (r.slot < 0 || r.slot >= n_slots) {
      return errorf("eval_batch: row %zu: slot %d outside [0, %d) (-np/--parallel)", i, r.slot,
                    n_slots);
    }
    if (n_vocab > 0 && (r.token < 0 || r.token >= n_vocab)) {
      return errorf("eval_batch: row %zu: token %d outside the vocabulary [0, %d)", i, r.token,
                    n_vocab);
    }
    int& end = (*ends)[r.slot];
    if (r.pos != end) {
      return errorf("eval_batch: row %zu: slot %d position %d, expected %d (the slot's next "
                    "position: rows of a slot continue its cache in order)",
                    i, r.slot, r.pos, end);
    }
    if (end >= options().n_ctx) {
      return errorf("eval_batch: row %zu: slot %d is full (n_ctx %d)", i, r.slot, options().n_ctx);
    }
    ++end;
  }
  return ok_status();
}

Status Backend::eval_batch(std::span<const BatchRow> rows) {
  std::vector<int> ends;
  if (Status st = validate_batch(rows, 0, &ends); !st.ok()) return st;
  std::vector<int32_t> tokens;
  tokens.reserve(rows.size());
  batch_logit_rows_.clear();
  bool inner_logits = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    tokens.push_back(rows[i].token);
    if (rows[i].logits) {
      batch_logit_rows_.push_back(static_cast<int>(i));
      inner_logits = inner_logits || i + 1 < rows.size();
    }
  }
  return eval(tokens, inner_logits);
}

Status Backend::slot_truncate(int slot, int n_past) {
  if (slot == 0 && n_past == this->n_past()) return ok_status();
  return errorf("%.*s backend: truncating slot %d to %d positions is not supported",
                static_cast<int>(name().size()), name().data(), slot, n_past);
}

Status Backend::slot_fork(int src, int dst) {
  if (src == dst) return ok_status();
  return errorf("%.*s backend: forking slot %d into %d is not supported",
                static_cast<int>(name().size()), name().data(), src, dst);
}

}  // namespace gem
