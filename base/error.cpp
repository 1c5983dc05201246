#include "ferry/base/error.h"

namespace ferry {

std::string_view message(errc e) noexcept {
  switch (e) {
    case errc::ok: return "no error";
    case errc::truncated: return "input ends before the value it announces";
    case errc::no_space: return "output buffer is too small";
    case errc::varint_overlong: return "varint has a redundant trailing zero byte";
    case errc::varint_overflow: return "varint value does not fit the target type";
    case errc::out_of_range: return "position or length lies outside the buffer";
    case errc::limit_exceeded: return "length exceeds the decoder's limit";
    case errc::size_mismatch: return "buffer sizes do not match the element count";
    case errc::unknown_dtype: return "unknown dtype";
    case errc::bad_magic: return "input does not start with the expected magic bytes";
    case errc::unsupported_version: return "unsupported archive format version";
    case errc::bad_byte_order: return "byte-order field is neither little nor big";
    case errc::bad_descriptor: return "malformed type descriptor";
    case errc::bad_type_index: return "descriptor names a schema type that does not exist";
    case errc::unknown_type: return "type name not registered";
    case errc::bad_reference: return "object reference outside the object table";
    case errc::type_mismatch: return "value or reference has a different type than expected";
    case errc::depth_exceeded: return "nesting deeper than the configured limit";
    case errc::field_type_mismatch: return "field has the expected tag and name but another type";
    case errc::field_renamed: return "field tag and name pair up differently than in the reader";
    case errc::bad_value: return "bool, optional flag or variant index out of range";
    case errc::duplicate_key: return "map or set holds a key twice";
    case errc::ownership_conflict: return "object owned twice or by the wrong pointer kind";
    case errc::untracked_pointer: return "pointer to an object the archive does not hold";
    case errc::unregistered_type: return "dynamic type is not registered for polymorphic writing";
    case errc::trailing_bytes: return "bytes remain after the archive";
    case errc::duplicate_field: return "schema lists a field tag or name twice";
    case errc::io_error: return "file or stream I/O failed";
    case errc::pointer_into_root: return "raw pointer into the root value, which read() moves (use read_into)";
    case errc::checksum_mismatch: return "CRC32C does not match the frame's bytes";
    case errc::auth_failed: return "peer could not prove it holds the shared secret";
    case errc::version_mismatch: return "peer speaks another protocol version";
    case errc::config_mismatch: return "peer's world configuration differs";
    case errc::peer_lost: return "peer's connection closed or reset";
    case errc::timed_out: return "no progress within the timeout";
    case errc::sequence_mismatch: return "frame from an unexpected collective, chunk or sender";
    case errc::connect_failed: return "address could not be resolved, bound or reached";
    case errc::bad_config: return "invalid configuration";
    case errc::aborted: return "communicator failed earlier";
    case errc::protocol_error: return "message not allowed by the protocol at this point";
  }
  return "unknown error";
}

std::string_view name(errc e) noexcept {
  switch (e) {
    case errc::ok: return "ok";
    case errc::truncated: return "truncated";
    case errc::no_space: return "no_space";
    case errc::varint_overlong: return "varint_overlong";
    case errc::varint_overflow: return "varint_overflow";
    case errc::out_of_range: return "out_of_range";
    case errc::limit_exceeded: return "limit_exceeded";
    case errc::size_mismatch: return "size_mismatch";
    case errc::unknown_dtype: return "unknown_dtype";
    case errc::bad_magic: return "bad_magic";
    case errc::unsupported_version: return "unsupported_version";
    case errc::bad_byte_order: return "bad_byte_order";
    case errc::bad_descriptor: return "bad_descriptor";
    case errc::bad_type_index: return "bad_type_index";
    case errc::unknown_type: return "unknown_type";
    case errc::bad_reference: return "bad_reference";
    case errc::type_mismatch: return "type_mismatch";
    case errc::depth_exceeded: return "depth_exceeded";
    case errc::field_type_mismatch: return "field_type_mismatch";
    case errc::field_renamed: return "field_renamed";
    case errc::bad_value: return "bad_value";
    case errc::duplicate_key: return "duplicate_key";
    case errc::ownership_conflict: return "ownership_conflict";
    case errc::untracked_pointer: return "untracked_pointer";
    case errc::unregistered_type: return "unregistered_type";
    case errc::trailing_bytes: return "trailing_bytes";
    case errc::duplicate_field: return "duplicate_field";
    case errc::io_error: return "io_error";
    case errc::pointer_into_root: return "pointer_into_root";
    case errc::checksum_mismatch: return "checksum_mismatch";
    case errc::auth_failed: return "auth_failed";
    case errc::version_mismatch: return "version_mismatch";
    case errc::config_mismatch: return "config_mismatch";
    case errc::peer_lost: return "peer_lost";
    case errc::timed_out: return "timed_out";
    case errc::sequence_mismatch: return "sequence_mismatch";
    case errc::connect_failed: return "connect_failed";
    case errc::bad_config: return "bad_config";
    case errc::aborted: return "aborted";
    case errc::protocol_error: return "protocol_error";
  }
  return "unknown";
}

}  // namespace ferry
