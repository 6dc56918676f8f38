#include "parallel/strategy.hpp"

#include "core/error.hpp"
#include "parallel/replicated.hpp"

namespace st {

std::unique_ptr<Strategy> make_strategy(const ParallelConfig& parallel, const ParamLayout& layout,
                                        const AdamWSettings& adamw, Communicator& comm) {
  if (parallel.strategy == "ddp")
    return std::make_unique<ReplicatedStrategy>(layout, adamw, comm,
                                                static_cast<std::size_t>(parallel.bucket_mb * 1024 * 1024));
  // The deck parser refuses the others already; this guards callers that bypass it.
  throw Error("parallel.strategy = \"" + parallel.strategy + "\" is not available in this build",
              ErrorScope::all_ranks);
}

}  // namespace st
