#pragma once
// The compute rate the planner predicts with: the model's own forward and backward, timed.
#include "model/layout.hpp"

namespace st {

// FLOP/s of one forward + backward of `micro_batch` sequences of this model on this rank (with
// the current thread settings): training FLOPs (train_flops_per_token) over the best of a
// few timed passes after a warm-up, for at least `min_seconds`. Every kernel counts, not only the
// matmuls, so step times predicted from it include what sgemm's rate leaves out.
double measure_model_flops(const ModelShape& shape, int micro_batch, double min_seconds = 0.3);

// Bytes the probe allocates (parameters, gradients, activations): the caller checks they fit.
double model_probe_bytes(const ModelShape& shape, int micro_batch);

}  // namespace st
