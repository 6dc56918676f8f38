#include "data/batches.hpp"

#include "core/error.hpp"
#include "core/random.hpp"

namespace st {

BatchPlan plan_batches(const DataConfig& data, std::int64_t seq_len, int ranks, const std::string& deck_path) {
  BatchPlan plan;
  plan.global_batch = data.global_batch;
  plan.ranks = ranks;
  plan.seq_len = seq_len;
  const std::string where = deck_path + ": ";
  if (data.global_batch % ranks != 0)
    throw Error(where + "data.global_batch = " + std::to_string(data.global_batch) + " cannot be split over " +
                    std::to_string(ranks) + " ranks; use a multiple of " + std::to_string(ranks),
                ErrorScope::all_ranks);
  const std::int64_t per_rank = data.global_batch / ranks;
  plan.micro_batch = data.micro_batch == 0 ? per_rank : data.micro_batch;
  if (per_rank % plan.micro_batch != 0)
    throw Error(where + "data.global_batch = " + std::to_string(data.global_batch) + " over " + std::to_string(ranks) +
                    " ranks gives " + std::to_string(per_rank) + " sequences per rank, which data.micro_batch = " +
                    std::to_string(plan.micro_batch) + " does not divide; global_batch must be a multiple of " +
                    "micro_batch x ranks = " + std::to_string(plan.micro_batch * ranks),
                ErrorScope::all_ranks);
  plan.accum_steps = per_rank / plan.micro_batch;
  return plan;
}

DataSplits split_data(const TokenDataset& data, double val_fraction, std::int64_t seq_len) {
  const std::size_t n = data.size();
  const std::size_t val = static_cast<std::size_t>(static_cast<double>(n) * val_fraction);
  DataSplits splits{{0, n - val}, {n - val, n}};
  const std::size_t need = static_cast<std::size_t>(seq_len) + 1;
  if (splits.train.size() < need || splits.val.size() < need)
    throw Error("data file '" + data.path() + "' has " + std::to_string(n) + " tokens: " +
                    std::to_string(splits.train.size()) + " for training and " + std::to_string(splits.val.size()) +
                    " for validation (data.val_fraction), but each part needs at least model.seq_len + 1 = " +
                    std::to_string(need),
                ErrorScope::all_ranks);
  return splits;
}

SequenceSampler::SequenceSampler(const TokenDataset& data, Split split, std::uint64_t seed, std::uint64_t stream,
                                 std::int64_t seq_len)
    : data_(&data), split_(split), seed_(seed), stream_(stream), seq_len_(seq_len) {}

void SequenceSampler::fill(std::int64_t batch, std::int64_t first_sequence, std::int64_t count, int* tokens,
                           int* targets) const {
  // Every window start in the split is equally likely: start + seq_len + 1 <= split end.
  const std::uint64_t starts = split_.size() - static_cast<std::size_t>(seq_len_);
  for (std::int64_t s = 0; s < count; ++s) {
    const std::uint64_t key = mix(seed_, stream_, static_cast<std::uint64_t>(batch) * 0x100000000ull +
                                                     static_cast<std::uint64_t>(first_sequence + s));
    const std::size_t start = split_.begin + static_cast<std::size_t>(key % starts);
    for (std::int64_t t = 0; t < seq_len_; ++t) {
      tokens[s * seq_len_ + t] = (*data_)[start + static_cast<std::size_t>(t)];
      targets[s * seq_len_ + t] = (*data_)[start + static_cast<std::size_t>(t) + 1];
    }
  }
}

}  // namespace st
