#pragma once
// A model with bf16 storage (Model<float, Bf16>: bf16 parameters and activations, fp32 gradients
// and statistics) behind the fp32 model's interface, so that the trainer, evaluation, generation
// and the strategies use it as they use any Model<float> (parallel.activations = "bf16").
//
// Its parameters come from the segment buffers' bf16_params() where they lend them (a strategy in
// mixed precision asked to: the model reads its bf16 buffers, no fp32 copy is made); otherwise
// (fp32 buffers: tests, tools) each segment's fp32 parameters are rounded into a bf16 copy for as
// long as the segment is in use. Gradients are the buffers' fp32 ones. As a pipeline stage's part
// its boundary rows are bf16 (part_input and the others).
#include <memory>
#include <vector>

#include "model/model.hpp"

namespace st {

class Bf16StorageModel final : public Model<float> {
 public:
  Bf16StorageModel(const ModelShape& shape, int max_batch, Exec& exec, Recompute recompute, TensorGroup tensor = {},
                   ModelPart part = {});
  ~Bf16StorageModel() override;

  using Model<float>::forward;
  using Model<float>::backward;
  std::size_t activation_bytes() const override { return stored_->activation_bytes(); }
  Buffer part_input(std::size_t count) override { return stored_->part_input(count); }
  Buffer part_output(std::size_t count) override { return stored_->part_output(count); }
  Buffer part_grad(std::size_t count) override { return stored_->part_grad(count); }
  void init_params(std::span<float> params, std::uint64_t seed) const override { stored_->init_params(params, seed); }
  void forward_into(SegmentBuffers<float>& buffers, const int* tokens, const int* targets, int B, int T,
                    double* loss_sum) override;
  void backward(SegmentBuffers<float>& buffers, float loss_scale) override;
  std::vector<float> logits(std::span<const float> params, const int* tokens, int B, int T) override;
  std::span<const float> probs(int b, int t) const override { return stored_->probs(b, t); }
  void reset_decoding() override;
  void release_decoding() override;

  // The model that computes, for tests.
  Model<float, Bf16>& stored() { return *stored_; }

 private:
  // The outer buffers as Model<float, Bf16> asks for them.
  class Bf16Params;
  std::span<const float> decode_piece(SegmentBuffers<float>& buffers, const int* tokens, int count) override;

  std::unique_ptr<Model<float, Bf16>> stored_;
  std::unique_ptr<Bf16Params> view_;
};

// The fp32 model's interface over a model that stores bf16 (`bf16_activations`:
// parallel.activations = "bf16") or fp32: what training, evaluation and a pipeline's stages build.
std::unique_ptr<Model<float>> make_stored_model(const ModelShape& shape, int max_batch, Exec& exec, Recompute recompute,
                                                TensorGroup tensor, ModelPart part, bool bf16_activations);

}  // namespace st
