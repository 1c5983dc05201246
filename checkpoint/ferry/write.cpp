#include "ferry/checkpoint/writer.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "ferry/base/file.h"
#include "ferry/checkpoint/ferry/layout.h"
#include "ferry/codec/crc32c.h"
#include "ferry/wire/bulk.h"

namespace ferry::checkpoint {
namespace {

// Storages are converted to a foreign order through a buffer of this size.
constexpr std::size_t swap_chunk = std::size_t{1} << 20;

}  // namespace

struct writer::state {
  base::atomic_file file;
  write_options opt;
  manifest m;
  std::set<std::string, std::less<>> names;
  std::vector<std::byte> buffer;
  std::optional<error> broken;
  std::uint32_t manifest_crc = 0;

  result<void, error> io(result<void, error> r) {
    if (!r) broken = r.error();
    return r;
  }

  result<void, error> pad_to_alignment() {
    std::uint64_t target = 0;
    const bool ok = align_up(file.size(), opt.alignment, target);
    assert(ok);
    (void)ok;
    static constexpr std::byte zeros[4096] = {};
    while (file.size() < target) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(target - file.size(), sizeof zeros));
      FERRY_TRY(io(file.write(std::span(zeros, n))));
    }
    return {};
  }

  result<std::size_t, error> write_storage(codec::dtype dtype, std::span<const std::byte> bytes) {
    FERRY_TRY(pad_to_alignment());
    auto rec = std::make_shared<storage_record>();
    rec->offset = file.size();
    rec->nbytes = bytes.size();
    rec->dtype = codec::code(dtype);
    const std::size_t width = codec::order_width(dtype);
    std::uint32_t crc = 0;
    if (opt.order == wire::host_order || width == 1) {
      crc = codec::crc32c(bytes);
      FERRY_TRY(io(file.write(bytes)));
    } else {
      buffer.resize(std::min(swap_chunk, bytes.size()));
      while (!bytes.empty()) {
        const std::size_t n = std::min(buffer.size(), bytes.size());
        const auto out = std::span(buffer).first(n);
        wire::convert(bytes.first(n), wire::host_order, out, opt.order, width);
        crc = codec::crc32c_extend(crc, out);
        FERRY_TRY(io(file.write(out)));
        bytes = bytes.subspan(n);
      }
    }
    rec->crc32c = crc;
    m.storages.push_back(std::move(rec));
    return m.storages.size() - 1;
  }
};

writer::writer(std::unique_ptr<state> s) noexcept : s_(std::move(s)) {}
writer::writer(writer&&) noexcept = default;
writer& writer::operator=(writer&&) noexcept = default;
writer::~writer() = default;

result<writer, error> writer::create(const std::filesystem::path& target, const write_options& opt) {
  if (!detail::valid_alignment(opt.alignment)) {
    return error(checkpoint_errc::bad_alignment, target.string() + ": alignment " + std::to_string(opt.alignment));
  }
  FERRY_TRY_ASSIGN(auto file, base::atomic_file::create(target, opt.sync, opt.sync && opt.direct));
  auto s = std::make_unique<state>(state{std::move(file), opt, {}, {}, {}, {}, 0});
  const auto header = detail::encode_header({opt.order, opt.alignment});
  FERRY_TRY(s->io(s->file.write(header)));
  return writer(std::move(s));
}

result<storage_id, error> writer::add(const tensor_ref& t) { return add_tensor(t, std::nullopt); }

result<storage_id, error> writer::add(const tensor_ref& t, storage_id shared) { return add_tensor(t, shared); }

result<storage_id, error> writer::add_shared(const tensor_ref& t, std::optional<storage_id>& slot) {
  FERRY_TRY_ASSIGN(const storage_id id, add_tensor(t, slot));
  slot = id;
  return id;
}

