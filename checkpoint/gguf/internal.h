// ferry/checkpoint/gguf/internal.h: INTERNAL. The GGUF decoder behind
// checkpoint::open() and the pieces the writer and the converter share.
// gguf.h states the rules. Not part of the API.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/zip/zip.h"
#include "ferry/checkpoint/gguf.h"

namespace ferry::checkpoint::detail {

/// "GGUF" as bytes: what every writer writes.
inline constexpr std::byte gguf_magic[4] = {std::byte{'G'}, std::byte{'G'}, std::byte{'U'}, std::byte{'F'}};
/// A big-endian file's magic to gguf-py's reader (and what llama.cpp's
/// gguf_convert_endian.py writes for big-endian output).
inline constexpr std::byte gguf_magic_reversed[4] = {std::byte{'F'}, std::byte{'U'}, std::byte{'G'}, std::byte{'G'}};

/// The largest general.alignment ferry accepts (gguf.h).
inline constexpr std::uint32_t max_gguf_alignment = std::uint32_t{1} << 30;
/// Bytes of a tensor name ggml can read (GGML_MAX_NAME - 1): save_gguf()'s bound.
inline constexpr std::size_t max_ggml_name_bytes = 63;

/// `n` rounded up to a multiple of `alignment` (a power of two). Requires:
/// the result fits (n <= UINT64_MAX - alignment + 1).
[[nodiscard]] constexpr std::uint64_t gguf_pad(std::uint64_t n, std::uint64_t alignment) noexcept {
  return (n + alignment - 1) & ~(alignment - 1);
}

/// Reads the header of a GGUF file of `size` bytes through `read`,
/// growing the prefix read from 1 MiB as the parse needs, up to
/// lim.max_gguf_header_bytes [limit_exceeded]. Contexts do not name the
/// file.
/// The alignment `general_alignment` (the value of general.alignment, or
/// nullptr) sets: a u32 power of two from 1 to 2^30, or 32 when absent.
/// Errors: bad_alignment. The parser and the writer share the rule.
[[nodiscard]] result<std::uint32_t, error> gguf_alignment(const gguf_value* general_alignment);

/// The bytes of a tensor of `type` with extents `ne` (GGUF's order), each
/// rule of gguf.h's TENSOR DATA checked. `who` names the tensor in errors.
/// Errors: shape_overflow (an extent or their product past 2^63, the byte
/// count past 2^64), shape_size_mismatch (ne[0] not whole blocks).
[[nodiscard]] result<std::uint64_t, error> gguf_tensor_bytes(ggml_type type, std::span<const std::uint64_t> ne,
                                                            std::string_view who);

[[nodiscard]] result<gguf_header, error> read_gguf_header(std::uint64_t size, const zip_read_at& read,
                                                          const read_options& opt);

/// A GGUF file's storages: storage i is tensor i, and a storage of
/// quantized blocks swaps field by field (ggml_types.h's swap table) rather
/// than as elements. Holds the typed header reader::gguf() hands out.
class gguf_storages final : public storage_source {
 public:
  explicit gguf_storages(gguf_header h) noexcept : header(std::move(h)) {}
  [[nodiscard]] std::size_t block_bytes(std::uint32_t i) const noexcept override;
  void blocks_to_host(std::uint32_t i, std::span<std::byte> blocks, wire::byte_order from) const noexcept override;
  const gguf_header header;
};

/// The reader's view of a GGUF file (gguf.h's WHAT THE READER HANDS OUT);
/// its source is a gguf_storages. Contexts do not name the file.
[[nodiscard]] result<parsed_file, error> parse_gguf(std::uint64_t size, const zip_read_at& read,
                                                   const read_options& opt);

}  // namespace ferry::checkpoint::detail
