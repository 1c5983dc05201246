// ferry/graph/options.h: the limits and settings of graph archives.
#pragma once

#include <cstddef>

#include "ferry/schema/schema.h"
#include "ferry/wire/byte_order.h"

namespace ferry::graph {

struct options {
  /// Byte order of fixed-width scalars when writing. Readers accept both.
  wire::byte_order order = wire::byte_order::little;
  /// Depth, count, name and value limits (see schema::limits). Writing
  /// enforces max_depth, max_count and max_objects too, so an archive
  /// written with some options is not refused for those limits when read
  /// with the same options.
  schema::limits limits;
  /// Objects in one archive (entries of the object table).
  std::size_t max_objects = std::size_t{1} << 24;
  /// Bytes the reader may allocate for objects and container elements, as a
  /// multiple of the input size (plus 1 MiB): a few bytes of input cannot
  /// make it allocate gigabytes.
  std::size_t allocation_factor = 64;
};

}  // namespace ferry::graph
