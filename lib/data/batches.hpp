#pragma once
// Which sequences each rank trains on. A global batch of G sequences is drawn per step from the
// seed alone; rank r takes sequences [r G/N, (r+1) G/N) in micro-batches of M, so the same deck
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

// A held-out split of the data: [begin, end) token positions.
struct Split {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};
struct DataSplits {
  Split train, val;
};
// Validation is the last val_fraction of the tokens. Throws Error if either part is shorter than
// one sequence plus its target.
DataSplits split_data(const TokenDataset& data, double val_fraction, std::int64_t seq_len);

// The data loader's position: how many training batches have been drawn. Batch k depends only
// on (seed, k), so restoring the position (from a checkpoint) resumes the exact batch sequence.
class BatchCursor {
 public:
  std::int64_t take() { return next_++; }
  std::int64_t position() const { return next_; }
  void seek(std::int64_t position) { next_ = position; }

 private:
  std::int64_t next_ = 0;
};

// Draws sequence `index` of batch `batch` from a split: tokens and the next-token targets.
// stream separates training (0) from validation (1) draws.
class SequenceSampler {
 public:
  SequenceSampler(const TokenDataset& data, Split split, std::uint64_t seed, std::uint64_t stream,
                  std::int64_t seq_len);
  void fill(std::int64_t batch, std::int64_t first_sequence, std::int64_t count, int* tokens, int* targets) const;

 private:
  const TokenDataset* data_;
  Split split_;
  std::uint64_t seed_, stream_;
  std::int64_t seq_len_;
};

}  // namespace st
