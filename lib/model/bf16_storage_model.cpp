#include "model/bf16_storage_model.hpp"

namespace st {

class Bf16StorageModel::Bf16Params final : public SegmentBuffers<float, Bf16> {
 public:
  Bf16Params(Exec& exec, const ParamLayout& layout)
      : exec_(exec), layout_(layout), copies_(layout.segments().size()), fresh_(layout.segments().size(), false) {}
  void wrap(SegmentBuffers<float>& outer) { outer_ = &outer; }

  const Bf16* params(std::size_t s) override {
    if (const Bf16* lent = outer_->bf16_params(s)) return lent;
    // fp32 buffers: the segment rounded once per use (the hooks mark each use's start).
    const std::size_t n = layout_.segments()[s].size;
    if (copies_[s].bytes() == 0) copies_[s] = exec_.allocate(n * sizeof(Bf16));
    const std::span<Bf16> copy = copies_[s].as<Bf16>().first(n);
    if (!fresh_[s]) {
      exec_.convert(Buffer::of(copy), Buffer::of(std::span<const float>(outer_->params(s), n)));
      fresh_[s] = true;
    }
    return copy.data();
  }
  float* grads(std::size_t s) override { return outer_->grads(s); }
  void before_forward(std::size_t s) override {
    fresh_[s] = false;
    outer_->before_forward(s);
  }
  void after_forward(std::size_t s) override { outer_->after_forward(s); }
  void before_backward(std::size_t s) override {
    fresh_[s] = false;
    outer_->before_backward(s);
  }
  void grad_ready(std::size_t s) override { outer_->grad_ready(s); }

 private:
  Exec& exec_;
  const ParamLayout& layout_;
  SegmentBuffers<float>* outer_ = nullptr;
  // Rounded copies of fp32 segments, kept for the next use: only for buffers that lend no bf16
  // (tests, tools); a strategy in mixed precision always lends, so a run holds none.
  std::vector<Memory> copies_;
  std::vector<bool> fresh_;     // the copy is of this use's parameters
};

Bf16StorageModel::Bf16StorageModel(const ModelShape& shape, int max_batch, Exec& exec, Recompute recompute,
                                   TensorGroup tensor, ModelPart part)
    : Model<float>(shape, exec, recompute, tensor, part),
      stored_(make_model<float, Bf16>(shape, max_batch, exec, recompute, tensor, part)),
      view_(std::make_unique<Bf16Params>(exec, stored_->layout())) {
  bf16_logits_ = stored_->bf16_logits();
  decode_rows_ = static_cast<int>(shape.seq_len);  // the stored model splits a decode into its own pieces
}

Bf16StorageModel::~Bf16StorageModel() = default;

void Bf16StorageModel::forward_into(SegmentBuffers<float>& buffers, const int* tokens, const int* targets, int B,
                                    int T, double* loss_sum) {
  view_->wrap(buffers);
  stored_->forward_into(*view_, tokens, targets, B, T, loss_sum);
}

void Bf16StorageModel::backward(SegmentBuffers<float>& buffers, float loss_scale) {
  view_->wrap(buffers);
  stored_->backward(*view_, loss_scale);
}

std::vector<float> Bf16StorageModel::logits(std::span<const float> params, const int* tokens, int B, int T) {
  Memory rounded = exec_.allocate(params.size() * sizeof(Bf16));
  exec_.convert(Buffer::of(rounded.as<Bf16>().first(params.size())), Buffer::of(params));
  return stored_->logits(rounded.as<const Bf16>().first(params.size()), tokens, B, T);
}

std::span<const float> Bf16StorageModel::decode_piece(SegmentBuffers<float>& buffers, const int* tokens, int count) {
  view_->wrap(buffers);
  const std::span<const float> probs = stored_->decode(*view_, tokens, count);
  decoded_ = stored_->decoded_length();
  return probs;
}

std::unique_ptr<Model<float>> make_stored_model(const ModelShape& shape, int max_batch, Exec& exec, Recompute recompute,
                                                TensorGroup tensor, ModelPart part, bool bf16_activations) {
  if (bf16_activations) return std::make_unique<Bf16StorageModel>(shape, max_batch, exec, recompute, tensor, part);
  return make_model<float>(shape, max_batch, exec, recompute, tensor, part);
}

void Bf16StorageModel::reset_decoding() {
  Model<float>::reset_decoding();
  stored_->reset_decoding();
}

void Bf16StorageModel::release_decoding() {
  Model<float>::release_decoding();
  stored_->release_decoding();
}

}  // namespace st
