// ferry/schema/error.h: the error codes of type descriptors and schemas (schema/).
//
// Numbers are stable (see ferry/base/error.h); new codes take the next
// free number of the 200..249 block. Failures shared by every format
// (truncated, bad_magic, checksum_mismatch, ...) are ferry::errc.
#pragma once

#include <cstdint>

#include "ferry/base/error.h"

namespace ferry {

#define FERRY_SCHEMA_ERRORS(X)                                                 \
  X(bad_descriptor, 200, "malformed type descriptor")                          \
  X(bad_type_index, 201, "descriptor names a schema type that does not exist") \
  X(duplicate_field, 202, "schema lists a field tag or name twice")
FERRY_DEFINE_ERRORS(schema_errc, FERRY_SCHEMA_ERRORS);

}  // namespace ferry
