// ferry/checkpoint/detail/parsed.h: INTERNAL. The one description of a
// checkpoint that every format's parser builds (detail/formats.h) and the
// reader serves (reader.cpp): its tensors and storages, where each storage
// lies, what verify() checks beyond the storages' checksums, and, for a
// format whose storages are not byte ranges of one file, the storage_source
// that fetches them. Not part of the API.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/checkpoint/detail/mapped_file.h"
#include "ferry/checkpoint/formats.h"
#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/zip/zip.h"

namespace ferry::checkpoint::detail {

struct parsed_file;

/// What the reader passes a storage_source for one storage.
struct load_request {
  std::uint32_t storage = 0;
  bool check = false;  ///< the first fetch: the storage's checksums are due
  const read_options& opt;
  const mapped_file* file = nullptr;  ///< the checkpoint's file; null for a directory
  const std::filesystem::path& path;
  /// An error about the storage, named by its first tensor.
  const std::function<error(error_code, int)>& storage_error;
};

/// How a format's storages are fetched when they are not a byte range of
/// the file in the file's (or their own) byte order: compressed records,
/// blocks that swap field by field, pieces in other files. The reader asks
/// this first; every default means "the reader's own way".
class storage_source {
 public:
  virtual ~storage_source() = default;
  /// Storage `r.storage` in host order; null when the reader's read of
  /// its range serves (after whatever this source checked first).
  [[nodiscard]] virtual result<std::shared_ptr<const storage_buffer>, error> load(const parsed_file& f,
                                                                                  const load_request& r) const;
  /// reader::verify() when this format checks more than, or other than,
  /// each storage's checksums; nullopt: the reader's own.
  [[nodiscard]] virtual std::optional<result<void, error>> verify(
      const parsed_file& f, const mapped_file* file, const std::filesystem::path& path,
      const std::function<void(std::uint64_t)>& progress) const;
  /// reader::read_into() of contiguous tensor `t`; nullopt: the reader's own.
  [[nodiscard]] virtual std::optional<result<void, error>> read_into(const tensor_info& t,
                                                                     std::span<std::byte> out) const;
  /// Whether a storage's bytes in the file are its elements (false: the
  /// reader reads into a caller's memory through load()).
  [[nodiscard]] virtual bool direct_reads() const noexcept { return true; }
  /// The bytes of one block when storage i holds blocks that change byte
  /// order field by field (0: elements of its dtype), and that change.
  [[nodiscard]] virtual std::size_t block_bytes(std::uint32_t i) const noexcept;
  virtual void blocks_to_host(std::uint32_t i, std::span<std::byte> blocks, wire::byte_order from) const noexcept;
  /// The files this checkpoint's storages lie in, when they are other
  /// checkpoints (reader::shards()), and their bytes in all.
  [[nodiscard]] virtual std::span<const reader> shards() const noexcept { return {}; }
  [[nodiscard]] virtual std::optional<std::uint64_t> total_size() const noexcept { return std::nullopt; }
};

struct parsed_file {
  file_format format{};
  wire::byte_order order = wire::byte_order::little;
  std::uint32_t alignment = 64;
  std::vector<tensor_info> tensors;
  std::vector<storage_info> storages;
  std::map<std::string, std::string> metadata;
  /// verify(): every byte from data_begin to data_end that no storage
  /// covers must be zero (a format whose padding is zero by rule).
  bool zero_gaps = false;
  std::uint64_t data_begin = 0;
  std::uint64_t data_end = 0;  ///< where the storage area ends
  /// verify(): the zip records that are not storages (a pickle, a version
  /// record, ...), each checked against its CRC-32.
  std::vector<zip_record> other_records;
  /// The CRC32C of the file's own description, which a set's index records
  /// of its shards (reader::manifest_crc32c()); 0 where there is none.
  std::uint32_t manifest_crc32c = 0;
  /// How storages are fetched when not as byte ranges of the file; null:
  /// they are.
  std::shared_ptr<const storage_source> source;
};

/// How a format lays its storages out one after another in a data area,
/// for check_tiling().
struct tiling {
  std::uint64_t begin = 0;  ///< the first storage starts here
  std::uint64_t end = 0;    ///< the data area ends here (the file's end, or what follows the data)
  std::uint64_t align = 1;  ///< each storage starts where the one before ends, rounded up to this (a power of two)
  /// Whether `end` must be the last storage's end rounded up to `align`;
  /// else it may be anywhere from the last storage's end to that (a file
  /// whose last padding was left out).
  bool padded_end = true;
  error_code past_end = errc::truncated;         ///< a storage that runs past `end`
  error_code after_last = errc::trailing_bytes;  ///< `end` past the last storage (padded)
  std::string_view area = "data";                ///< the context of errors about the area's end
};

/// Checks that `n` byte ranges, range(i) = {offset, bytes}, in this order,
/// tile the area `t` describes: the first starts at t.begin, each next one
/// where the one before ends rounded up to t.align, and the area ends
/// where the last one does. `who(i)` names range i in errors (the
/// context, whole: a file's name first where the format's errors carry it).
/// Errors: bad_layout (a range that starts elsewhere: it overlaps the one
/// before or leaves a hole after it), t.past_end, t.after_last.
[[nodiscard]] result<void, error> check_tiling(std::size_t n,
                                               const std::function<std::pair<std::uint64_t, std::uint64_t>(std::size_t)>& range,
                                               const std::function<std::string(std::size_t)>& who, const tiling& t);

/// "tensor 'fc.weight'": a tensor named in an error whose file is named
/// before it.
[[nodiscard]] inline std::string tensor_what(std::string_view name) { return "tensor " + quote(name); }

/// "model.bin: tensor 'fc.weight'", the context of every tensor's error.
[[nodiscard]] inline std::string tensor_context(std::string_view file, std::string_view name) {
  return std::string(file) + ": " + tensor_what(name);
}

/// Reads of `f` whose errors carry no context (the parsers' way to read).
[[nodiscard]] zip_read_at file_reader(const mapped_file& f);

/// Reads exactly `out.size()` bytes at `offset`. Errors: io_error, truncated.
result<void> pread_exact(int fd, std::uint64_t offset, std::span<std::byte> out, int& sys_errno) noexcept;

/// An error whose context is `file` (and `: what`).
error file_error(const std::filesystem::path& file, error_code c, int sys_errno = 0, std::string_view what = {});

/// `r`, its error's context put after the file's name: for the decoders
/// whose contexts do not name the file.
result<parsed_file, error> in_file(const std::filesystem::path& path, result<parsed_file, error> r);

/// Opens a checkpoint that is one file of a set (a shard) with the reader's
/// machinery; a file that names other files (an index) is refused
/// (bad_shard), so opening a set never recurses.
result<reader, error> open_shard(const std::filesystem::path& path, const read_options& opt);

}  // namespace ferry::checkpoint::detail
