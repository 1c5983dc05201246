// The sample checkpoint of the checkpoint tests (golden files, bit flips,
// cross-architecture runs): the same tensors on every architecture.
// Free of GoogleTest, so the per-architecture checkpoint_node uses it too.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ferry/checkpoint/tensor.h"

namespace ferry::checkpoint::testing {

/// Host-order bytes of `values`.
template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

/// The sample checkpoint's tensors: a 2x3 f32 weight with a NaN payload, a
/// -0 and a subnormal; its tied twin; a strided view (the weight's first
/// column) over the same storage; a 0-d i64; an empty f16; bf16 and u8
/// tensors. Storages live as long as the object.
struct sample {
  std::vector<std::byte> weight = bytes_of(std::vector<std::uint32_t>{
      0x3885005Au, 0x80000000u, 0x00000001u, 0x7FC01234u, 0xFF800000u, 0x3F800000u});
  std::vector<std::byte> step = bytes_of(std::vector<std::int64_t>{-42});
  std::vector<std::byte> none;
  std::vector<std::byte> half = bytes_of(std::vector<std::uint16_t>{0x3C00, 0x8001, 0x7E01, 0xFC00});
  std::vector<std::byte> small = bytes_of(std::vector<std::uint8_t>{1, 2, 3, 250, 255});
  std::uint64_t shape_2x3[2] = {2, 3};
  std::uint64_t shape_col[1] = {2};
  std::uint64_t stride_col[1] = {3};
  std::uint64_t shape_empty[2] = {0, 4};
  std::uint64_t shape_4[1] = {4};
  std::uint64_t shape_5[1] = {5};

  [[nodiscard]] std::vector<tensor_ref> refs() const {
    return {
        {"encoder.embed.weight", codec::dtype::f32, shape_2x3, {}, 0, weight},
        {"decoder.out.weight", codec::dtype::f32, shape_2x3, {}, 0, weight},
        {"encoder.embed.column1", codec::dtype::f32, shape_col, stride_col, 1, weight},
        {"step", codec::dtype::i64, {}, {}, 0, step},
        {"empty", codec::dtype::f16, shape_empty, {}, 0, none},
        {"half", codec::dtype::bf16, shape_4, {}, 0, half},
        {"bytes", codec::dtype::u8, shape_5, {}, 0, small},
    };
  }
  [[nodiscard]] static std::map<std::string, std::string> metadata() {
    return {{"format", "pt"}, {"epoch", "3"}, {"note", "caf\xC3\xA9"}};
  }
};

}  // namespace ferry::checkpoint::testing