result<storage_id, error> writer::add_tensor(const tensor_ref& t, std::optional<storage_id> shared) {
  state& s = *s_;
  if (s.broken) return *s.broken;
  const auto fail = [&](error_code c) { return error(c, detail::tensor_context(s.file.target().string(), t.name)); };
  if (!valid_name(t.name, s.opt.limits.max_name_bytes)) return fail(checkpoint_errc::bad_name);
  if (s.names.contains(t.name)) return fail(errc::duplicate_key);
  if (s.m.tensors.size() >= s.opt.limits.max_tensors) return fail(errc::limit_exceeded);
  const std::size_t width = codec::size_of(t.dtype);
  std::uint64_t storage_bytes = t.storage.size();
  if (shared) {
    if (shared->index >= s.m.storages.size()) return fail(checkpoint_errc::bad_storage_reference);
    const storage_record& rec = *s.m.storages[shared->index];
    if (!codec::same_element_layout(static_cast<codec::dtype>(rec.dtype), t.dtype)) {
      return fail(checkpoint_errc::element_size_mismatch);
    }
    storage_bytes = rec.nbytes;
  } else if (t.storage.size() % width != 0) {
    return fail(checkpoint_errc::shape_size_mismatch);
  }

  std::vector<std::uint64_t> strides(t.strides.begin(), t.strides.end());
  if (strides.empty() && !t.shape.empty()) strides = contiguous_strides(t.shape);
  if (auto r = check_view(t.dtype, t.shape, strides, t.offset, storage_bytes, s.opt.limits.max_dims); !r) {
    return fail(r.error());
  }

  std::size_t index = 0;
  if (shared) {
    index = shared->index;
  } else {
    auto written = s.write_storage(t.dtype, t.storage);
    if (!written) return written.error().wrap(detail::tensor_context(s.file.target().string(), t.name));
    index = *written;
  }

  tensor_record rec;
  rec.name = std::string(t.name);
  rec.dtype = codec::code(t.dtype);
  rec.shape.assign(t.shape.begin(), t.shape.end());
  rec.strides = std::move(strides);
  rec.offset = t.offset;
  rec.storage = s.m.storages[index];
  s.m.tensors.push_back(std::move(rec));
  s.names.insert(std::string(t.name));
  return storage_id{static_cast<std::uint32_t>(index)};
}

result<void, error> writer::set_metadata(std::string key, std::string value) {
  if (!valid_name(key, s_->opt.limits.max_name_bytes) || !valid_utf8(value)) {
    return error(checkpoint_errc::bad_metadata, s_->file.target().string() + ": metadata key " + quote(key));
  }
  s_->m.metadata.insert_or_assign(std::move(key), std::move(value));
  return {};
}

result<void, error> writer::commit() {
  state& s = *s_;
  if (s.broken) return *s.broken;
  const std::string file = s.file.target().string();
  FERRY_TRY(s.pad_to_alignment());
  auto bytes = graph::write(s.m, detail::manifest_options(s.opt.limits, s.opt.order));
  if (!bytes) return error(bytes.error(), file + ": manifest");
  if (bytes->size() > s.opt.limits.max_manifest_bytes) return error(errc::limit_exceeded, file + ": manifest");
  detail::trailer_fields t;
  t.manifest_offset = s.file.size();
  t.manifest_size = bytes->size();
  t.file_size = t.manifest_offset + t.manifest_size + trailer_size;
  t.manifest_crc = codec::crc32c(*bytes);
  t.header = {s.opt.order, s.opt.alignment};
  FERRY_TRY(s.io(s.file.write(*bytes)));
  FERRY_TRY(s.io(s.file.write(detail::encode_trailer(t))));
  auto r = s.file.commit();
  s.manifest_crc = t.manifest_crc;
  s.broken = error(errc::io_error, file + ": writer already committed");
  return r;
}

std::uint32_t writer::manifest_crc32c() const noexcept { return s_->manifest_crc; }
std::size_t writer::tensor_count() const noexcept { return s_->m.tensors.size(); }
std::uint64_t writer::bytes_written() const noexcept { return s_->file.size(); }

result<void, error> save(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                         const std::map<std::string, std::string>& metadata, const write_options& opt) {
  FERRY_TRY_ASSIGN(auto w, writer::create(target, opt));
  // Every span is alive for the whole call, so equal spans of one element
  // layout are one storage (views of one buffer as other dtypes are not:
  // a .ferry storage has one layout).
  std::map<std::tuple<const std::byte*, std::size_t, std::size_t, std::size_t>, storage_id> written;
  for (const auto& t : tensors) {
    const auto key = std::make_tuple(t.storage.data(), t.storage.size(), codec::size_of(t.dtype), codec::order_width(t.dtype));
    const auto it = t.storage.empty() ? written.end() : written.find(key);
    if (it != written.end()) {
      FERRY_TRY(w.add(t, it->second));
    } else {
      FERRY_TRY_ASSIGN(const auto id, w.add(t));
      if (!t.storage.empty()) written.emplace(key, id);
    }
  }
  for (const auto& [k, v] : metadata) FERRY_TRY(w.set_metadata(k, v));
  return w.commit();
}

}  // namespace ferry::checkpoint
