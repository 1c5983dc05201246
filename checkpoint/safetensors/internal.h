// ferry/checkpoint/safetensors/internal.h: INTERNAL. The safetensors
// parser (read.cpp), the writer (write.cpp) and the Hugging Face index
// (index.cpp), for the format's format.cpp, the fuzzers and the tests.
// Not part of the API.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/base/file.h"
#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/safetensors.h"

namespace ferry::checkpoint::detail {

/// Parses a safetensors header. `file_size` is the file's length; the first
/// 8 bytes, the header's length, are `header_length`.
result<parsed_file, error> parse_safetensors(int fd, std::uint64_t file_size, std::uint64_t header_length,
                                             const limits& lim);

/// Parses a header in memory (the fuzzer's and the tests' entry, and what
/// parse_safetensors() calls). `data_size` is the bytes after the header.
result<parsed_file, error> parse_safetensors_header(std::string_view json, std::uint64_t data_offset,
                                                    std::uint64_t data_size, const limits& lim);

/// save_safetensors() without the commit: the file written in its
/// temporary, for callers that publish several files together.
result<base::atomic_file, error> stage_safetensors(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                                                   const std::map<std::string, std::string>& metadata,
                                                   const safetensors_options& opt);

/// A Hugging Face sharded safetensors index (safetensors.h): the shards'
/// file names and which holds each tensor, in the index's order.
struct hf_index {
  std::vector<std::string> files;
  std::vector<std::pair<std::string, std::uint32_t>> weights;  ///< name, index into files
  std::map<std::string, std::string> metadata;
};

/// Parses an index's JSON (the fuzzer's and the tests' entry).
result<hf_index, error> parse_hf_index(std::string_view json, const limits& lim);

}  // namespace ferry::checkpoint::detail
