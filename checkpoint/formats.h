// ferry/checkpoint/formats.h: the formats the reader opens, by name. The
// public half of the format table (formats.cpp); each format lives in its
// own folder under checkpoint/ (docs/tour.md, "Adding a format").
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ferry/base/error.h"
#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/tensor.h"
#include "ferry/wire/byte_order.h"

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

/// How save_as() writes, whatever the format: each format's writer takes what
/// applies to it and refuses what cannot (bad_value, saying why).
struct save_options {
  /// Byte order of the data; empty: the host's (little-endian formats:
  /// little, and asking them for big is refused).
  std::optional<wire::byte_order> order;
  std::uint32_t alignment = 0;  ///< of each storage; 0: the format's default
  bool compress = false;        ///< .npz: deflate each record
  /// safetensors: tensors sharing a storage (safetensors_options's
  /// policy_from_name(): "refuse", "copy", "alias").
  std::string shared = "refuse";
  bool sync = true;    ///< fsync on commit
  bool direct = true;  ///< around the page cache, where the writer can
  checkpoint::limits limits;
};

/// The format to write `path` as: the one `name` names (a format's name,
/// or a suffix it is written with: "pt", "npy"...), or, for an empty
/// name, the one whose suffix `path` ends with; .ferry when none does.
/// Errors: bad_value (a name no writable format has).
[[nodiscard]] result<file_format, error> format_to_write(std::string_view name, std::string_view path);

/// Whether format `f` can be written to `target` with `opt`, asked before
/// the tensors are read (save_as() asks it too). Errors: bad_value, saying
/// why (a little-endian-only format asked for big-endian, an unknown
/// sharing policy, a format save_as() does not write).
[[nodiscard]] result<void, error> check_save(file_format f, const std::filesystem::path& target,
                                             const save_options& opt);

/// Writes `tensors` (storages shared where their bytes are: the same
/// pointer and size) and `metadata` as format `f`, atomically, through the
/// format's writer in the table. Errors: bad_value for a format written
/// another way (GGUF's typed tensors: save_gguf()), and each writer's own.
[[nodiscard]] result<void, error> save_as(file_format f, const std::filesystem::path& target,
                                          std::span<const tensor_ref> tensors,
                                          const std::map<std::string, std::string>& metadata,
                                          const save_options& opt = {});

}  // namespace ferry::checkpoint
