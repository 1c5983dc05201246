// ferry/checkpoint/reader.h: opening checkpoints, .ferry (format.h),
// .safetensors (safetensors.h), PyTorch .pt (pytorch.h), NumPy .npy and
// .npz (npy.h) or GGUF (gguf.h), lazily.
//
//   auto ckpt = ferry::checkpoint::open("model.ferry").value();
//   for (const auto& t : ckpt.tensors()) std::cout << t.name << '\n';
//   ferry::checkpoint::tensor w = ckpt.get("fc.weight").value();
//   std::span<const std::byte> host_order = w.bytes();   // contiguous tensors
//
// open() reads the file's header, trailer and manifest (a safetensors
// file's JSON header) and checks every structural rule of the format
// before it returns; no tensor data is read. get() maps the tensor's
// storage, checks the storage's CRC32C the first time it is fetched (.pt
// records are not checked on fetch, as torch.load does not), and
// hands out a view in host order: the mapping itself when the file's byte
// order is the host's (zero-copy), a converted private copy otherwise.
// Tensors over one storage share one storage_buffer, so sharing in the file
// is sharing in memory. verify() checks every CRC and the zero padding.
//
// The file is mapped in windows (1 GiB; 64 MiB on 32-bit hosts), each once,
// and a storage is a view of its window: the mappings grow with the file's
// size, not its tensor count, and a file larger than the address space (a
// 32-bit armhf board) opens, and any storage that fits is fetched. What
// cannot be mapped (the process's mapping budget spent, the address space
// full) is read instead (detail/mapped_file.h). Every input is hostile: a malformed file gives an error naming
// the file and, where there is one, the tensor (checkpoint/error.h); the
// limits are in `limits`. If another process truncates the file while it is
// mapped, touching the lost pages raises SIGBUS, as with any mapping.
//
// A reader is safe to use from several threads at once.
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

#include "ferry/base/error.h"
#include "ferry/checkpoint/formats.h"
#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/tensor.h"
#include "ferry/wire/byte_order.h"

namespace ferry::checkpoint {

struct gguf_header;
class reader;
namespace detail {
struct parsed_file;
/// What the reader's format found in its file (detail/parsed.h): for
/// the format folders that define a member of reader (reader::gguf()).
[[nodiscard]] const parsed_file& parsed_of(const reader& r) noexcept;
}  // namespace detail

/// Where a storage lies in the file.
struct storage_info {
  std::uint64_t offset = 0;  ///< absolute file offset
  std::uint64_t nbytes = 0;
  codec::dtype dtype = codec::dtype::u8;  ///< element type (its size is the swap width)
  std::optional<std::uint32_t> crc32c;    ///< .ferry only: safetensors has none
  /// .pt only: the zip record's CRC-32 (zlib's polynomial), checked by
  /// verify(); none when the writer stored 0 (torch.save with
  /// compute_crc32=False), and then unchecked. .npz: none here (the
  /// record's CRC-32 covers its .npy header too); verify() checks it.
  std::optional<std::uint32_t> crc32;
  /// This storage's own byte order where a file's storages differ (.npz
  /// records may); empty: reader::order().
  std::optional<wire::byte_order> order;
};

class reader {
 public:
  /// Opens `path`, of any of the seven formats or a set's index (.ferry
  /// set or Hugging Face sharded safetensors), told apart by their first
  /// bytes; a zip is taken for a .pt file when it
  /// holds a `P/data.pkl` record, for an .npz when every record is a .npy). An index opens every shard it names and
  /// checks each against it (bad_shard, bad_pieces, bad_index). Errors: io_error (with the OS's reason), not_a_checkpoint (a
  /// zip of something else, an HTML page, a Git LFS pointer, ...), and
  /// every structural error of the formats.
  [[nodiscard]] static result<reader, error> open(const std::filesystem::path& path, const read_options& opt);
  [[nodiscard]] static result<reader, error> open(const std::filesystem::path& path, const limits& lim = {});

  reader(reader&&) noexcept;
  reader& operator=(reader&&) noexcept;
  ~reader();

