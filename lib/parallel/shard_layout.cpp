#include "parallel/shard_layout.hpp"

#include "comm/shard.hpp"
#include "core/error.hpp"

namespace st {

ShardLayout::ShardLayout(const ParamLayout& layout, int parts) : parts_(parts) {
  ST_REQUIRE(parts >= 1, "a sharding group has at least one member");
  for (const Segment& segment : layout.segments()) {
    const ShardRange range = shard_range(segment.size, parts, 0);
    SegmentShard s;
    s.offset = segment.offset;
    s.size = segment.size;
    s.chunk = range.chunk;
    s.padded_offset = padded_total_;
    s.shard_offset = shard_total_;
    padded_total_ += range.padded;
    shard_total_ += range.chunk;
    flat_total_ += segment.size;
    segments_.push_back(s);
  }
}

std::size_t ShardLayout::owned_count(std::size_t s, int part) const {
  return shard_range(segments_[s].size, parts_, part).real();
}

}  // namespace st
