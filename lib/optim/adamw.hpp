#pragma once
// AdamW (Loshchilov & Hutter) with bias correction and decoupled weight decay, on any range of
// the flat parameter buffer, so a rank can update just the shard it owns.
#include <cstdint>
#include <span>
#include <vector>

#include "model/layout.hpp"
#include "exec/adamw_constants.hpp"

namespace st {

struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  bool decay_embeddings = false;
  bool decay_norms_and_biases = false;
};

class AdamW {
 public:
  AdamW(const AdamWSettings& settings, const ParamLayout& layout);

  // One update of params[global_offset, global_offset + params.size()) at step t (1-based, for
  // bias correction), on the host, range by range (the reference the one-launch update equals).
  // grad_scale multiplies every gradient first (clipping).
  void update(std::span<float> params, std::span<const float> grads, std::span<float> m, std::span<float> v,
              std::size_t global_offset, double lr, double grad_scale, std::int64_t t) const;

  // The same update as a list of contiguous pieces, each with the constants of its range (decayed
  // or not): first element (relative to global_offset), count, constants.
  struct Piece {
    std::size_t first = 0, count = 0;
    AdamWConstants constants;
  };
  std::vector<Piece> pieces(std::size_t global_offset, std::size_t count, double lr, double grad_scale,
                            std::int64_t t) const;

  // The one-launch form (Exec::adamw): step t's constants at learning rate lr, the same bits as
  // pieces()' ...
  AdamWStepConstants step_constants(double lr, std::int64_t t) const;
  // ... and the tiles of `count` elements starting at global_offset in the flat layout, whose
  // parameters, gradients and Adam state start at param, grad and state in their buffers:
  // appended to `tiles`, split where decay changes and every kAdamWTileElements.
  void append_tiles(std::vector<AdamWTile>& tiles, std::size_t global_offset, std::size_t count, std::size_t param,
                    std::size_t grad, std::size_t state) const;

  // Whether the element at a global offset is decayed (for tests and reports).
  bool decays(std::size_t global_offset) const;

 private:
  struct Range {
    std::size_t begin, end;
    bool decay;
  };
  AdamWSettings settings_;
  std::vector<Range> ranges_;  // sorted, covering the whole layout
};

}  // namespace st
