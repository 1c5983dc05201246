// The .ferry parser: header, trailer and manifest checked (format.h),
// storages and tensors laid out as the reader serves them.
#include <unistd.h>

#include <array>
#include <cerrno>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ferry/base/require.h"
#include "ferry/checkpoint/ferry/layout.h"
#include "ferry/checkpoint/ferry/internal.h"
#include "ferry/codec/crc32c.h"

namespace ferry::checkpoint::detail {

result<ferry_container, error> read_ferry_container(int fd, std::uint64_t size, const std::filesystem::path& path,
                                                    std::span<const std::byte, header_size> head, const limits& lim) {
  const auto fail = [&](error_code c, std::string_view what = {}) { return file_error(path, c, 0, what); };
  auto header = decode_header(head);
  if (!header) return fail(header.error(), "header");
  if (size < header_size + trailer_size) return fail(errc::truncated);

  std::array<std::byte, trailer_size> tail{};
  int sys_errno = 0;
  if (auto r = pread_exact(fd, size - trailer_size, tail, sys_errno); !r) {
    return file_error(path, r.error(), sys_errno);
  }
  auto trailer = decode_trailer(tail);
  if (!trailer) return fail(trailer.error(), "trailer");
  const auto& t = *trailer;
  if (t.file_size > size) return fail(errc::truncated);
  if (t.file_size < size) return fail(errc::trailing_bytes);
  if (t.header.order != header->order || t.header.alignment != header->alignment || t.header.flags != header->flags) {
    return fail(checkpoint_errc::header_mismatch);
  }
  const std::uint64_t body_end = size - trailer_size;
  if (t.manifest_size > body_end || t.manifest_offset != body_end - t.manifest_size ||
      t.manifest_offset < header_size) {
    return fail(checkpoint_errc::bad_layout, "manifest");
  }
  if (t.manifest_size > lim.max_manifest_bytes || t.manifest_size > SIZE_MAX) {
    return fail(errc::limit_exceeded, "manifest");
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(t.manifest_size));
  if (auto r = pread_exact(fd, t.manifest_offset, bytes, sys_errno); !r) {
    return file_error(path, r.error(), sys_errno, "manifest");
  }
  if (codec::crc32c(bytes) != t.manifest_crc) return fail(errc::checksum_mismatch, "manifest");
  return ferry_container{t, std::move(bytes)};
}

result<parsed_file, error> parse_ferry(int fd, std::uint64_t size, const std::filesystem::path& path,
                                       std::span<const std::byte, header_size> head, const limits& lim) {
  const auto fail = [&](error_code c, std::string_view what = {}) { return file_error(path, c, 0, what); };
  FERRY_TRY_ASSIGN(auto container, read_ferry_container(fd, size, path, head, lim));
  const auto& t = container.trailer;
  if (t.header.flags != 0) return fail(errc::bad_value, "header flags");
  auto m = graph::read<manifest>(container.manifest, manifest_options(lim, t.header.order));
  if (!m) return fail(m.error(), "manifest");

  parsed_file out;
  out.format = file_format::ferry;
  out.order = t.header.order;
  out.alignment = t.header.alignment;
  out.zero_gaps = true;  // padding is zero by rule (format.h)
  out.data_begin = header_size;
  out.data_end = t.manifest_offset;
  out.manifest_crc32c = t.manifest_crc;
  const std::uint64_t align = t.header.alignment;

  // Storages: packed in file order from the first aligned offset.
  if (m->storages.size() > lim.max_tensors) return fail(errc::limit_exceeded, "storages");
  std::unordered_map<const storage_record*, std::uint32_t> index_of;
  for (std::size_t i = 0; i < m->storages.size(); ++i) {
    // The context, built on failure only: "<file>: storage <i>".
    const auto sfail = [&](error_code c) { return make_error(c, path.string(), ": storage ", i); };
    const storage_record* s = m->storages[i].get();
    if (s == nullptr) return sfail(checkpoint_errc::bad_storage_reference);
    if (!index_of.emplace(s, static_cast<std::uint32_t>(i)).second) return sfail(checkpoint_errc::bad_layout);
    auto dtype = codec::dtype_from_code(s->dtype);
    if (!dtype) return sfail(dtype.error());
    if (s->nbytes % codec::size_of(*dtype) != 0) return sfail(checkpoint_errc::shape_size_mismatch);
    out.storages.push_back({s->offset, s->nbytes, *dtype, s->crc32c, std::nullopt, std::nullopt});
  }
  // Packed in file order from the first aligned offset to the manifest.
  tiling area;
  area.begin = header_size;
  area.end = t.manifest_offset;
  area.align = align;
  area.past_end = checkpoint_errc::bad_layout;
  area.after_last = checkpoint_errc::bad_layout;
  const std::string manifest_what = path.string() + ": manifest";
  area.area = manifest_what;
  FERRY_TRY(check_tiling(
      out.storages.size(), [&](std::size_t i) { return std::pair(out.storages[i].offset, out.storages[i].nbytes); },
      [&](std::size_t i) { return path.string() + ": storage " + std::to_string(i); }, area));

  if (m->tensors.size() > lim.max_tensors) return fail(errc::limit_exceeded, "tensors");
  std::unordered_set<std::string_view> seen;
  out.tensors.reserve(m->tensors.size());
  for (auto& rec : m->tensors) {
    FERRY_REQUIRE(valid_name(rec.name, lim.max_name_bytes), checkpoint_errc::bad_name, path.string(), ": tensor #",
                  out.tensors.size());
    const auto tfail = [&](error_code c) { return error(c, tensor_context(path.string(), rec.name)); };
    if (seen.contains(rec.name)) return tfail(errc::duplicate_key);
    auto dtype = codec::dtype_from_code(rec.dtype);
    if (!dtype) return tfail(dtype.error());
    const auto it = index_of.find(rec.storage.get());
    if (it == index_of.end()) return tfail(checkpoint_errc::bad_storage_reference);
    const storage_info& st = out.storages[it->second];
    if (!codec::same_element_layout(st.dtype, *dtype)) return tfail(checkpoint_errc::element_size_mismatch);
    if (auto r = check_view(*dtype, rec.shape, rec.strides, rec.offset, st.nbytes, lim.max_dims); !r) {
      return tfail(r.error());
    }
    out.tensors.push_back({std::move(rec.name), *dtype, std::move(rec.shape), std::move(rec.strides), rec.offset,
                           it->second});
    seen.insert(out.tensors.back().name);  // stable: reserved above
  }
  for (const auto& [k, v] : m->metadata) {
    if (!valid_name(k, lim.max_name_bytes) || !valid_utf8(v)) return fail(checkpoint_errc::bad_metadata, "metadata");
  }
  out.metadata = std::move(m->metadata);
  return out;
}

}  // namespace ferry::checkpoint::detail
