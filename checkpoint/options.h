// ferry/checkpoint/options.h: the limits of checkpoint readers and the
// settings of writers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "ferry/wire/byte_order.h"

namespace ferry::checkpoint {

/// What a reader accepts. A file over a limit is refused with
/// errc::limit_exceeded (header_too_large for a safetensors header). The
/// manifest and the header are read whole, once their size is checked, and
/// what they announce costs memory in proportion to their size (the graph
/// reader's allocation budget), never more. Writers enforce the same
/// limits, so a file written with some limits opens with the same limits.
struct limits {
  /// Tensors in one file (and storages, which are never more). Each costs
  /// a record and a name in memory, so a small manifest cannot announce
  /// millions of them.
  std::size_t max_tensors = std::size_t{1} << 20;
  /// Dimensions of one tensor. PyTorch allows 64; hostile shapes with
  /// millions of extents are refused.
  std::size_t max_dims = 64;
  /// Bytes of a tensor name or a metadata key.
  std::size_t max_name_bytes = 4096;
  /// Bytes of a .ferry manifest: it is read into memory whole.
  std::uint64_t max_manifest_bytes = std::uint64_t{1} << 28;
  /// Bytes of a safetensors JSON header. The reference implementation
  /// refuses headers over 100,000,000 bytes; so does ferry by default.
  std::uint64_t max_header_bytes = 100'000'000;

  // PyTorch .pt files (pytorch.h): the zip's central directory and the
  // pickle are read whole and interpreted; these bound what that costs.

  /// Bytes of the `data.pkl` record. Pickles of real state dicts are a few
  /// hundred bytes per tensor; 256 MiB leaves room for a million tensors.
  std::uint64_t max_pickle_bytes = std::uint64_t{1} << 28;
  /// Nesting of the pickle's containers (and MARKs), and of the structure
  /// that is flattened into names: deeper input would exhaust the stack.
  std::size_t max_pickle_depth = 1000;
  /// Memo slots a pickle may fill (BINPUT, MEMOIZE). The memo is sparse,
  /// so a large slot number costs no more than a small one.
  std::size_t max_pickle_memo = std::size_t{1} << 20;
  /// Bytes the pickle's values may take in memory (pytorch/pickle.h counts
  /// them: 128 per value on 64-bit hosts, 112 on 32-bit ones, a pointer
  /// per item of a container, each stack and memo slot). A one-byte
  /// opcode can make a value, so without this bound a pickle within
  /// max_pickle_bytes could need 100 times its size. torch.save's state
  /// dicts take 1.8 to 2 KiB per tensor (2000 2-D tensors: 1.8 KiB; Linear
  /// and BatchNorm layers: 2 KiB; pytorch_live_test checks it), about 15
  /// times their pickle's bytes: the default holds about 260,000 tensors;
  /// raise it (with max_tensors) for more.
  std::uint64_t max_pickle_memory = std::uint64_t{512} << 20;
  /// Records in a .pt file's zip (one per storage, and a few more).
  std::size_t max_zip_entries = std::size_t{1} << 20;
  /// Bytes of metadata made from a .pt file's non-tensor values (JSON
  /// text, keys included). Shared references in a pickle can make a few
  /// bytes describe a structure billions of nodes large when written out;
  /// flattening stops at this limit.
  std::uint64_t max_metadata_bytes = std::uint64_t{1} << 26;

  /// Shards of a checkpoint set (set.h), and pieces of one tensor. Each
  /// shard opened costs a file descriptor: the process's limit may be lower.
  std::size_t max_shards = std::size_t{1} << 16;

  /// Bytes of a .npy header's text (npy.h), in a .npy file or in each
  /// record of an .npz. NumPy's own loader refuses headers over 10,000
  /// characters unless told to trust the file; so does ferry. numpy.save
  /// writes at most 118 + 23 per extent for the dtypes ferry reads.
  std::uint64_t max_npy_header_bytes = 10'000;

  // GGUF (gguf.h): everything before the tensor data is read into memory
  // and its values kept; these bound what that costs.

