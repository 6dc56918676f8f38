#include "data/batches.hpp"

#include <algorithm>
#include <vector>

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

namespace {

void require_sequence(const Split& split, std::int64_t seq_len, const std::string& what) {
  const std::size_t need = static_cast<std::size_t>(seq_len) + 1;
  if (split.size() < need)
    throw Error("data '" + split.data->name() + "' has " + std::to_string(split.size()) + " tokens for " + what +
                    ", but it needs at least model.seq_len + 1 = " + std::to_string(need),
                ErrorScope::all_ranks);
}

}  // namespace

DataSplits split_data(const TokenDataset& data, double val_fraction, std::int64_t seq_len) {
  const std::size_t n = data.size();
  const std::size_t val = static_cast<std::size_t>(static_cast<double>(n) * val_fraction);
  DataSplits splits{{&data, 0, n - val}, {&data, n - val, n}};
  const std::size_t need = static_cast<std::size_t>(seq_len) + 1;
  if (splits.train.size() < need || splits.val.size() < need)
    throw Error("data file '" + data.name() + "' has " + std::to_string(n) + " tokens: " +
                    std::to_string(splits.train.size()) + " for training and " + std::to_string(splits.val.size()) +
                    " for validation (data.val_fraction), but each part needs at least model.seq_len + 1 = " +
                    std::to_string(need),
                ErrorScope::all_ranks);
  return splits;
}

DataSplits separate_splits(const TokenDataset& train, const TokenDataset& val, std::int64_t seq_len) {
  DataSplits splits{{&train, 0, train.size()}, {&val, 0, val.size()}};
  require_sequence(splits.train, seq_len, "training (data.path)");
  require_sequence(splits.val, seq_len, "validation (data.val_path)");
  return splits;
}

BatchLoader::BatchLoader(Split split, DataOrder order, std::uint64_t seed, std::uint64_t stream,
                         std::int64_t seq_len, std::int64_t global_batch, const std::string& split_name)
    : split_(split),
      sequential_(order == DataOrder::sequential),
      seed_(seed),
      stream_(stream),
      seq_len_(seq_len),
      global_batch_(global_batch) {
  const std::size_t batch_tokens = static_cast<std::size_t>(global_batch * seq_len) + 1;
  if (sequential_ && split.size() < batch_tokens)
    throw Error("data.order = \"sequential\" reads data.global_batch x model.seq_len + 1 = " +
                    std::to_string(batch_tokens) + " tokens per step, but the " + split_name + " part of '" +
                    split.data->name() + "' has " + std::to_string(split.size()),
                ErrorScope::all_ranks);
}

void BatchLoader::wrap() {
  const std::size_t batch_tokens = static_cast<std::size_t>(global_batch_ * seq_len_) + 1;
  if (next_.offset + batch_tokens > split_.size()) {
    next_.offset = 0;
    ++next_.epoch;
  }
}

void BatchLoader::next_batch() {
  batch_ = next_.batches++;
  if (!sequential_) return;
  batch_offset_ = next_.offset;
  next_.offset += static_cast<std::size_t>(global_batch_ * seq_len_);
  wrap();
}

void BatchLoader::seek(const LoaderPosition& position) {
  next_ = position;
  if (sequential_) wrap();
}

std::size_t BatchLoader::random_start(std::int64_t batch, std::int64_t sequence) const {
  // Every window start in the split is equally likely: start + seq_len + 1 <= split end.
  const std::uint64_t starts = split_.size() - static_cast<std::size_t>(seq_len_);
  const std::uint64_t key =
      mix(seed_, stream_, static_cast<std::uint64_t>(batch) * 0x100000000ull + static_cast<std::uint64_t>(sequence));
  return split_.begin + static_cast<std::size_t>(key % starts);
}

std::size_t BatchLoader::next_start() const {
  return sequential_ ? split_.begin + next_.offset : random_start(next_.batches, 0);
}

void BatchLoader::fill(std::int64_t first_sequence, std::int64_t count, int* tokens, int* targets) const {
  ST_REQUIRE(batch_ >= 0, "fill() before next_batch()");
  std::vector<int> window(static_cast<std::size_t>(seq_len_) + 1);
  for (std::int64_t s = 0; s < count; ++s) {
    const std::int64_t sequence = first_sequence + s;
    const std::size_t start = sequential_ ? split_.begin + batch_offset_ + static_cast<std::size_t>(sequence * seq_len_)
                                          : random_start(batch_, sequence);
    split_.data->copy(start, window.size(), window.data());
    std::copy(window.begin(), window.end() - 1, tokens + s * seq_len_);
    std::copy(window.begin() + 1, window.end(), targets + s * seq_len_);
  }
}

}  // namespace st
