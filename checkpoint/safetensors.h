// ferry/checkpoint/safetensors.h: the safetensors format, read by
// checkpoint::open() (reader.h) and written by save_safetensors().
//
// FILE LAYOUT (as huggingface/safetensors specifies it; ferry's grammar
// below is stated here, not inherited from a JSON library)
//
//   0   N        u64 little-endian: bytes of the header
//                  N <= limits::max_header_bytes (100,000,000 by default,
//                  as the reference) [header_too_large]; 8 + N <= file size
//                  [truncated]
//   8   header   N bytes of UTF-8 [bad_utf8] JSON [bad_json], starting with
//                '{' (otherwise the file is not taken for safetensors:
//                [not_a_checkpoint]) and MAY end in spaces (or other JSON
//                white space) after the closing '}'.
//   8+N data     the tensors' bytes, little-endian, row-major
//
// HEADER GRAMMAR. The header is one JSON object. No key appears twice in any
// object [duplicate_key]. Each member is either
//   "__metadata__": an object whose values are all strings [bad_metadata]
//   or a tensor, keyed by its name (1..max_name_bytes bytes [bad_name]):
//     {"dtype": D, "shape": [u64, ...], "data_offsets": [BEGIN, END]}
//     with exactly these three members [bad_json]; D one of BOOL U8 I8
//     U16 I16 U32 I32 U64 I64 F16 BF16 F32 F64 F8_E4M3 F8_E5M2 [unknown_dtype];
//     extents and offsets non-negative integers below 2^64 [bad_json]; at
//     most max_dims extents [limit_exceeded]; BEGIN <= END.
// Tensors, sorted by (BEGIN, END), MUST cover the data exactly: the first
// begins at 0, each begins where the previous ends [bad_layout], the last
// ends at the end of the file [truncated if beyond it, trailing_bytes if
// short of it]. END - BEGIN MUST equal the product of the shape times the
// dtype's size [shape_size_mismatch], computed without overflow
// [shape_overflow]. At most max_tensors tensors [limit_exceeded].
//
// SHARED TENSORS. safetensors cannot say that two tensors share memory.
// Hugging Face's save_model writes one of them and records each removed
// name in __metadata__ as "removed": "kept". ferry reads that convention
// back: a metadata entry whose key is not a tensor and whose value is one
// becomes a tensor sharing the kept one's storage (and leaves metadata()).
//
// SHARDED FILES (Hugging Face's convention). A model too large for one file
// is saved as shards `<stem>-00001-of-0000N.safetensors` and an index,
// `<stem>.safetensors.index.json`:
//   {"metadata": {"total_size": BYTES, ...},
//    "weight_map": {"tensor name": "<shard file name>", ...}}
// checkpoint::open() of the index reads the set through one reader
// (file_format::safetensors_sharded): tensors in weight_map order, each
// whole in its shard. Index grammar: one JSON object [bad_json] of at most
// max_header_bytes [limit_exceeded], no key twice [duplicate_key];
// "weight_map" (required) an object of file names (no '/', not "." or
// "..") [bad_index], at most max_tensors entries and max_shards files
// [limit_exceeded]; "metadata" an object whose scalar values are kept as
// text (nested ones skipped); other members ignored. A listed tensor
// missing from its shard, or a shard that is not safetensors: [bad_shard].
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/tensor.h"

namespace ferry::checkpoint {

struct safetensors_options {
  /// What to do with tensors that share a storage.
  enum class shared_policy : std::uint8_t {
    refuse,  ///< shared_storage error naming the tied tensors (default)
    copy,    ///< write each tensor's own bytes; the sharing is lost
    alias,   ///< write the storage once, list the others in __metadata__
             ///< ("removed": "kept"); views that differ are refused
  };
  shared_policy shared = shared_policy::refuse;
  /// The policy named "refuse", "copy" or "alias"; nullopt for other text.
  [[nodiscard]] static std::optional<shared_policy> policy_from_name(std::string_view name) noexcept;
  /// The data starts at a multiple of this (the header is padded with
  /// spaces). 64 keeps SIMD loads aligned; the reference needs 8.
  std::uint32_t alignment = 64;
  /// fsync on commit (see write_options::sync).
  bool sync = true;
  /// Around the page cache (see write_options::direct).
  bool direct = true;
  checkpoint::limits limits;
};

/// Writes `tensors` as a safetensors file, atomically (base::atomic_file).
/// Non-contiguous views are written contiguous; data is little-endian on
/// every host. Errors: shared_storage, bad_name, duplicate_key, bad_metadata,
/// unknown_dtype (none: every codec dtype has a safetensors name), io_error.
[[nodiscard]] result<void, error> save_safetensors(const std::filesystem::path& target,
                                                   std::span<const tensor_ref> tensors,
                                                   const std::map<std::string, std::string>& metadata = {},
                                                   const safetensors_options& opt = {});

/// Writes `tensors` as Hugging Face sharded safetensors: the index at
/// `index` (`<stem>.safetensors.index.json`) and shards beside it of at
/// most `max_shard_bytes` of tensor data each (a larger tensor alone), in
/// tensor order, tensors over one storage together. Each shard's
/// __metadata__ is {"format": "pt"}, as transformers requires; `metadata`
/// goes to the index's. Every shard is written before any replaces its
/// name, then the index; shards of the stem it no longer names are
/// removed. The format names shards by count, not by save: a crash among
/// the renames can leave the previous index over some new shards (a .ferry
/// set, set.h, cannot). Returns the shards' paths. Errors: save_safetensors's.
[[nodiscard]] result<std::vector<std::filesystem::path>, error> save_safetensors_sharded(
    const std::filesystem::path& index, std::span<const tensor_ref> tensors, std::uint64_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata = {}, const safetensors_options& opt = {});

/// The safetensors name of a dtype ("F32") and back.
[[nodiscard]] std::string_view safetensors_dtype_name(codec::dtype t) noexcept;
[[nodiscard]] result<codec::dtype> safetensors_dtype(std::string_view name) noexcept;

}  // namespace ferry::checkpoint
