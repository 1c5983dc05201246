// ferry/checkpoint/set.h: sharded checkpoints. A set is one .ferry shard per
// writer (a rank of a job) and an index, written last, whose atomic
// publication commits the whole set.
//
//   // each rank, in parallel (save_id chosen by rank 0 and broadcast):
//   auto w = shard_writer::create("ckpt/model.ferry", save_id, rank, world).value();
//   for (const auto& p : plan[rank]) w.add_piece(tensors[p.tensor], p.begin, p.count).value();
//   w.add_part("residual", dtype::f32, {world, n}, rank * n, my_row).value();  // per-rank rows
//   std::vector<std::byte> mine = w.commit().value().encode();
//   // rank 0, once it has every rank's record (gathered over the network):
//   commit_set("ckpt/model.ferry", save_id, world, records, metadata).value();
//   // anyone, on any number of ranks:
//   auto ckpt = open("ckpt/model.ferry").value();         // the same reader as a file
//
// open() of an index gives the reader of a single file: tensors() lists the
// set's tensors, get() assembles one from its pieces (zero-copy when one
// piece holds it and orders agree), verify() checks every shard. Shards
// written on hosts of different byte orders mix freely: each records its
// own and is converted on load.
//
// INDEX LAYOUT. An index is a .ferry file (format.h) whose header and
// trailer `flags` byte is 1 (bit 0, "set index"), that holds no storages,
// whose manifest starts right after the header [bad_index] and is a graph
// archive with root `ferry.checkpoint.set`:
//
//   ferry.checkpoint.set
//     1 save_id   string  16 lowercase hex digits naming the save; every
//                         shard's metadata `ferry.set.save_id` MUST equal
//                         it [bad_shard]
//     2 world     u32     ranks of the job that wrote the set, >= 1 [bad_index]
//     3 shards    vector<shard>   1..max_shards [bad_index, limit_exceeded]
//     4 tensors   vector<set_tensor>   in the order they were listed
//     5 metadata  map<string, string>  as a .ferry file's
//   ferry.checkpoint.shard
//     1 file      string  a file name in the index's folder: no '/', not
//                         "." or "..", unique [bad_index]
//     2 size      u64     the shard's length in bytes [bad_shard]
//     3 manifest_crc32c u32  its trailer's manifest_crc32c [bad_shard]
//     4 order     u8      its byte order, 0 little, 1 big [bad_shard]
//     5 rank      u32     the rank that wrote it, < its save's world [bad_index]
//     6 save_id   string  the save that wrote it: 16 lowercase hex digits,
//                         or empty for the index's own (ferry's writer
//                         always fills it) [bad_index]; its metadata
//                         `ferry.set.save_id` MUST equal it [bad_shard]
//     7 world     u32     the world of that save, or 0 for the index's
//   ferry.checkpoint.set_tensor
//     1 name      string  as in a .ferry file; unique [bad_name, duplicate_key]
//     2 dtype     u8      a dtype code (format.h)
//     3 shape     vector<u64>  0..max_dims extents; the set tensor is
//                         row-major (contiguous)
//     4 pieces    vector<piece>  1..max_shards, by ascending `begin`
//   ferry.checkpoint.piece
//     1 shard     u32     index into `shards` [bad_index]
//     2 begin     u64     first element, counted row-major
//     3 count     u64     elements
//
// PIECES. A tensor's pieces MUST tile its elements: begin_0 = 0, begin_k+1
// = begin_k + count_k, the counts sum to numel, and no count is 0 unless
// the tensor has no elements (then it has one piece of count 0)
// [bad_pieces]. Two pieces of one tensor lie in different shards. A piece's
// data is the tensor of the same name in its shard, of the same dtype
// [bad_shard]: when it is the tensor's only piece, a tensor of the set's
// shape (any strides, sharing the shard's storages as the shard says);
// otherwise a contiguous 1-d tensor of `count` elements.
//
// INCREMENTAL SETS. An index MAY name shards of earlier saves (fields 6
// and 7 say which save and world wrote them): their pieces had the same
// values when this save was taken, so they were not written again. Every
// index names every shard file it needs; no index refers to another
// index, so removing an index never breaks another one.
//
// A shard MUST NOT be an index (of a set, or Hugging Face's) [bad_shard]:
// readers never open indexes recursively.
//
// SHARD FILES are named `<stem>-<save_id>-<rank>-of-<world>.ferry` (rank
// and world in 5 digits; stem: the index's file name less `.ferry`), in the
// index's folder, and carry metadata `ferry.set.save_id` and
// `ferry.set.rank`. Each is an ordinary .ferry file: it opens alone.
//
// COMMIT AND CLEANUP. Every shard is committed (written, fsync'ed, renamed)
// before the index; the index's rename is the commit point. A crash at any
// moment leaves the previous index, and the shards it names, untouched.
// After publishing an index, commit_set() removes the index folder's shard
// files of the same stem that no index in the folder names (those of the
// previous save that the new one does not keep, or of saves that never
// committed) and their temporaries no live writer holds. To keep an older
// checkpoint, keep (copy) its index in the folder under a name ending in
// `.ferry`, not starting with '.': its shards stay until no index names
// them. If such a file says it is an index but cannot be read, or the
// folder cannot be read to its end, nothing is removed. All shards of a
// set live in its index's folder: ranks on several hosts need a folder
// they all see (a shared filesystem). One job saves to one index path at
// a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/tensor.h"
#include "ferry/wire/byte_order.h"

