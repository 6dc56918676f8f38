#include "train/train_step.hpp"

#include <cmath>

namespace st {

bool StepOutcome::finite() const { return is_finite_value(loss) && is_finite_value(grad_norm); }

StepOutcome train_step(ShardedModel& net, const StepSettings& settings, const std::function<void(std::int64_t)>& fill,
                       const int* tokens, const int* targets, Timeline* timeline) {
  Exec& exec = net.execution().exec();
  Strategy& strategy = net.strategy();
  StepScalars* scalars = net.step_scalars();
  exec.zero(scalars, sizeof(StepScalars));
  strategy.zero_grads();
  // Each micro-batch's mean loss enters with weight 1/(micro-batches x ranks): summed over
  // ranks by the reduction, the gradient is that of the global batch's mean loss.
  const double batches = static_cast<double>(settings.micro_batches * settings.data_ranks);
  const float loss_scale = 1.0f / static_cast<float>(settings.micro_batches * settings.data_ranks);
  PipelineStage* pipeline = net.pipeline();
  if (pipeline) {
    // The schedule's passes through this stage, activations and gradients passed between stages.
    pipeline->run_passes(settings.micro_batches, settings.micro_batch, settings.seq_len, fill, tokens, targets,
                         &scalars->loss, loss_scale);
  } else {
    for (std::int64_t micro = 0; micro < settings.micro_batches; ++micro) {
      strategy.begin_micro_batch(micro + 1 == settings.micro_batches);
      fill(micro);
      net.model().forward_into(strategy, tokens, targets, settings.micro_batch, settings.seq_len, &scalars->loss);
      net.model().backward(strategy, loss_scale);
    }
  }
  strategy.finish_grads();
  // The first and the last stage each hold a share of the tied embeddings' gradient.
  if (pipeline) pipeline->sum_mirrored_grads(strategy, exec.before_communication());
  {
    Timeline::Span span(timeline, "compute", "clip and update");
    strategy.add_grad_norm_squared(&scalars->grad_norm_squared);
    exec.divide(&scalars->loss, batches);
    net.sum_over_ranks_in_place(&scalars->loss);
    // Each stage holds its blocks' share of the norm; the last stage the loss (the two doubles
    // side by side in StepScalars).
    if (pipeline) pipeline->sum_scalars_over_stages(&scalars->loss, 2, exec.before_communication());
    exec.set_clip_factor(scalars, settings.grad_clip);
    strategy.optimizer_step(settings.lr, &scalars->grad_scale, settings.step);
  }
  // The gathers the update started ahead finish before the next collective of the world: it must
  // not run beside a group's (hsdp), which NCCL does not allow in an order that may differ by rank.
  strategy.settle();
  StepScalars done;
  exec.download(&done, scalars, sizeof done);  // the step's one read
  return {done.loss, std::sqrt(done.grad_norm_squared)};
}

}  // namespace st
