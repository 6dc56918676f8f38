#include "train/evaluate.hpp"

#include <vector>

namespace st {

double mean_loss(ShardedModel& net, BatchLoader& loader, const BatchPlan& plan, int rank, std::int64_t batches) {
  std::vector<int> tokens(static_cast<std::size_t>(plan.micro_batch * plan.seq_len)), targets(tokens.size());
  double sum = 0;
  const std::int64_t first = plan.first_sequence(rank);
  const std::int64_t per_rank = plan.global_batch / plan.ranks;
  loader.seek({});  // the same batches every time
  for (std::int64_t batch = 0; batch < batches; ++batch) {
    loader.next_batch();
    for (std::int64_t micro = 0; micro < per_rank / plan.micro_batch; ++micro) {
      loader.fill(first + micro * plan.micro_batch, plan.micro_batch, tokens.data(), targets.data());
      sum += net.model().forward(net.strategy(), tokens.data(), targets.data(), static_cast<int>(plan.micro_batch),
                                 static_cast<int>(plan.seq_len));
    }
  }
  net.strategy().settle();  // no group collective beside the world's (hsdp on NCCL)
  // Micro-batches are of one size: the mean of their means is the mean per token.
  return net.sum_over_ranks(sum) / static_cast<double>(batches * (plan.global_batch / plan.micro_batch));
}

}  // namespace st
