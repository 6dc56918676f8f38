#pragma once
// Which sequences each rank trains on. A global batch of G sequences is drawn per step from the
// seed (or read in order) alone; rank r takes sequences [r G/N, (r+1) G/N) in micro-batches of M, so the same deck
// is the same training run on any number of ranks.
#include <cstdint>
#include <string>

#include "data/dataset.hpp"
#include "deck/config.hpp"

namespace st {

struct BatchPlan {
  std::int64_t global_batch = 0;   // sequences per optimizer step, all ranks
  std::int64_t micro_batch = 0;    // sequences per forward/backward on a rank
  std::int64_t accum_steps = 0;    // micro-batches per rank per step
  std::int64_t ranks = 1;
  std::int64_t seq_len = 0;
  std::int64_t first_sequence(int rank) const { return rank * global_batch / ranks; }
};

// Throws Error (all ranks) when the global batch cannot be split over the ranks.
BatchPlan plan_batches(const DataConfig& data, std::int64_t seq_len, int ranks, const std::string& deck_path);

// A part of a data set: [begin, end) token positions of *data.
struct Split {
  const TokenDataset* data = nullptr;
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};
struct DataSplits {
  Split train, val;
};
// Validation is the last val_fraction of the tokens. Throws Error if either part is shorter than
// one sequence plus its target.
DataSplits split_data(const TokenDataset& data, double val_fraction, std::int64_t seq_len);
// Training on all of `train`, validation on all of `val` (data.val_path). Throws Error as above.
DataSplits separate_splits(const TokenDataset& train, const TokenDataset& val, std::int64_t seq_len);

// Where a loader stands: the batches drawn so far and, for the sequential order, the offset
// of the next batch in the split and the passes over the split completed.
struct LoaderPosition {
  std::int64_t batches = 0;
  std::size_t offset = 0;
  std::int64_t epoch = 0;
};

// Draws the sequences of each global batch from a split, with their next-token targets.
// random: sequence i of batch k is the window at a position drawn from (seed, stream, k, i).
// sequential: batch k is the next global_batch x seq_len tokens of the split (plus one for
// the last target), sequence i the i-th seq_len of them; a batch that would run past the
// split's end starts the split over. Neither depends on the number of ranks: a rank fills the
// sequences it trains on by their index in the global batch.
class BatchLoader {
 public:
  // Throws Error (all ranks) when the sequential order's batch does not fit in the split.
  BatchLoader(Split split, DataOrder order, std::uint64_t seed, std::uint64_t stream, std::int64_t seq_len,
              std::int64_t global_batch, const std::string& split_name);
  // Moves to the next batch: fill() gives its sequences until the next call.
  void next_batch();
  void fill(std::int64_t first_sequence, std::int64_t count, int* tokens, int* targets) const;
  // Where the next batch starts; seek() makes it the next batch (restoring a checkpoint's).
  LoaderPosition position() const { return next_; }
  void seek(const LoaderPosition& position);
  // The data set position of the next batch's first token (sequence 0's window in random order).
  std::size_t next_start() const;
  bool sequential() const { return sequential_; }
  const Split& split() const { return split_; }

 private:
  std::size_t random_start(std::int64_t batch, std::int64_t sequence) const;
  void wrap();  // sequential: start the split over when the next batch would not fit

  Split split_;
  bool sequential_;
  std::uint64_t seed_, stream_;
  std::int64_t seq_len_, global_batch_;
  std::int64_t batch_ = -1;     // the current batch
  std::size_t batch_offset_ = 0;  // sequential: where it starts in the split
  LoaderPosition next_;
};

}  // namespace st
