// ferry/schema/error.h: the error codes of type descriptors and schemas (schema/).
//
// Numbers are stable (see ferry/base/error.h); new codes take the next
// free number of the 200..299 block. Failures shared by every format
// (truncated, bad_magic, checksum_mismatch, ...) are ferry::errc.
#pragma once

#include <cstdint>

#include "ferry/base/error.h"

namespace ferry {

enum class schema_errc : std::uint16_t {
  bad_descriptor = 203,  ///< A type descriptor has an unknown kind or a malformed body.
  bad_type_index = 204,  ///< A descriptor names a schema type that does not exist.
  duplicate_field = 217, ///< A schema type lists the same tag or field name twice.
};
FERRY_ERROR_ENUM(schema_errc);

namespace detail {
inline constexpr error_info schema_errc_table[] = {
    {203, "bad_descriptor", "malformed type descriptor"},
    {204, "bad_type_index", "descriptor names a schema type that does not exist"},
    {217, "duplicate_field", "schema lists a field tag or name twice"},
};
[[maybe_unused]] inline const bool schema_errc_registered = register_errors(schema_errc_table);
}  // namespace detail

}  // namespace ferry
