// ferry/checkpoint/formats.h: the formats the reader opens, by name. The
// public half of the format table (formats.cpp); each format lives in its
// own folder under checkpoint/ (docs/tour.md, "Adding a format").
#pragma once

#include <cstdint>
#include <string_view>

namespace ferry::checkpoint {

/// ferry: a .ferry file (format.h); ferry_set: the index of a sharded
/// checkpoint (set.h); safetensors and safetensors_sharded: a .safetensors
/// file and a Hugging Face `model.safetensors.index.json` (safetensors.h);
/// pytorch: a torch.save zip (pytorch.h); npy, npz: NumPy's (npy.h); gguf:
/// llama.cpp's (gguf.h).
enum class file_format : std::uint8_t { ferry, safetensors, pytorch, ferry_set, safetensors_sharded, npy, npz, gguf };

/// "ferry", "safetensors", "pytorch", "ferry-set", "safetensors-sharded",
/// "npy", "npz" or "gguf": the table's name of `f`.
[[nodiscard]] std::string_view format_name(file_format f) noexcept;

}  // namespace ferry::checkpoint
