#include "core/choices.hpp"

namespace st {

int zero_stage(StrategyKind strategy) {
  switch (strategy) {
    case StrategyKind::ddp: return 0;
    case StrategyKind::zero1: return 1;
    case StrategyKind::zero2: return 2;
    case StrategyKind::zero3:
    case StrategyKind::fsdp:
    case StrategyKind::hsdp: return 3;
    case StrategyKind::automatic: break;
  }
  return -1;  // "auto" is resolved to one of the others before anything is sharded
}

}  // namespace st
