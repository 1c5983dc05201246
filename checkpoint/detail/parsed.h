// ferry/checkpoint/detail/parsed.h: INTERNAL. What a reader knows of a file
// once its structure is checked; built by the .ferry parser (ferry_file.cpp),
// the safetensors parser (safetensors.cpp) and the .pt parser
// (pytorch.cpp), the .npy/.npz parsers (npy.cpp, npz.cpp) and the GGUF
// parser (gguf.cpp). Not part of the API.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/file.h"
#include "ferry/checkpoint/detail/layout.h"
#include "ferry/checkpoint/detail/zip.h"
#include "ferry/checkpoint/format.h"
#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/safetensors.h"

namespace ferry::checkpoint::detail {

/// Where an .npz tensor's bytes lie (npy.h): its zip record, and the
/// array data inside the record after the .npy header.
struct npz_source {
  std::uint16_t method = 0;              ///< 0 stored, 8 deflated
  std::uint64_t record_offset = 0;       ///< the record's first (compressed) byte in the file
  std::uint64_t compressed_size = 0;
  std::uint64_t record_size = 0;         ///< uncompressed: the .npy header and data
  std::uint32_t crc32 = 0;               ///< of the uncompressed record
  std::uint64_t header_bytes = 0;        ///< the .npy header: data starts here in the record
  std::string name;                      ///< the zip record's name, for errors
};

struct parsed_file {
  file_format format = file_format::ferry;
  wire::byte_order order = wire::byte_order::little;
  std::uint32_t alignment = 64;
  std::uint64_t data_end = 0;  ///< where the storage area ends (.ferry: the manifest)
  std::vector<tensor_info> tensors;
  std::vector<storage_info> storages;
  std::map<std::string, std::string> metadata;
  /// .pt: the zip records that are not storages (data.pkl, version, ...),
  /// whose CRC-32 verify() checks too.
  std::vector<zip_record> other_records;
  /// .ferry: the trailer's manifest_crc32c (what a set's index records).
  std::uint32_t manifest_crc32c = 0;
  /// .npz: per storage, its record (empty for every other format).
  std::vector<npz_source> npz;
  /// GGUF: the header, typed (gguf.h); storage i is tensor i. Null for
  /// every other format.
  std::shared_ptr<const gguf_header> gguf;
};

/// A .ferry file's (or set index's) header and trailer, checked, and its
/// manifest's bytes, their CRC checked: what every .ferry file shares.
struct ferry_container {
  trailer_fields trailer;
  std::vector<std::byte> manifest;
};

/// Reads the container of a .ferry file of `size` bytes whose first
/// header_size bytes are `head` (ferry_file.cpp).
result<ferry_container, error> read_ferry_container(int fd, std::uint64_t size, const std::filesystem::path& path,
                                                    std::span<const std::byte, header_size> head, const limits& lim);

/// Reads exactly `out.size()` bytes at `offset`. Errors: io_error, truncated.
result<void> pread_exact(int fd, std::uint64_t offset, std::span<std::byte> out, int& sys_errno) noexcept;

/// An error whose context is `file` (and `: what`).
error file_error(const std::filesystem::path& file, error_code c, int sys_errno = 0, std::string_view what = {});

/// Parses a .ferry file of `size` bytes whose first header_size bytes are
/// `head` (ferry_file.cpp).
result<parsed_file, error> parse_ferry(int fd, std::uint64_t size, const std::filesystem::path& path,
                                       std::span<const std::byte, header_size> head, const limits& lim);

/// Parses a safetensors header. `file_size` is the file's length; the first
/// 8 bytes, the header's length, are `header_length`.
result<parsed_file, error> parse_safetensors(int fd, std::uint64_t file_size, std::uint64_t header_length,
                                             const limits& lim);

/// Parses a header in memory (the fuzzer's and the tests' entry, and what
/// parse_safetensors() calls). `data_size` is the bytes after the header.
result<parsed_file, error> parse_safetensors_header(std::string_view json, std::uint64_t data_offset,
                                                    std::uint64_t data_size, const limits& lim);

/// Parses a PyTorch .pt file of `size` bytes read through `read`
/// (pytorch.h). Contexts do not name the file.
result<parsed_file, error> parse_pytorch(std::uint64_t size, const zip_read_at& read, const read_options& opt);

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

/// Whether `head` (a file's first bytes) starts a legacy torch.save file
/// (before PyTorch 1.6, or _use_new_zipfile_serialization=False): a pickle
/// of the magic number 0x1950a86a20f9469cfc6c, in any pickle protocol.
[[nodiscard]] bool legacy_pytorch(std::span<const std::byte> head) noexcept;

}  // namespace ferry::checkpoint::detail
