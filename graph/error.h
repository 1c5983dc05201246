// ferry/graph/error.h: the error codes of graph archives (graph/).
//
// Numbers are stable (see ferry/base/error.h); new codes take the next
// free number of the 200..299 block. Failures shared by every format
// (truncated, bad_magic, checksum_mismatch, ...) are ferry::errc.
#pragma once

#include <cstdint>

#include "ferry/base/error.h"

namespace ferry {

enum class graph_errc : std::uint16_t {
  unknown_type = 205,        ///< A polymorphic type name no registered C++ type has.
  bad_reference = 206,       ///< An object reference outside the archive's object table.
  type_mismatch = 207,       ///< A reference or value whose type differs from what the reader expects.
  field_type_mismatch = 209, ///< A field with the reader's tag and name but another type.
  field_renamed = 210,       ///< A field whose tag and name pair up differently than in the reader.
  ownership_conflict = 213,  ///< An object owned twice, or owned by the wrong kind of pointer.
  untracked_pointer = 214,   ///< Writing: a raw or weak pointer to an object the archive does not hold.
  unregistered_type = 215,   ///< Writing: a polymorphic object whose dynamic type is not registered.
  pointer_into_root = 219,   ///< read(): a raw pointer targets the returned root itself (use read_into).
};
FERRY_ERROR_ENUM(graph_errc);

namespace detail {
inline constexpr error_info graph_errc_table[] = {
    {205, "unknown_type", "type name not registered"},
    {206, "bad_reference", "object reference outside the object table"},
    {207, "type_mismatch", "value or reference has a different type than expected"},
    {209, "field_type_mismatch", "field has the expected tag and name but another type"},
    {210, "field_renamed", "field tag and name pair up differently than in the reader"},
    {213, "ownership_conflict", "object owned twice or by the wrong pointer kind"},
    {214, "untracked_pointer", "pointer to an object the archive does not hold"},
    {215, "unregistered_type", "dynamic type is not registered for polymorphic writing"},
    {219, "pointer_into_root", "raw pointer into the root value, which read() moves (use read_into)"},
};
[[maybe_unused]] inline const bool graph_errc_registered = register_errors(graph_errc_table);
}  // namespace detail

}  // namespace ferry
