#pragma once
// Which part of every segment each member of a sharding group owns: the flat layout split
// segment by segment with the one padding rule (comm/shard.hpp). The strategies, the memory
// prediction and the traffic formulas all ask this one piece of arithmetic.
//
// Three index spaces:
//  - flat:   the model's layout (ParamLayout), unpadded;
//  - padded: a full buffer in which segment s takes chunk(s) x parts elements, so that a
//            reduce-scatter or all-gather of one segment is one call;
//  - shard:  one member's buffer, the chunks it owns of every segment, in segment order.
#include <cstddef>
#include <vector>

#include "model/layout.hpp"

namespace st {

struct SegmentShard {
  std::size_t offset = 0;         // first element in the flat layout
  std::size_t size = 0;           // real elements
  std::size_t chunk = 0;          // elements each part holds, padding included
  std::size_t padded_offset = 0;  // first element in the padded full buffer
  std::size_t shard_offset = 0;   // first element of this segment's chunk in a shard buffer
};

class ShardLayout {
 public:
  ShardLayout(const ParamLayout& layout, int parts);

  int parts() const { return parts_; }
  const std::vector<SegmentShard>& segments() const { return segments_; }
  const SegmentShard& segment(std::size_t s) const { return segments_[s]; }
  std::size_t padded_total() const { return padded_total_; }  // elements of a padded full buffer
  std::size_t shard_total() const { return shard_total_; }    // elements of one member's shard
  std::size_t flat_total() const { return flat_total_; }      // real elements (the model's)
  std::size_t padded(std::size_t s) const { return segments_[s].chunk * static_cast<std::size_t>(parts_); }

  // Real elements of segment s that `part` owns (the rest of its chunk is padding).
  std::size_t owned_count(std::size_t s, int part) const;
  // The first of them, in the flat layout.
  std::size_t owned_flat_offset(std::size_t s, int part) const { return segments_[s].offset + owned_local(s, part); }
  // ... and in the padded full buffer.
  std::size_t owned_padded_offset(std::size_t s, int part) const {
    return segments_[s].padded_offset + owned_local(s, part);
  }

 private:
  std::size_t owned_local(std::size_t s, int part) const { return segments_[s].chunk * static_cast<std::size_t>(part); }
  int parts_;
  std::vector<SegmentShard> segments_;
  std::size_t padded_total_ = 0, shard_total_ = 0, flat_total_ = 0;
};

}  // namespace st
