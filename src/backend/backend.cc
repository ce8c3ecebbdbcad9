// The Backend interface's shared parts: batch validation and the one-slot defaults of the
// batched calls, served through eval().
#include "backend/backend.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"

namespace gem {

Result<std::vector<int32_t>> Drafter::draft_greedy(int slot, int32_t root,
                                                   std::span<const float> h0, int pos, int k) {
  if (k < 1) return errorf("draft: %d steps asked, expected at least 1", k);
  std::vector<int32_t> out;
  std::vector<float> h(h0.begin(), h0.end());
  int32_t c = root;
  for (int i = 0; i < k; ++i) {
    GEM_RETURN_IF_ERROR(step(slot, c, h, pos));
    const std::span<const float> l = logits();
    c = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(c);
    h.assign(h_next().begin(), h_next().end());
  }
  return out;
}

TokenLogprobs row_logprobs(std::span<const float> row, int32_t token, int top_n) {
  GEM_CHECK(token >= 0 && static_cast<size_t>(token) < row.size(),
            "row_logprobs: token %d outside the row [0, %zu)", token, row.size());
  // log-softmax: logprob(i) = l_i - (max + log sum exp(l - max)), the sum in double.
  double max = -INFINITY;
  for (float l : row) max = std::max(max, static_cast<double>(l));
  double sum = 0.0;
  for (float l : row) sum += std::exp(static_cast<double>(l) - max);
  const double lse = max + std::log(sum);
  auto logprob = [&](int32_t id) {
    return static_cast<float>(static_cast<double>(row[static_cast<size_t>(id)]) - lse);
  };
  TokenLogprobs out;
  out.logprob = logprob(token);
  const int most = std::min(kMaxRowLogprobs, static_cast<int>(row.size()));
  const size_t k = static_cast<size_t>(std::clamp(top_n, 0, most));
  if (k == 0) return out;
  // The top k by (logit descending, id ascending), kept sorted while scanning once.
  std::vector<int32_t> best;
  best.reserve(k + 1);
  auto before = [&](int32_t a, int32_t b) {
    const float la = row[static_cast<size_t>(a)], lb = row[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  for (int32_t i = 0; i < static_cast<int32_t>(row.size()); ++i) {
    if (best.size() == k && !before(i, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), i, before), i);
    if (best.size() > k) best.pop_back();
  }
  for (int32_t id : best) out.top.emplace_back(id, logprob(id));
  return out;
}

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
