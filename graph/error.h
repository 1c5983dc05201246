// ferry/graph/error.h: the error codes of graph archives (graph/).
//
// Numbers are stable (see ferry/base/error.h); new codes take the next
// free number of the 250..299 block. Failures shared by every format
// (truncated, bad_magic, checksum_mismatch, ...) are ferry::errc.
#pragma once

#include <cstdint>

#include "ferry/base/error.h"

namespace ferry {

#define FERRY_GRAPH_ERRORS(X)                                                                      \
  X(unknown_type, 250, "type name not registered")                                                 \
  X(bad_reference, 251, "object reference outside the object table")                               \
  X(type_mismatch, 252, "value or reference has a different type than expected")                   \
  X(field_type_mismatch, 253, "field has the expected tag and name but another type")              \
  X(field_renamed, 254, "field tag and name pair up differently than in the reader")               \
  X(ownership_conflict, 255, "object owned twice or by the wrong pointer kind")                    \
  X(untracked_pointer, 256, "pointer to an object the archive does not hold")                      \
  X(unregistered_type, 257, "dynamic type is not registered for polymorphic writing")              \
  X(pointer_into_root, 258, "raw pointer into the root value, which read() moves (use read_into)")
FERRY_DEFINE_ERRORS(graph_errc, FERRY_GRAPH_ERRORS);

}  // namespace ferry
