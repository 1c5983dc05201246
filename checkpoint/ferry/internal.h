// ferry/checkpoint/ferry/internal.h: INTERNAL. The .ferry parser's entry
// points (read.cpp), for its format.cpp and for sets, whose index is a
// .ferry container (set/). Not part of the API.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/ferry/layout.h"
#include "ferry/checkpoint/format.h"

namespace ferry::checkpoint::detail {

/// A .ferry file's (or set index's) header and trailer, checked, and its
/// manifest's bytes, their CRC checked: what every .ferry file shares.
struct ferry_container {
  trailer_fields trailer;
  std::vector<std::byte> manifest;
};

/// Reads the container of a .ferry file of `size` bytes whose first
/// header_size bytes are `head`.
result<ferry_container, error> read_ferry_container(int fd, std::uint64_t size, const std::filesystem::path& path,
                                                    std::span<const std::byte, header_size> head, const limits& lim);

/// Parses a .ferry file of `size` bytes whose first header_size bytes are
/// `head`. Errors name the file.
result<parsed_file, error> parse_ferry(int fd, std::uint64_t size, const std::filesystem::path& path,
                                       std::span<const std::byte, header_size> head, const limits& lim);

/// Whether `head` starts with file_magic (or is a prefix of it), and is a
/// set's index (set_index_flag at byte 10) or not.
[[nodiscard]] bool ferry_head(std::span<const std::byte> head, bool index) noexcept;

}  // namespace ferry::checkpoint::detail