  [[nodiscard]] const std::filesystem::path& path() const noexcept;
  [[nodiscard]] file_format format() const noexcept;
  /// The order the storages are stored in (little for safetensors; for .pt
  /// the `byteorder` record, else read_options::pytorch_order; for a set,
  /// its first shard's: shards() tells each; for .npy its descr's, for .npz
  /// its first record's: storage_info::order tells each; for GGUF the order
  /// detected from its version field, or read_options::gguf_order).
  [[nodiscard]] wire::byte_order order() const noexcept;
  /// The file's storage alignment (for safetensors, the largest power of two
  /// up to 4096 that divides the data area's offset; for GGUF its
  /// general.alignment, or 32).
  [[nodiscard]] std::uint32_t alignment() const noexcept;
  /// Bytes of the file (a set: of the index and every shard).
  [[nodiscard]] std::uint64_t file_size() const noexcept;
  /// A .ferry file's manifest_crc32c (its trailer's), what a set's index
  /// records of a shard; 0 for other formats.
  [[nodiscard]] std::uint32_t manifest_crc32c() const noexcept;
  /// A set's shards, as the index lists them; empty for a single file.
  [[nodiscard]] std::span<const reader> shards() const noexcept;

  /// Tensors in file order (.ferry: as written; safetensors: as listed; a
  /// set: as its index lists them, each row-major unless it is one piece,
  /// which keeps its shard's view).
  [[nodiscard]] std::span<const tensor_info> tensors() const noexcept;
  /// A set's storages are its shards' for tensors in one piece (shared as
  /// there) and one per tensor in several pieces; their offset is 0 (they
  /// lie in the shards) and they carry no CRC (the shards' pieces do).
  [[nodiscard]] std::span<const storage_info> storages() const noexcept;
  /// The tensor called `name`, or nullptr.
  [[nodiscard]] const tensor_info* find(std::string_view name) const noexcept;
  /// The tensors over storage `storage` (indices into tensors(), in file
  /// order). Requires: storage < storages().size().
  [[nodiscard]] std::span<const std::uint32_t> tensors_over(std::uint32_t storage) const noexcept;
  /// Names of the other tensors over `t`'s storage (as many as there are:
  /// tensors_over() tells how many without copying them).
  [[nodiscard]] std::vector<std::string> shared_with(const tensor_info& t) const;
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const noexcept;
  /// A GGUF file's header (gguf.h): typed metadata, and each tensor's
  /// ggml type and extents (tensor i is tensors()[i]); nullptr for other
  /// formats.
  [[nodiscard]] const gguf_header* gguf() const noexcept;

  /// The tensor called `name`, in host order. Errors: tensor_not_found,
  /// checksum_mismatch (its storage's CRC, checked on first fetch),
  /// storage_too_large (does not fit the address space), out_of_memory
  /// (a copy the machine cannot allocate), io_error.
  [[nodiscard]] result<tensor, error> get(std::string_view name) const;
  [[nodiscard]] result<tensor, error> get(const tensor_info& t) const;

  /// Reads contiguous tensor `t`'s elements, in host order, into `out`
  /// (exactly t.nbytes()): into memory the caller already has (a model's
  /// parameters), with no mapping. A tensor that is its whole storage is
  /// read with pread() and its CRC checked on the way (a set's tensor: each
  /// piece's); others are copied from get(). Errors: get()'s, bad_value
  /// (not contiguous, or `out` of another size).
  [[nodiscard]] result<void, error> read_into(const tensor_info& t, std::span<std::byte> out) const;

  /// Every tensor, in file order, as get() gives them, with the storages
  /// loaded (and their CRCs checked) by `threads` threads in all (0: one
  /// per core): several storages at once, and a large storage in another
  /// byte order converted by the threads left over. The error names the
  /// first bad storage's first tensor.
  [[nodiscard]] result<std::vector<tensor>, error> get_all(unsigned threads = 0) const;

  /// Checks every storage's CRC32C and the zero padding between storages
  /// (.ferry; a set: of every shard), or every zip record's CRC-32 (.pt;
  /// crc32_mismatch), reading the whole file once. The error names the first bad tensor (or
  /// record). `progress`, if given, is called with the bytes checked so
  /// far.
  [[nodiscard]] result<void, error> verify(const std::function<void(std::uint64_t)>& progress = {}) const;

  /// Bytes of storage mapped or copied so far (what lazy loading costs).
  [[nodiscard]] std::uint64_t bytes_loaded() const noexcept;

  struct state;

 private:
  explicit reader(std::unique_ptr<state> s) noexcept;
  friend const detail::parsed_file& detail::parsed_of(const reader& r) noexcept;
  std::unique_ptr<state> s_;
};

/// reader::open.
[[nodiscard]] inline result<reader, error> open(const std::filesystem::path& path, const read_options& opt) {
  return reader::open(path, opt);
}
[[nodiscard]] inline result<reader, error> open(const std::filesystem::path& path, const limits& lim = {}) {
  return reader::open(path, lim);
}

}  // namespace ferry::checkpoint
