// safetensors files written (safetensors.h: save_safetensors and
// stage_safetensors, which the sharded writer in index.cpp shares); the
// parser is read.cpp.
#include <algorithm>
#include <set>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "ferry/base/file.h"
#include "ferry/base/require.h"
#include "ferry/checkpoint/format.h"
#include "ferry/checkpoint/safetensors.h"
#include "ferry/checkpoint/safetensors/internal.h"
#include "ferry/wire/bulk.h"

namespace ferry::checkpoint {

using detail::tensor_what;

result<void, error> save_safetensors(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                                     const std::map<std::string, std::string>& metadata,
                                     const safetensors_options& opt) {
  FERRY_TRY_ASSIGN(auto out, detail::stage_safetensors(target, tensors, metadata, opt));
  return out.commit();
}

result<base::atomic_file, error> detail::stage_safetensors(const std::filesystem::path& target,
                                                           std::span<const tensor_ref> tensors,
                                                           const std::map<std::string, std::string>& metadata,
                                                           const safetensors_options& opt) {
  const std::string file = target.string();
  const auto fail = [&](error_code c, std::string_view what) { return error(c, file + ": " + std::string(what)); };
  const std::uint32_t a = opt.alignment;
  if ((a & (a - 1)) != 0 || a < 8 || a > max_alignment) return fail(checkpoint_errc::bad_alignment, "alignment");
  if (tensors.size() > opt.limits.max_tensors) return fail(errc::limit_exceeded, "tensors");

  // Group the refs by storage, in the order of first appearance.
  std::map<std::pair<const std::byte*, std::size_t>, std::size_t> group_of;
  std::vector<std::vector<std::size_t>> groups;
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const tensor_ref& t = tensors[i];
    if (!valid_name(t.name, opt.limits.max_name_bytes) || t.name == "__metadata__") {
      return fail(checkpoint_errc::bad_name, tensor_what(t.name));
    }
    if (!names.insert(t.name).second) return fail(errc::duplicate_key, tensor_what(t.name));
    std::vector<std::uint64_t> strides(t.strides.begin(), t.strides.end());
    if (strides.empty()) strides = contiguous_strides(t.shape);
    if (auto r = check_view(t.dtype, t.shape, strides, t.offset, t.storage.size(), opt.limits.max_dims); !r) {
      return fail(r.error(), tensor_what(t.name));
    }
    if (t.storage.empty()) continue;
    const auto [it, fresh] = group_of.emplace(std::make_pair(t.storage.data(), t.storage.size()), groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }

  std::map<std::string, std::string> meta = metadata;
  std::vector<bool> skip(tensors.size(), false);
  for (const auto& members : groups) {
    if (members.size() < 2 || opt.shared == safetensors_options::shared_policy::copy) continue;
    std::string tied;
    for (const std::size_t i : members) tied += (tied.empty() ? "" : ", ") + std::string(tensors[i].name);
    if (opt.shared == safetensors_options::shared_policy::refuse) {
      return fail(checkpoint_errc::shared_storage, "tensors " + tied + " share storage");
    }
    const tensor_ref& kept = tensors[members.front()];
    const auto same_view = [&](const tensor_ref& t) {
      const auto s1 = t.strides.empty() ? contiguous_strides(t.shape) : std::vector(t.strides.begin(), t.strides.end());
      const auto s2 = kept.strides.empty() ? contiguous_strides(kept.shape)
                                           : std::vector(kept.strides.begin(), kept.strides.end());
      return t.dtype == kept.dtype && std::ranges::equal(t.shape, kept.shape) && s1 == s2 && t.offset == kept.offset;
    };
    for (std::size_t k = 1; k < members.size(); ++k) {
      const tensor_ref& t = tensors[members[k]];
      if (!same_view(t)) return fail(checkpoint_errc::shared_storage, "tensors " + tied + " are different views");
      meta[std::string(t.name)] = std::string(kept.name);
      skip[members[k]] = true;
    }
  }
  for (const auto& [k, v] : meta) {
    if (!valid_name(k, opt.limits.max_name_bytes) || !valid_utf8(v)) return fail(checkpoint_errc::bad_metadata, k);
  }
  for (const tensor_ref& t : tensors) {
    if (safetensors_dtype_name(t.dtype).empty()) {
      return fail(codec_errc::unknown_dtype,
                  "tensor " + quote(t.name) + ": safetensors has no dtype " + std::string(codec::name(t.dtype)));
    }
  }

  nlohmann::json header = nlohmann::json::object();
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (skip[i]) continue;
    const tensor_ref& t = tensors[i];
    std::uint64_t n = codec::size_of(t.dtype);
    for (const auto d : t.shape) n *= d;
    header[std::string(t.name)] = {{"dtype", safetensors_dtype_name(t.dtype)},
                                   {"shape", std::vector<std::uint64_t>(t.shape.begin(), t.shape.end())},
                                   {"data_offsets", {at, at + n}}};
    at += n;
  }
  if (!meta.empty()) header["__metadata__"] = meta;
  std::string text = header.dump();
  std::uint64_t padded = 0;
  (void)align_up(8 + text.size(), a, padded);  // a header under 2^63 bytes cannot overflow
  text.resize(static_cast<std::size_t>(padded - 8), ' ');

  FERRY_TRY_ASSIGN(auto out, base::atomic_file::create(target, opt.sync, opt.sync && opt.direct));
  const auto length = wire::to_bytes<std::uint64_t>(text.size(), wire::byte_order::little);
  FERRY_TRY(out.write(length));
  FERRY_TRY(out.write(std::as_bytes(std::span(text))));
  std::vector<std::byte> buffer;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (skip[i]) continue;
    const tensor_ref& t = tensors[i];
    const std::size_t width = codec::size_of(t.dtype);
    std::span<const std::byte> bytes;
    bool contiguous = t.strides.empty();
    if (!contiguous) contiguous = std::ranges::equal(t.strides, contiguous_strides(t.shape));
    std::uint64_t n = width;
    for (const auto d : t.shape) n *= d;
    if (contiguous) {
      bytes = n == 0 ? std::span<const std::byte>{} : t.storage.subspan(static_cast<std::size_t>(t.offset * width),
                                                                       static_cast<std::size_t>(n));
    } else {
      buffer = gather(t);
      bytes = buffer;
    }
    if (wire::host_order != wire::byte_order::little && width > 1) {
      if (bytes.data() != buffer.data()) buffer.assign(bytes.begin(), bytes.end());
      wire::convert_in_place(buffer, codec::order_width(t.dtype), wire::host_order, wire::byte_order::little);
      bytes = buffer;
    }
    FERRY_TRY(out.write(bytes));
  }
  return out;
}

}  // namespace ferry::checkpoint