namespace ferry::checkpoint {

/// The index's `flags` byte (header offset 10, trailer offset 34).
inline constexpr std::uint8_t set_index_flag = 1;

/// 16 random lowercase hex digits: a new save's id.
[[nodiscard]] std::string new_save_id();

/// `<stem>-<save_id>-<rank>-of-<world>.ferry`, beside `index`.
[[nodiscard]] std::filesystem::path shard_path(const std::filesystem::path& index, std::string_view save_id,
                                               std::uint32_t rank, std::uint32_t world);

/// A piece of tensor `tensor` (an index into the planned list): elements
/// [begin, begin + count), row-major.
struct planned_piece {
  std::size_t tensor = 0;
  std::uint64_t begin = 0;
  std::uint64_t count = 0;
  friend bool operator==(const planned_piece&, const planned_piece&) = default;
};

/// Splits `tensors` (replicated state: every rank has them all) across
/// `shards` writers by bytes: shard k gets the elements whose bytes fall in
/// [k*B/n, (k+1)*B/n) of the tensors laid end to end (B bytes in all).
/// Tensors under `split_bytes` are never split: they go whole to the shard
/// their first byte falls in; empty ones to the shard of their position;
/// whole ones over a storage an earlier whole one views (equal spans: tied
/// weights, views) to that one's shard, adding no bytes. Tensors split
/// are written piece by piece, each view's elements apart.
/// Deterministic: the same list and count give the same plan on every host.
[[nodiscard]] std::vector<std::vector<planned_piece>> plan_shards(std::span<const tensor_ref> tensors,
                                                                  std::uint32_t shards,
                                                                  std::uint64_t split_bytes = std::uint64_t{1} << 20);

/// What an index records of one shard file.
struct shard_info {
  std::string file;  ///< file name, in the index's folder
  std::uint64_t size = 0;
  std::uint32_t manifest_crc32c = 0;
  wire::byte_order order = wire::host_order;
  std::uint32_t rank = 0;
  std::string save_id;      ///< the save that wrote it (an earlier one's, for a kept piece)
  std::uint32_t world = 0;  ///< that save's world
};

/// What an index records of one shard and the pieces it holds: what a rank
/// sends the rank that commits the set. An incremental shard also names
/// the pieces it keeps from earlier saves' shards.
struct shard_record : shard_info {
  struct piece {
    std::string name;
    codec::dtype dtype = codec::dtype::f32;
    std::vector<std::uint64_t> shape;  ///< the whole tensor's
    std::uint64_t begin = 0;
    std::uint64_t count = 0;
    /// CRC32C of the elements in host order, when the writer tracked
    /// changes (shard_writer::base_on); not encoded.
    std::uint32_t crc32c = 0;
  };
  struct kept_piece {
    shard_info shard;  ///< the earlier shard that holds it
    piece p;
  };
  std::vector<piece> pieces;
  std::vector<kept_piece> kept;

