// Reading a checkpoint set (set.h): the index checked, every shard opened
// and checked against it, tensors assembled from their pieces.
#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_set>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry/base/require.h"
#include "ferry/checkpoint/ferry/layout.h"
#include "ferry/checkpoint/set/internal.h"

namespace ferry::checkpoint::detail {
namespace {

// A tensor assembled from pieces: memory of its own, writable when the
// reader hands storages out copy-on-write.
class assembled_storage final : public storage_buffer {
 public:
  // Not zeroed: every byte is read into it.
  assembled_storage(std::size_t n, bool expose) : data_(std::make_unique_for_overwrite<std::byte[]>(n)), n_(n) {
    bytes_ = writable();
    if (expose) mutable_ = writable();
  }
  [[nodiscard]] std::span<std::byte> writable() const noexcept { return {data_.get(), n_}; }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t n_;
};

std::string shard_context(const std::string& where, std::string_view file) {
  return where + ": shard " + quote(file);
}

}  // namespace

bool valid_shard_file(std::string_view f, std::size_t max_bytes) noexcept {
  return valid_name(f, max_bytes) && f != "." && f != ".." && f.find('/') == std::string_view::npos &&
         f.find('\0') == std::string_view::npos;
}

std::filesystem::path folder_of(const std::filesystem::path& p) {
  return p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
}

graph::options set_options(const limits& lim, wire::byte_order order) noexcept {
  graph::options g = manifest_options(lim, order);
  g.limits.max_count = std::max(g.limits.max_count, lim.max_shards);
  return g;
}

bool valid_save_id(std::string_view id) noexcept {
  return id.size() == 16 &&
         std::all_of(id.begin(), id.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

result<void, error> check_set(const set_manifest& m, const limits& lim, const std::string& where) {
  const auto fail = [&](error_code c, const auto&... what) { return make_error(c, where, ": ", what...); };
  if (!valid_save_id(m.save_id)) return fail(checkpoint_errc::bad_index, "save id is not 16 hex digits");
  if (m.world == 0) return fail(checkpoint_errc::bad_index, "world of 0 ranks");
  if (m.shards.empty()) return fail(checkpoint_errc::bad_index, "no shards");
  if (m.shards.size() > lim.max_shards) return fail(errc::limit_exceeded, "shards");
  std::unordered_set<std::string_view> files;
  for (std::size_t k = 0; k < m.shards.size(); ++k) {
    const auto& s = m.shards[k];
    if (!valid_shard_file(s.file, lim.max_name_bytes)) {
      return fail(checkpoint_errc::bad_index, "shard #", k, ": not a file name");
    }
    if (!files.insert(s.file).second) return error(errc::duplicate_key, shard_context(where, s.file));
    if (s.order > 1) return error(errc::bad_byte_order, shard_context(where, s.file));
    if (!s.save_id.empty() && !valid_save_id(s.save_id)) {
      return error(checkpoint_errc::bad_index, shard_context(where, s.file) + ": save id is not 16 hex digits");
    }
    const std::uint32_t world = s.world == 0 ? m.world : s.world;
    if (s.rank >= world) {
      return make_error(checkpoint_errc::bad_index, shard_context(where, s.file), ": rank ", s.rank, " of ", world);
    }
  }
  if (m.tensors.size() > lim.max_tensors) return fail(errc::limit_exceeded, "tensors");
  std::unordered_set<std::string_view> names;
  for (std::size_t i = 0; i < m.tensors.size(); ++i) {
    const auto& t = m.tensors[i];
    if (!valid_name(t.name, lim.max_name_bytes)) return fail(checkpoint_errc::bad_name, "tensor #", i);
    const auto tfail = [&](error_code c, const auto&... what) {
      if constexpr (sizeof...(what) == 0) {
        return error(c, tensor_context(where, t.name));
      } else {
        return make_error(c, tensor_context(where, t.name), ": ", what...);
      }
    };
    if (!names.insert(t.name).second) return tfail(errc::duplicate_key);
    auto dtype = codec::dtype_from_code(t.dtype);
    if (!dtype) return tfail(dtype.error());
    if (t.shape.size() > lim.max_dims) return tfail(errc::limit_exceeded, "dimensions");
    const auto shape_size = shape_bytes(t.shape, codec::size_of(*dtype));
    if (!shape_size) return tfail(shape_size.error());
    const std::uint64_t bytes = *shape_size;
    const std::uint64_t numel = bytes / codec::size_of(*dtype);
    if (t.pieces.empty()) return tfail(checkpoint_errc::bad_pieces, "no pieces");
    if (t.pieces.size() > m.shards.size()) return tfail(checkpoint_errc::bad_pieces, "more pieces than shards");
    if (numel == 0 && t.pieces.size() != 1) return tfail(checkpoint_errc::bad_pieces, "an empty tensor in pieces");
    std::uint64_t next = 0;
    std::set<std::uint32_t> used;
    for (const auto& p : t.pieces) {
      const auto piece = [&](error_code c, const auto&... what) { return tfail(c, "piece at element ", p.begin, what...); };
      if (p.shard >= m.shards.size()) return piece(checkpoint_errc::bad_index, ": no such shard");
      if (!used.insert(p.shard).second) return piece(checkpoint_errc::bad_pieces, ": a second piece in its shard");
      if (p.begin != next || p.count > numel - next || (p.count == 0 && numel != 0)) {
        return piece(checkpoint_errc::bad_pieces);
      }
      next += p.count;
    }
    if (next != numel) return tfail(checkpoint_errc::bad_pieces, "pieces end at element ", next);
  }
  for (const auto& [k, v] : m.metadata) {
    if (!valid_name(k, lim.max_name_bytes) || !valid_utf8(v)) return fail(checkpoint_errc::bad_metadata, "metadata");
  }
  return {};
}

result<std::unique_ptr<shard_set>, error> build_set(const std::filesystem::path& path, std::span<const std::string> files,
                                                    std::vector<set_tensor_record> tensors, const read_options& opt,
                                                    const shard_check& check, parsed_file& out) {
  const std::string where = path.string();
  auto set = std::make_unique<shard_set>();
  const std::filesystem::path folder = folder_of(path);
  for (std::size_t k = 0; k < files.size(); ++k) {
    auto r = open_shard(folder / files[k], opt);
    if (!r) return r.error().wrap(where);
    if (auto c = check(k, *r); !c) {
      return error(c.error().code(), shard_context(where, files[k]) + ": " + c.error().context());
    }
    set->total_bytes += r->file_size();
    set->readers.push_back(std::move(*r));
  }

  out.order = set->readers.front().order();
  out.alignment = set->readers.front().alignment();
  for (const auto& r : set->readers) out.alignment = std::min(out.alignment, r.alignment());
  out.tensors.reserve(tensors.size());
  // Whole pieces over one shard storage share one storage of the set.
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint32_t> storage_of;
  for (auto& t : tensors) {
    std::vector<shard_set::piece> sources;
    const tensor_info* only = nullptr;
    for (const auto& p : t.pieces) {
      const reader& shard = set->readers[p.shard];
      const auto bad = [&](const auto&... what) {
        return make_error(checkpoint_errc::bad_shard, tensor_context(shard_context(where, files[p.shard]), t.name), ": ",
                          what...);
      };
      const tensor_info* st = shard.find(t.name);
      if (st == nullptr) return bad("not in the shard");
      if (t.pieces.size() == 1 && t.shape_from_shard) {
        t.dtype = codec::code(st->dtype);
        t.shape = st->shape;
      }
      if (codec::code(st->dtype) != t.dtype) return bad("dtype differs from the index's");
      if (t.pieces.size() == 1) {
        if (st->shape != t.shape) return bad("shape differs from the index's");
        only = st;
      } else if (st->shape.size() != 1 || st->shape[0] != p.count || !st->is_contiguous()) {
        return bad("not a 1-d piece of ", p.count, " elements");
      }
      sources.push_back({p.shard, static_cast<std::uint32_t>(st - shard.tensors().data()),
                         p.begin * codec::size_of(st->dtype)});
    }
    if (only != nullptr) {
      const std::uint32_t shard = sources.front().shard;
      const auto [it, fresh] = storage_of.emplace(std::make_pair(shard, only->storage),
                                                  static_cast<std::uint32_t>(out.storages.size()));
      if (fresh) {
        storage_info si = set->readers[shard].storages()[only->storage];
        si.offset = 0;
        si.crc32c.reset();
        si.crc32.reset();
        out.storages.push_back(si);
        set->sources.push_back(std::move(sources));
        set->whole.push_back(true);
      }
      tensor_info info = *only;
      info.storage = it->second;
      out.tensors.push_back(std::move(info));
    } else {
      const auto dtype = *codec::dtype_from_code(t.dtype);  // as its pieces'
      const std::uint64_t numel = t.pieces.back().begin + t.pieces.back().count;
      auto strides = contiguous_strides(t.shape);
      out.tensors.push_back({std::move(t.name), dtype, std::move(t.shape), std::move(strides), 0,
                             static_cast<std::uint32_t>(out.storages.size())});
      out.storages.push_back({0, numel * codec::size_of(dtype), dtype, std::nullopt, std::nullopt, std::nullopt});
      set->sources.push_back(std::move(sources));
      set->whole.push_back(false);
    }
  }
  return set;
}

result<std::vector<std::string>, error> set_files(const std::filesystem::path& path, const limits& lim) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return file_error(path, errc::io_error, errno);
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return file_error(path, errc::io_error, errno);
  std::array<std::byte, header_size> head{};
  int sys_errno = 0;
  const auto not_index = [&] { return file_error(path, checkpoint_errc::bad_index, 0, "not a set's index"); };
  if (static_cast<std::uint64_t>(st.st_size) < header_size) return not_index();
  if (!pread_exact(fd, 0, head, sys_errno)) return file_error(path, errc::io_error, sys_errno);
  if (std::memcmp(head.data(), file_magic, sizeof file_magic) != 0 || head[10] != std::byte{set_index_flag}) {
    return not_index();
  }
  FERRY_TRY_ASSIGN(auto container, read_ferry_container(fd, static_cast<std::uint64_t>(st.st_size), path, head, lim));
  if (container.trailer.manifest_offset != header_size) return file_error(path, checkpoint_errc::bad_index, 0, "manifest offset");
  auto m = graph::read<set_manifest>(container.manifest, set_options(lim, container.trailer.header.order));
  if (!m) return error(m.error(), path.string() + ": index");
  std::vector<std::string> files;
  for (auto& sh : m->shards) files.push_back(std::move(sh.file));
  return files;
}

result<std::unique_ptr<shard_set>, error> open_set(const std::filesystem::path& path, ferry_container container,
                                                   const read_options& opt, parsed_file& out) {
  const std::string where = path.string();
  // An index holds nothing but its manifest, right after the header.
  if (container.trailer.manifest_offset != header_size) return error(checkpoint_errc::bad_index, where + ": manifest offset");
  auto m = graph::read<set_manifest>(container.manifest, set_options(opt.lim, container.trailer.header.order));
  if (!m) return error(m.error(), where + ": index");
  FERRY_TRY(check_set(*m, opt.lim, where));
  std::vector<std::string> files;
  for (const auto& s : m->shards) files.push_back(s.file);
  const shard_check check = [&](std::size_t k, const reader& r) -> result<void, error> {
    const auto& s = m->shards[k];
    const auto bad = [](const auto&... what) { return make_error(checkpoint_errc::bad_shard, what...); };
    if (r.format() != file_format::ferry) return bad("not a .ferry file");
    const auto meta = r.metadata().find("ferry.set.save_id");
    const std::string& id = s.save_id.empty() ? m->save_id : s.save_id;
    if (meta == r.metadata().end() || meta->second != id) {
      return bad("from another save (save id ", meta == r.metadata().end() ? std::string("none") : meta->second,
                 ", the index records ", id, ")");
    }
    if (r.file_size() != s.size) {
      return bad(r.file_size(), " bytes, the index records ", s.size);
    }
    if (r.manifest_crc32c() != s.manifest_crc32c) return bad("manifest CRC32C differs from the index's");
    if (static_cast<std::uint8_t>(r.order()) != s.order) return bad("byte order differs from the index's");
    return {};
  };
  FERRY_TRY_ASSIGN(auto set, build_set(path, files, std::move(m->tensors), opt, check, out));
  set->total_bytes += container.trailer.file_size;
  out.format = file_format::ferry_set;
  out.manifest_crc32c = container.trailer.manifest_crc;
  out.metadata = std::move(m->metadata);
  return set;
}

result<std::shared_ptr<const storage_buffer>, error> shard_set::load(const parsed_file& f,
                                                                     const load_request& req) const {
  const std::uint32_t i = req.storage;
  const std::uint64_t nbytes = f.storages[i].nbytes;
  const auto& first = sources[i].front();
  const reader& r = readers[first.shard];
  if (whole[i]) {  // the shard's storage itself
    FERRY_TRY_ASSIGN(auto t, r.get(r.tensors()[first.tensor]));
    return t.storage();
  }
  const auto too_large = [&] {
    return error(checkpoint_errc::storage_too_large, tensor_context(r.path().string(), r.tensors()[first.tensor].name));
  };
  if (nbytes > SIZE_MAX / 2) return too_large();
  std::shared_ptr<assembled_storage> buf;
  try {
    buf = std::make_shared<assembled_storage>(static_cast<std::size_t>(nbytes), req.opt.copy_on_write);
  } catch (const std::bad_alloc&) {
    return too_large();
  }
  FERRY_TRY(read_pieces(i, buf->writable()));
  return std::shared_ptr<const storage_buffer>(std::move(buf));
}

std::optional<result<void, error>> shard_set::read_into(const tensor_info& t, std::span<std::byte> out) const {
  if (whole[t.storage]) {  // the shard's own tensor of that name
    const reader& r = readers[sources[t.storage].front().shard];
    return r.read_into(*r.find(t.name), out);
  }
  return read_pieces(t.storage, out);
}

result<void, error> shard_set::read_pieces(std::uint32_t i, std::span<std::byte> out) const {
  const auto& srcs = sources[i];
  for (std::size_t k = 0; k < srcs.size(); ++k) {
    const reader& r = readers[srcs[k].shard];
    const std::uint64_t end = k + 1 < srcs.size() ? srcs[k + 1].at : out.size();
    FERRY_TRY(r.read_into(r.tensors()[srcs[k].tensor],
                          out.subspan(static_cast<std::size_t>(srcs[k].at), static_cast<std::size_t>(end - srcs[k].at))));
  }
  return {};
}

std::optional<result<void, error>> shard_set::verify(const parsed_file&, const mapped_file*,
                                                     const std::filesystem::path&,
                                                     const std::function<void(std::uint64_t)>& progress) const {
  std::uint64_t done = 0;
  for (const auto& r : readers) {
    std::uint64_t mine = 0;
    auto checked = r.verify([&](std::uint64_t n) {
      mine = n;
      if (progress) progress(done + n);
    });
    if (!checked) return checked;
    done += mine;
  }
  return result<void, error>();
}

}  // namespace ferry::checkpoint::detail
