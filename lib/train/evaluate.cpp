#include "train/evaluate.hpp"

#include <algorithm>
#include <vector>

namespace st {

double mean_loss(ShardedModel& net, BatchLoader& loader, const BatchPlan& batch_plan, int rank, std::int64_t batches) {
  std::vector<int> tokens(static_cast<std::size_t>(batch_plan.micro_batch * batch_plan.seq_len)), targets(tokens.size());
  double sum = 0;
  const std::int64_t first = batch_plan.first_sequence(rank);
  const std::int64_t per_rank = batch_plan.global_batch / batch_plan.ranks;
  loader.seek({});  // the same batches every time
  for (std::int64_t batch = 0; batch < batches; ++batch) {
    loader.next_batch();
    for (std::int64_t micro = 0; micro < per_rank / batch_plan.micro_batch; ++micro) {
      loader.fill(first + micro * batch_plan.micro_batch, batch_plan.micro_batch, tokens.data(), targets.data());
      sum += net.forward_loss(tokens.data(), targets.data(), static_cast<int>(batch_plan.micro_batch),
                              static_cast<int>(batch_plan.seq_len));
    }
  }
  net.strategy().settle();  // no group collective beside the world's (hsdp on NCCL)
  // Micro-batches are of one size: the mean of their means is the mean per token.
  return net.sum_over_ranks(sum) / static_cast<double>(batches * (batch_plan.global_batch / batch_plan.micro_batch));
}

InOrderLoss mean_loss_in_order(ShardedModel& net, const Split& split, std::int64_t seq_len, std::int64_t micro_batch) {
  InOrderLoss result;
  result.predicted = static_cast<std::int64_t>(split.size()) - 1;
  result.windows = result.predicted / seq_len;
  result.last_window = result.predicted % seq_len;
  const std::int64_t ranks = net.data_ranks(), rank = net.data_rank();
  const std::int64_t per_round = ranks * micro_batch;
  const std::int64_t rounds = (result.windows + per_round - 1) / per_round;
  std::vector<int> tokens(static_cast<std::size_t>(micro_batch * seq_len)), targets(tokens.size());
  // Window w's inputs start at token w x seq_len of the split; its targets one later.
  auto fill = [&](std::int64_t window, std::int64_t count, std::int64_t length) {
    for (std::int64_t i = 0; i < count; ++i) {
      const std::size_t at = split.begin + static_cast<std::size_t>((window + i) * seq_len);
      split.data->copy(at, static_cast<std::size_t>(length), tokens.data() + i * length);
      split.data->copy(at + 1, static_cast<std::size_t>(length), targets.data() + i * length);
    }
  };
  double sum = 0;  // of losses, each window's mean times its targets
  for (std::int64_t round = 0; round < rounds; ++round) {
    const std::int64_t first = round * per_round + rank * micro_batch;
    const std::int64_t count = std::clamp<std::int64_t>(result.windows - first, 0, micro_batch);
    // A rank with no window left in the last round still forwards one (a sharded strategy's
    // gathers are collective) and leaves its loss out.
    fill(count > 0 ? first : 0, std::max<std::int64_t>(count, 1), seq_len);
    const double mean = net.forward_loss(tokens.data(), targets.data(), static_cast<int>(std::max<std::int64_t>(count, 1)),
                                         static_cast<int>(seq_len));
    if (count > 0) sum += mean * static_cast<double>(count * seq_len);
  }
  if (result.last_window > 0) {  // every rank forwards it; the first data-parallel rank counts it
    fill(result.windows, 1, result.last_window);
    const double mean = net.forward_loss(tokens.data(), targets.data(), 1, static_cast<int>(result.last_window));
    if (rank == 0) sum += mean * static_cast<double>(result.last_window);
  }
  net.strategy().settle();
  result.mean = net.sum_over_ranks(sum) / static_cast<double>(result.predicted);
  return result;
}

}  // namespace st