  /// As bytes (a graph archive, the index's types), to send to another rank.
  [[nodiscard]] std::vector<std::byte> encode() const;
  /// Errors: the graph archive's, bad_index, limit_exceeded.
  [[nodiscard]] static result<shard_record, error> decode(std::span<const std::byte> bytes, const limits& lim = {});
};

/// One rank's shard of a set. Tensors are added whole (any view, storages
/// shared as writer::add does for equal spans) or as pieces of a tensor.
class shard_writer {
 public:
  /// Starts shard `rank` of `world` of save `save_id` for the set at
  /// `index`. Errors: writer::create's, bad_value (rank >= world, a save id
  /// that is not 16 hex digits).
  [[nodiscard]] static result<shard_writer, error> create(const std::filesystem::path& index, std::string_view save_id,
                                                          std::uint32_t rank, std::uint32_t world,
                                                          const write_options& opt = {});
  shard_writer(shard_writer&&) noexcept;
  shard_writer& operator=(shard_writer&&) noexcept;
  ~shard_writer();

  /// Adds tensor `t` whole. Refs whose storage spans are equal share one
  /// storage. Errors: writer::add's.
  [[nodiscard]] result<void, error> add(const tensor_ref& t);
  /// Adds elements [begin, begin + count) of `t` (row-major, gathered
  /// through its strides when it is not contiguous) as a 1-d tensor. A
  /// piece that is all of `t` is added whole. Errors: writer::add's,
  /// bad_pieces (outside the tensor).
  [[nodiscard]] result<void, error> add_piece(const tensor_ref& t, std::uint64_t begin, std::uint64_t count);
  /// Adds elements [begin, begin + n) of tensor `name` of `shape`, whose
  /// other elements other writers hold: `elements` are those n elements,
  /// row-major, host order (a rank's row of a per-rank table). All of the
  /// tensor is added whole. Errors: writer::add's, bad_pieces (outside
  /// the tensor, or not whole elements).
  [[nodiscard]] result<void, error> add_part(std::string_view name, codec::dtype dtype,
                                             std::span<const std::uint64_t> shape, std::uint64_t begin,
                                             std::span<const std::byte> elements);
  /// Incremental saves. With `previous`, this writer's record of the last
  /// published save (as its commit() returned it): a piece whose name,
  /// dtype, shape, begin and count equal a piece of `previous` (written or
  /// kept there), whose elements have the same CRC32C and, confirmed byte
  /// for byte, the same values as that piece read back from its shard
  /// file, is kept there instead of written. With null: a full save. Either
  /// way, every piece's CRC32C is computed and recorded, for the next
  /// save. Call before adding anything.
  void base_on(const shard_record* previous);
  /// Publishes the shard and says what the index must record of it.
  [[nodiscard]] result<shard_record, error> commit();

  [[nodiscard]] std::uint64_t bytes_written() const noexcept;

 private:
  struct state;
  explicit shard_writer(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> s_;
};

/// Writes the index of save `save_id` at `index` from every shard's record
/// (in any order; each shard's pieces are merged by tensor name), then
/// removes the superseded shards (see COMMIT AND CLEANUP). Checks what the
/// reader checks: pieces tile each tensor, dtypes and shapes agree
/// [bad_pieces, bad_shard]. Errors: those, io_error.
[[nodiscard]] result<void, error> commit_set(const std::filesystem::path& index, std::string_view save_id,
                                             std::uint32_t world, std::span<const shard_record> shards,
                                             const std::map<std::string, std::string>& metadata = {},
                                             const write_options& opt = {});

/// A whole set written by one process: `tensors` planned over `shards`
/// shards (plan_shards), written by up to `shards` threads, then committed.
[[nodiscard]] result<void, error> save_set(const std::filesystem::path& index, std::span<const tensor_ref> tensors,
                                           std::uint32_t shards,
                                           const std::map<std::string, std::string>& metadata = {},
                                           const write_options& opt = {});

}  // namespace ferry::checkpoint
