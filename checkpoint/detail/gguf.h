// ferry/checkpoint/detail/gguf.h: INTERNAL. The GGUF decoder behind
// checkpoint::open() and the pieces the writer and the converter share.
// gguf.h states the rules. Not part of the API.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/detail/zip.h"
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
[[nodiscard]] result<gguf_header, error> read_gguf_header(std::uint64_t size, const zip_read_at& read,
                                                          const read_options& opt);

/// The reader's view of a GGUF file (gguf.h's WHAT THE READER HANDS OUT).
/// Contexts do not name the file.
[[nodiscard]] result<parsed_file, error> parse_gguf(std::uint64_t size, const zip_read_at& read,
                                                   const read_options& opt);

}  // namespace ferry::checkpoint::detail
