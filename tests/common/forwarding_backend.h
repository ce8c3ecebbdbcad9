// A test Backend that forwards every call to another one, so that a test can watch or hold one
// call (override it and call the base): the server's parallel test holds eval_batch, the
// scheduler's records each batch.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace gem::test {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  const BackendOptions& options() const override { return inner_->options(); }
  int n_past() const override { return inner_->n_past(); }
  Status eval(std::span<const int32_t> tokens, bool all_logits, const TileCallback& cb) override {
    return inner_->eval(tokens, all_logits, cb);
  }
  std::span<const float> logits(int row) override { return inner_->logits(row); }
  void checkpoint() override { inner_->checkpoint(); }
  void restore() override { inner_->restore(); }
  void reset() override { inner_->reset(); }
  int slot_n_past(int slot) const override { return inner_->slot_n_past(slot); }
  Status eval_batch(std::span<const BatchRow> rows) override { return inner_->eval_batch(rows); }
  std::span<const float> batch_logits(int i) override { return inner_->batch_logits(i); }
  void slot_reset(int slot) override { inner_->slot_reset(slot); }
  void slot_checkpoint(int slot) override { inner_->slot_checkpoint(slot); }
  void slot_restore(int slot) override { inner_->slot_restore(slot); }
  Status slot_truncate(int slot, int n_past) override { return inner_->slot_truncate(slot, n_past); }
  Status slot_fork(int src, int dst) override { return inner_->slot_fork(src, dst); }
  void set_keep_hidden(bool on) override { inner_->set_keep_hidden(on); }
  std::span<const float> hidden(int row) override { return inner_->hidden(row); }
  std::span<const float> batch_hidden(int i) override { return inner_->batch_hidden(i); }
  Result<std::unique_ptr<Drafter>> make_drafter(const model::Assistant& a) override {
    return inner_->make_drafter(a);
  }
  std::optional<int32_t> sample(const SamplingParams& params, std::span<const int32_t> history,
                                double coin) override {
    return inner_->sample(params, history, coin);
  }
  std::vector<std::optional<int32_t>> sample_batch(std::span<const BatchSample> reqs) override {
    return inner_->sample_batch(reqs);
  }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace gem::test