  /// Bytes of a GGUF file's header (magic to the last tensor info): it is
  /// read into memory whole, growing from 1 MiB as far as the parse needs.
  /// The largest real headers are tokenizer-heavy models, a few MiB for a
  /// 150k-token vocabulary with its merges (an estimate: 16 bytes or so a
  /// token). What the parsed values cost in memory is at most about six
  /// times the header's bytes (a 14-byte key/value pair becomes a 72-byte
  /// gguf_kv; a string element, 8 bytes at least, a 32-byte std::string;
  /// a tensor info, 25 bytes at least, a gguf_tensor and the reader's
  /// tensor_info): 64 MiB of hostile header costs under 400 MiB.
  std::uint64_t max_gguf_header_bytes = std::uint64_t{64} << 20;
  /// Nesting of GGUF metadata arrays (an array of arrays is depth 2).
  /// ggml itself reads no nested array; gguf-py writes and reads them.
  /// Each level costs a stack frame of the parser.
  std::size_t max_gguf_depth = 16;
};

/// Which checksums reader::get() checks the first time it fetches a
/// storage (verify() always checks every one).
enum class fetch_checks : std::uint8_t {
  /// The format's own rule: a .ferry storage's CRC32C; a .pt record's zip
  /// CRC-32 is not checked, as torch.load checks none.
  standard,
  /// Every checksum the file holds: a .pt record's CRC-32 too (and
  /// data.pkl's when the file is opened). What a conversion needs that
  /// writes fresh checksums over the bytes: ferry convert.
  every_checksum,
  /// None: bytes are taken as they are (ferry convert
  /// --skip-source-checksums).
  none,
};

/// How checkpoint::open() reads a file.
struct read_options {
  checkpoint::limits lim;
  /// The byte order of a .pt file's storages when it has no `byteorder`
  /// record (files written before PyTorch 2.1 have none, and hold the
  /// writer's native order). The record, when present, wins. Unset: little,
  /// as PyTorch >= 2.1 assumes.
  std::optional<wire::byte_order> pytorch_order;
  /// The order of a .npy array whose descr says '=' or '|' for elements
  /// wider than a byte (the writer's native order, which the file does not
  /// record; numpy.save never writes it, other writers may). Unset: such a
  /// file is refused with bad_byte_order (npy.h).
  std::optional<wire::byte_order> npy_native_order;
  /// The byte order of a GGUF file (gguf.h). Unset: detected as llama.cpp
  /// and gguf-py detect it, from the version field (and gguf-py's "FUGG"
  /// magic); set, the file is read in this order whatever it looks like,
  /// for a file whose version field cannot tell.
  std::optional<wire::byte_order> gguf_order;
  /// Storages are handed out writable (storage_buffer::mutable_bytes()):
  /// views of private copy-on-write windows of the file (as
  /// torch.load(mmap=True) maps a file privately), or private copies. Writes
  /// never reach the file; they are seen by every tensor over the storage
  /// that this reader handed out, and the reader keeps every storage it
  /// has handed out until it is closed, so fetching a tensor again gives
  /// the same storage, writes and all. For frameworks whose tensors are
  /// writable (torch).
  bool copy_on_write = false;
  /// The checksums a storage's first fetch checks.
  fetch_checks checks = fetch_checks::standard;
};

/// How a writer lays the file out.
struct write_options {
  /// Byte order of the storages (and the manifest). The default, the
  /// host's, means the writer never swaps; readers convert when theirs
  /// differs.
  wire::byte_order order = wire::host_order;
  /// Boundary every storage starts on: a power of two from 64 to 2^30.
  /// 64 suits SIMD loads; 4096 lets a reader map each storage by pages.
  std::uint32_t alignment = 64;
  /// fsync the file and its folder on commit. Off only for throwaway files
  /// (tests, benchmarks of the format without the disk).
  bool sync = true;
  /// With sync: write behind, around the page cache (base::atomic_file's
  /// `direct`): writeback starts every 8 MiB and written pages leave the
  /// cache, so saving GBs leaves no writeback for the fsync and evicts
  /// nothing else; a file read right after is read from the disk. Off:
  /// through the page cache.
  bool direct = true;
  /// Limits checked while writing (the reader's defaults).
  checkpoint::limits limits;
};

}  // namespace ferry::checkpoint
