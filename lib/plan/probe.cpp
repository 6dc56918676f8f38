#include "plan/probe.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/timer.hpp"
#include "model/model.hpp"

namespace st {

double model_probe_bytes(const ModelShape& shape, int micro_batch) {
  const double params = static_cast<double>(make_layout(shape).total());
  const int heads = attention_heads_at_once(false, micro_batch, static_cast<int>(shape.n_head), omp_get_max_threads());
  return 4.0 * (2 * params + static_cast<double>(activation_sizes(shape, micro_batch, Recompute::none, heads, false).total()));
}

double measure_model_flops(const ModelShape& shape, int micro_batch, double min_seconds) {
  const std::unique_ptr<Model<float>> owned = make_model<float>(shape, micro_batch);
  Model<float>& model = *owned;
  std::vector<float> params(model.layout().total()), grads(params.size(), 0.0f);
  model.init_params(params, 1);
  const int T = static_cast<int>(shape.seq_len);
  std::vector<int> tokens(static_cast<std::size_t>(micro_batch) * T), targets(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int>((i * 7919) % static_cast<std::size_t>(shape.vocab_size));
    targets[i] = static_cast<int>((i * 7919 + 1) % static_cast<std::size_t>(shape.vocab_size));
  }
  auto pass = [&] {
    const double loss = model.forward(params, tokens.data(), targets.data(), micro_batch, T);
    model.backward(params, grads, 1.0f);
    return loss;
  };
  const double loss = pass();  // warm-up: pages, caches, thread pools
  if (!(loss > 0)) throw Error("model probe: the forward pass gave a loss of " + std::to_string(loss));
  const double flops = train_flops_per_token(shape, T) * micro_batch * T;
  double best = 0;
  Stopwatch total;
  for (int runs = 0; runs < 5 && (runs < 1 || total.seconds() < min_seconds); ++runs) {
    Stopwatch one;
    pass();
    best = std::max(best, flops / std::max(one.seconds(), 1e-9));
  }
  return best;
}

}  // namespace st
