// Telling checkpoint files apart by their first bytes (detail/detect.h).
#include "ferry/checkpoint/detail/detect.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/format.h"
#include "ferry/checkpoint/set.h"
#include "ferry/wire/cursor.h"

namespace ferry::checkpoint::detail {

std::string_view head_format_name(head_format f) noexcept {
  switch (f) {
    case head_format::ferry_file: return "ferry";
    case head_format::ferry_set_index: return "ferry-set";
    case head_format::pytorch_zip: return "pytorch";
    case head_format::pytorch_legacy: return "pytorch-legacy";
    case head_format::npy: return "npy";
    case head_format::gguf: return "gguf";
    case head_format::safetensors: return "safetensors";
    case head_format::safetensors_index: return "safetensors-index";
    case head_format::truncated: return "truncated";
    case head_format::unknown: return "unknown";
  }
  return "unknown";
}

head_format detect_format(std::span<const std::byte> head, std::uint64_t file_size) noexcept {
  assert(head.size() <= file_size);
  const std::size_t have = head.size();
  const auto is = [&](std::size_t at, char c) { return have > at && head[at] == static_cast<std::byte>(c); };

  if (have > 0 && std::memcmp(head.data(), file_magic, std::min(have, sizeof file_magic)) == 0) {
    if (have < header_size) return head_format::truncated;
    return head[10] == std::byte{set_index_flag} ? head_format::ferry_set_index : head_format::ferry_file;
  }
  if (have >= 4 && std::memcmp(head.data(), "PK\x03\x04", 4) == 0) return head_format::pytorch_zip;
  // A zip of no records is its end record alone (np.savez with no arrays
  // writes one): read as an .npz holding no tensors.
  if (file_size >= 22 && have >= 4 && std::memcmp(head.data(), "PK\x05\x06", 4) == 0) return head_format::pytorch_zip;
  if (legacy_pytorch(head)) return head_format::pytorch_legacy;
  if (have >= 6 && std::memcmp(head.data(), "\x93NUMPY", 6) == 0) return head_format::npy;
  if (have >= 4 && (std::memcmp(head.data(), "GGUF", 4) == 0 || std::memcmp(head.data(), "FUGG", 4) == 0)) {
    return head_format::gguf;
  }
  // have > 8, so file_size - 8 does not wrap.
  if (is(8, '{') && !(is(0, '{') && *wire::reader(head).read_le<std::uint64_t>() > file_size - 8)) {
    return head_format::safetensors;
  }
  const auto first = std::find_if(head.begin(), head.end(), [](std::byte b) {
    return b != std::byte{' '} && b != std::byte{'\n'} && b != std::byte{'\r'} && b != std::byte{'\t'};
  });
  if (first != head.end() && *first == std::byte{'{'}) return head_format::safetensors_index;
  if (have < 9) return head_format::truncated;
  return head_format::unknown;
}

}  // namespace ferry::checkpoint::detail
