// ferry/checkpoint/set/internal.h: INTERNAL. The index's records (set.h
// documents them), the rules the writer and the reader share, and what a
// reader of a set holds. Not part of the API.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/ferry/internal.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/set.h"

namespace ferry::checkpoint::detail {

struct piece_record {
  static constexpr std::string_view ferry_name = "ferry.checkpoint.piece";
  std::uint32_t shard = 0;
  std::uint64_t begin = 0;
  std::uint64_t count = 0;
  template <class F>
  void describe(F& f) {
    f(1, "shard", shard);
    f(2, "begin", begin);
    f(3, "count", count);
  }
};

struct set_tensor_record {
  static constexpr std::string_view ferry_name = "ferry.checkpoint.set_tensor";
  std::string name;
  std::uint8_t dtype = 0;
  std::vector<std::uint64_t> shape;
  std::vector<piece_record> pieces;
  /// Not in the format: the dtype and shape are the shard's (a Hugging
  /// Face index names only the file).
  bool shape_from_shard = false;
  template <class F>
  void describe(F& f) {
    f(1, "name", name);
    f(2, "dtype", dtype);
    f(3, "shape", shape);
    f(4, "pieces", pieces);
  }
};

struct shard_entry {
  static constexpr std::string_view ferry_name = "ferry.checkpoint.shard";
  std::string file;
  std::uint64_t size = 0;
  std::uint32_t manifest_crc32c = 0;
  std::uint8_t order = 0;
  std::uint32_t rank = 0;
  std::string save_id;      // empty: the index's
  std::uint32_t world = 0;  // 0: the index's
  template <class F>
  void describe(F& f) {
    f(1, "file", file);
    f(2, "size", size);
    f(3, "manifest_crc32c", manifest_crc32c);
    f(4, "order", order);
    f(5, "rank", rank);
    f(6, "save_id", save_id);
    f(7, "world", world);
  }
};

struct set_manifest {
  static constexpr std::string_view ferry_name = "ferry.checkpoint.set";
  std::string save_id;
  std::uint32_t world = 0;
  std::vector<shard_entry> shards;
  std::vector<set_tensor_record> tensors;
  std::map<std::string, std::string> metadata;
  template <class F>
  void describe(F& f) {
    f(1, "save_id", save_id);
    f(2, "world", world);
    f(3, "shards", shards);
    f(4, "tensors", tensors);
    f(5, "metadata", metadata);
  }
};

/// The shard files the set index at `path` names, read without opening
/// them; an error when `path` is not a readable index.
result<std::vector<std::string>, error> set_files(const std::filesystem::path& path, const limits& lim);

/// The graph options an index (and a shard_record) is read and written with.
graph::options set_options(const limits& lim, wire::byte_order order) noexcept;

/// Whether `f` can name a shard: a file name in the index's folder (no
/// '/', not "." or "..", valid UTF-8, at most max_bytes).
[[nodiscard]] bool valid_shard_file(std::string_view f, std::size_t max_bytes) noexcept;

/// The folder of `p` ("." for a bare file name): where its shards live.
[[nodiscard]] std::filesystem::path folder_of(const std::filesystem::path& p);

/// Whether `id` is 16 lowercase hex digits.
[[nodiscard]] bool valid_save_id(std::string_view id) noexcept;

/// Checks what needs no shard: save id, world, shard entries (names,
/// orders, ranks), tensor names, dtypes, shapes and that each tensor's
/// pieces tile it. Errors name `where` (the index's path) and the tensor or
/// shard: bad_index, bad_pieces, bad_name, duplicate_key, limit_exceeded,
/// shape_overflow, unknown_dtype.
result<void, error> check_set(const set_manifest& m, const limits& lim, const std::string& where);

/// The storage_source of a set (a .ferry set or a Hugging Face index): the
/// reader serves tensors() and friends from the parsed index and asks this
/// for storages, which lie in the shards.
struct shard_set final : storage_source {
  struct piece {
    std::uint32_t shard = 0;
    std::uint32_t tensor = 0;  ///< index into the shard's tensors()
    std::uint64_t at = 0;      ///< byte offset in the set's storage
  };
  std::vector<reader> readers;  ///< the shards, as the index lists them
  /// Per storage of the set: one piece that is a whole shard storage, or
  /// the pieces to copy into place.
  std::vector<std::vector<piece>> sources;
  std::vector<bool> whole;
  std::uint64_t total_bytes = 0;  ///< the index's and every shard's

  /// Storage i in host order. Errors name the shard and the tensor.
  [[nodiscard]] result<std::shared_ptr<const storage_buffer>, error> load(const parsed_file& f,
                                                                          const load_request& r) const override;
  /// Contiguous tensor t of the set into `out` (reader::read_into): its
  /// shard's tensor, or each piece, read by the shard's read_into().
  [[nodiscard]] std::optional<result<void, error>> read_into(const tensor_info& t,
                                                             std::span<std::byte> out) const override;
  /// Every shard's verify(), progress counted over them all.
  [[nodiscard]] std::optional<result<void, error>> verify(
      const parsed_file& f, const mapped_file* file, const std::filesystem::path& path,
      const std::function<void(std::uint64_t)>& progress) const override;
  [[nodiscard]] std::span<const reader> shards() const noexcept override { return readers; }
  [[nodiscard]] std::optional<std::uint64_t> total_size() const noexcept override { return total_bytes; }

  /// The pieces of storage i (a tensor in several) into `out`.
  [[nodiscard]] result<void, error> read_pieces(std::uint32_t i, std::span<std::byte> out) const;
};

/// Checks shard k once it is open; the error's context is what is wrong
/// (the caller names the index and the shard).
using shard_check = std::function<result<void, error>(std::size_t k, const reader& shard)>;

/// Opens `files` (in `path`'s folder) with open_shard(), checks each, and lays `tensors` out
/// over them in `out` (tensors, storages, order, alignment). Errors name
/// `path`, the shard and the tensor: bad_shard, and the shards' own.
result<std::unique_ptr<shard_set>, error> build_set(const std::filesystem::path& path, std::span<const std::string> files,
                                                    std::vector<set_tensor_record> tensors, const read_options& opt,
                                                    const shard_check& check, parsed_file& out);

/// Opens the set whose index is `path` (its container read): checks the
/// index, opens and checks every shard. Fills `out` as the reader serves it.
result<std::unique_ptr<shard_set>, error> open_set(const std::filesystem::path& path, ferry_container container,
                                                   const read_options& opt, parsed_file& out);

/// Opens a Hugging Face sharded safetensors index, `json` its content
/// (safetensors/index.cpp).
result<std::unique_ptr<shard_set>, error> open_hf_set(const std::filesystem::path& path, std::string_view json,
                                                      const read_options& opt, parsed_file& out);

}  // namespace ferry::checkpoint::detail
