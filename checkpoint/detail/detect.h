// ferry/checkpoint/detail/detect.h: INTERNAL. Which kind of file a
// checkpoint is, told from its first bytes (and its size) alone, before any
// decoder runs. Not part of the API.
//
// The rules, in the order they are tried (the first that holds wins):
//
//   ferry_file / ferry_set_index
//                   the head starts with format.h's file_magic (or is a
//                   prefix of it); a set's index has set_index_flag at
//                   byte 10. Fewer than header_size bytes: truncated.
//   pytorch_zip     "PK\x03\x04": a zip, taken for a .pt file or an .npz (told
//                   apart by the reader from its records: every record a .npy
//                   is an .npz; a TorchScript archive or a zip of something
//                   else is told apart later, by parse_pytorch); or
//                   "PK\x05\x06" in a file of 22 bytes or more, a zip of no
//                   records (read as an empty .npz).
//   pytorch_legacy  a pickle of torch.save's magic number (legacy_pytorch()).
//   npy             "\x93NUMPY": a NumPy .npy file (npy.h).
//   gguf            "GGUF" (or gguf-py's old big-endian "FUGG"): a GGUF file
//                   (gguf.h).
//   safetensors     '{' at byte 8, the first 8 bytes a little-endian header
//                   length; unless byte 0 is '{' too and that length does
//                   not fit the file (then it is JSON: an index).
//   safetensors_index
//                   the first byte that is not JSON whitespace is '{': a
//                   Hugging Face `model.safetensors.index.json`.
//   truncated       fewer than 9 bytes and none of the above.
//   unknown         none of the above (not_a_checkpoint).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace ferry::checkpoint::detail {

enum class head_format : std::uint8_t {
  ferry_file,         ///< a .ferry file (format.h)
  ferry_set_index,    ///< a .ferry set's index (set.h)
  pytorch_zip,        ///< a zip: a torch.save file since PyTorch 1.6 (pytorch.h)
  pytorch_legacy,     ///< a torch.save file from before PyTorch 1.6 (refused)
  npy,                ///< a NumPy .npy file (npy.h)
  gguf,               ///< a GGUF file (gguf.h)
  safetensors,        ///< a .safetensors file (safetensors.h)
  safetensors_index,  ///< a Hugging Face sharded safetensors index (JSON)
  truncated,          ///< too short to be any of them
  unknown,            ///< not a checkpoint
};

/// "ferry", "ferry-set", "pytorch", "pytorch-legacy", "npy", "gguf", "safetensors",
/// "safetensors-index", "truncated" or "unknown" (for tests and messages).
[[nodiscard]] std::string_view head_format_name(head_format f) noexcept;

/// Whether `f` is a set's index (it names other files, its shards).
[[nodiscard]] constexpr bool is_set_index(head_format f) noexcept {
  return f == head_format::ferry_set_index || f == head_format::safetensors_index;
}

/// The kind of a file of `file_size` bytes whose first bytes are `head`.
/// Requires: head.size() == min(file_size, header_size) (format.h): the
/// whole file when it is shorter than a .ferry header. Pure: reads nothing
/// but `head`.
[[nodiscard]] head_format detect_format(std::span<const std::byte> head, std::uint64_t file_size) noexcept;

}  // namespace ferry::checkpoint::detail
