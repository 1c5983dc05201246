// ferry/checkpoint/pytorch/internal.h: INTERNAL. The .pt parser's entry
// points (read.cpp), for its format.cpp, the fuzzers and the tests. Not
// part of the API.
#pragma once

#include <cstdint>
#include <span>

#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/zip/zip.h"

namespace ferry::checkpoint::detail {

/// Parses a PyTorch .pt archive whose zip directory is `dir` (pytorch.h).
/// Contexts do not name the file.
result<parsed_file, error> parse_pytorch(zip_directory dir, const zip_read_at& read, const read_options& opt);

/// The same, the directory read first: for bytes in memory (the fuzzers'
/// and the tests' entry).
result<parsed_file, error> parse_pytorch(std::uint64_t size, const zip_read_at& read, const read_options& opt);

/// Whether `head` (a file's first bytes) starts a legacy torch.save file
/// (before PyTorch 1.6, or _use_new_zipfile_serialization=False): a pickle
/// of the magic number 0x1950a86a20f9469cfc6c, in any pickle protocol.
[[nodiscard]] bool legacy_pytorch(std::span<const std::byte> head) noexcept;

}  // namespace ferry::checkpoint::detail
