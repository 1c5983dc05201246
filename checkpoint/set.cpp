// Writing checkpoint sets (set.h): the planner, shard writers, the index
// and the cleanup of superseded shards.
#include "ferry/checkpoint/set.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>

#include "ferry/base/file.h"
#include "ferry/checkpoint/detail/layout.h"
#include "ferry/checkpoint/detail/set.h"
#include "ferry/checkpoint/writer.h"
#include "ferry/codec/crc32c.h"

namespace ferry::checkpoint {
namespace {

using detail::piece_record;
using detail::set_manifest;
using detail::set_tensor_record;
using detail::shard_entry;

std::uint64_t numel_of(std::span<const std::uint64_t> shape) noexcept {
  std::uint64_t n = 1;
  for (const auto e : shape) n *= e;  // callers check overflow (check_view, check_set)
  return n;
}

std::string stem_of(const std::filesystem::path& index) {
  std::string name = index.filename().string();
  if (name.size() > 6 && name.ends_with(".ferry")) name.resize(name.size() - 6);
  return name;
}

std::filesystem::path folder_of(const std::filesystem::path& p) {
  return p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
}

// Whether `name` is a shard file of `stem`: <stem>-<16 hex>-<digits>-of-<digits>.ferry.
bool is_shard_name(std::string_view name, std::string_view stem) {
  if (!name.starts_with(stem) || !name.ends_with(".ferry")) return false;
  name.remove_prefix(stem.size());
  name.remove_suffix(6);
  if (name.size() < 1 + 16 + 1 || name[0] != '-' || !detail::valid_save_id(name.substr(1, 16)) || name[17] != '-') {
    return false;
  }
  name.remove_prefix(18);
  const auto of = name.find("-of-");
  if (of == std::string_view::npos || of == 0 || of + 4 == name.size()) return false;
  const auto digits = [](std::string_view d) { return std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; }); };
  return digits(name.substr(0, of)) && digits(name.substr(of + 4));
}

// Removes the shard files of `index`'s stem that `keep` does not name, and
// the temporaries of shard files that no live writer holds.
void remove_superseded_shards(const std::filesystem::path& index, const std::vector<shard_entry>& keep) {
  const std::string stem = stem_of(index);
  const std::filesystem::path folder = folder_of(index);
  constexpr std::string_view tmp_mark = ".ferry-tmp.";
  std::vector<std::filesystem::path> remove, temporaries;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_shard_name(name, stem)) {
      const bool kept = std::any_of(keep.begin(), keep.end(), [&](const shard_entry& s) { return s.file == name; });
      if (!kept) remove.push_back(it->path());
    } else if (name.starts_with(".") && name.find(tmp_mark) != std::string::npos) {
      const std::string target = name.substr(1, name.find(tmp_mark) - 1);
      if (is_shard_name(target, stem)) temporaries.push_back(folder / target);
    }
  }
  for (const auto& p : remove) std::filesystem::remove(p, ec);
  for (const auto& t : temporaries) base::remove_stale_temporaries(t);
}

// Writes the index: a .ferry container flagged as a set, no storages.
result<void, error> write_index(const std::filesystem::path& index, const set_manifest& m, const write_options& opt) {
  const std::string where = index.string();
  auto bytes = graph::write(m, detail::set_options(opt.limits, opt.order));
  if (!bytes) return error(bytes.error(), where + ": index");
  if (bytes->size() > opt.limits.max_manifest_bytes) return error(errc::limit_exceeded, where + ": index");
  FERRY_TRY_ASSIGN(auto file, base::atomic_file::create(index, opt.sync));
  const detail::header_fields h{opt.order, min_alignment, set_index_flag};
  FERRY_TRY(file.write(detail::encode_header(h)));
  detail::trailer_fields t;
  t.manifest_offset = header_size;
  t.manifest_size = bytes->size();
  t.file_size = header_size + bytes->size() + trailer_size;
  t.manifest_crc = codec::crc32c(*bytes);
  t.header = h;
  FERRY_TRY(file.write(*bytes));
  FERRY_TRY(file.write(detail::encode_trailer(t)));
  return file.commit();
}

}  // namespace

std::string new_save_id() {
  std::uint64_t r = 0;
  try {
    std::random_device rd;
    r = (std::uint64_t{rd()} << 32) ^ rd();
  } catch (...) {
    r = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(r));
  return out;
}

std::filesystem::path shard_path(const std::filesystem::path& index, std::string_view save_id, std::uint32_t rank,
                                 std::uint32_t world) {
  char tail[64];
  std::snprintf(tail, sizeof tail, "-%05u-of-%05u.ferry", static_cast<unsigned>(rank), static_cast<unsigned>(world));
  return folder_of(index) / (stem_of(index) + "-" + std::string(save_id) + tail);
}

std::vector<std::vector<planned_piece>> plan_shards(std::span<const tensor_ref> tensors, std::uint32_t shards,
                                                    std::uint64_t split_bytes) {
  std::vector<std::vector<planned_piece>> plan(std::max<std::uint32_t>(shards, 1));
  const std::uint64_t n = plan.size();
  std::uint64_t total = 0;
  for (const auto& t : tensors) total += numel_of(t.shape) * codec::size_of(t.dtype);
  // Shard k's bytes start at bound(k) = floor(k * total / n), computed
  // without a 128-bit product.
  const auto bound = [&](std::uint64_t k) { return total / n * k + total % n * k / n; };
  const auto shard_at = [&](std::uint64_t byte) {
    std::uint64_t k = byte >= total ? n - 1 : std::min(n - 1, byte / std::max<std::uint64_t>(total / n, 1));
    while (k > 0 && bound(k) > byte) --k;
    while (k + 1 < n && bound(k + 1) <= byte) ++k;
    return k;
  };
  const auto shard = [&](std::uint64_t k) -> std::vector<planned_piece>& { return plan[static_cast<std::size_t>(k)]; };
  // Tensors over one storage (tied weights, views), when whole, go where
  // the first went: the shard writes the storage once.
  std::map<std::pair<const std::byte*, std::size_t>, std::uint64_t> shard_of_storage;
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::uint64_t width = codec::size_of(tensors[i].dtype);
    const std::uint64_t numel = numel_of(tensors[i].shape);
    const std::uint64_t bytes = numel * width;
    const std::uint64_t first = shard_at(at);
    const auto key = std::make_pair(tensors[i].storage.data(), tensors[i].storage.size());
    if (bytes == 0 || bytes < split_bytes) {
      if (tensors[i].storage.empty()) {
        shard(first).push_back({i, 0, numel});
      } else if (const auto it = shard_of_storage.find(key); it != shard_of_storage.end()) {
        shard(it->second).push_back({i, 0, numel});
        continue;  // its bytes are written already
      } else {
        shard(first).push_back({i, 0, numel});
        shard_of_storage.emplace(key, first);
      }
    } else {
      // Element e goes to the shard its first byte, at + e*width, falls in.
      for (std::uint64_t k = first; k < n; ++k) {
        const std::uint64_t lo = std::max(bound(k), at);
        const std::uint64_t hi = k + 1 == n ? at + bytes : std::min(bound(k + 1), at + bytes);
        if (lo >= at + bytes) break;
        const std::uint64_t begin = (lo - at + width - 1) / width;
        const std::uint64_t end = std::min(numel, (hi - at + width - 1) / width);
        if (end > begin) shard(k).push_back({i, begin, end - begin});
      }
    }
    at += bytes;
  }
  return plan;
}

std::vector<std::byte> shard_record::encode() const {
  set_manifest m;
  m.shards.push_back({file, size, manifest_crc32c, static_cast<std::uint8_t>(order), rank});
  for (const auto& p : pieces) {
    m.tensors.push_back({p.name, codec::code(p.dtype), p.shape, {{0, p.begin, p.count}}, false});
  }
  auto bytes = graph::write(m, detail::set_options({}, wire::host_order));
  return bytes ? std::move(*bytes) : std::vector<std::byte>{};
}

result<shard_record, error> shard_record::decode(std::span<const std::byte> bytes, const limits& lim) {
  auto m = graph::read<set_manifest>(bytes, detail::set_options(lim, wire::host_order));
  if (!m) return error(m.error(), "shard record");
  const auto fail = [](std::string_view what) { return error(checkpoint_errc::bad_index, "shard record: " + std::string(what)); };
  if (m->shards.size() != 1) return fail("not one shard");
  const auto& s = m->shards.front();
  if (s.order > 1) return error(errc::bad_byte_order, "shard record");
  if (m->tensors.size() > lim.max_tensors) return error(errc::limit_exceeded, "shard record: tensors");
  shard_record out{s.file, s.size, s.manifest_crc32c, static_cast<wire::byte_order>(s.order), s.rank, {}};
  for (auto& t : m->tensors) {
    auto dtype = codec::dtype_from_code(t.dtype);
    if (!dtype) return error(dtype.error(), "shard record");
    if (t.pieces.size() != 1 || t.pieces.front().shard != 0) return fail("a tensor not in one piece");
    out.pieces.push_back({std::move(t.name), *dtype, std::move(t.shape), t.pieces.front().begin, t.pieces.front().count});
  }
  return out;
}

struct shard_writer::state {
  writer w;
  std::string file;
  std::uint32_t rank = 0;
  wire::byte_order order = wire::host_order;
  std::map<std::pair<const std::byte*, std::size_t>, storage_id> written;
  std::vector<shard_record::piece> pieces;
  std::vector<std::byte> gathered;
};

shard_writer::shard_writer(std::unique_ptr<state> s) noexcept : s_(std::move(s)) {}
shard_writer::shard_writer(shard_writer&&) noexcept = default;
shard_writer& shard_writer::operator=(shard_writer&&) noexcept = default;
shard_writer::~shard_writer() = default;

result<shard_writer, error> shard_writer::create(const std::filesystem::path& index, std::string_view save_id,
                                                 std::uint32_t rank, std::uint32_t world, const write_options& opt) {
  if (!detail::valid_save_id(save_id)) return error(errc::bad_value, index.string() + ": save id '" + std::string(save_id) + "'");
  if (rank >= world) {
    return error(errc::bad_value, index.string() + ": rank " + std::to_string(rank) + " of " + std::to_string(world));
  }
  const auto path = shard_path(index, save_id, rank, world);
  FERRY_TRY_ASSIGN(auto w, writer::create(path, opt));
  FERRY_TRY(w.set_metadata("ferry.set.save_id", std::string(save_id)));
  FERRY_TRY(w.set_metadata("ferry.set.rank", std::to_string(rank)));
  auto s = std::make_unique<state>(state{std::move(w), path.filename().string(), rank, opt.order, {}, {}, {}});
  return shard_writer(std::move(s));
}

result<void, error> shard_writer::add(const tensor_ref& t) {
  state& s = *s_;
  const auto key = std::make_pair(t.storage.data(), t.storage.size());
  const auto it = t.storage.empty() ? s.written.end() : s.written.find(key);
  if (it != s.written.end()) {
    FERRY_TRY(s.w.add(t, it->second));
  } else {
    FERRY_TRY_ASSIGN(const auto id, s.w.add(t));
    if (!t.storage.empty()) s.written.emplace(key, id);
  }
  const std::uint64_t numel = numel_of(t.shape);  // checked by add()
  s.pieces.push_back({std::string(t.name), t.dtype, {t.shape.begin(), t.shape.end()}, 0, numel});
  return {};
}

result<void, error> shard_writer::add_piece(const tensor_ref& t, std::uint64_t begin, std::uint64_t count) {
  state& s = *s_;
  const std::string ctx = detail::tensor_context(s.file, t.name);
  std::vector<std::uint64_t> strides(t.strides.begin(), t.strides.end());
  const auto contiguous = contiguous_strides(t.shape);
  if (strides.empty()) strides = contiguous;
  if (auto r = check_view(t.dtype, t.shape, strides, t.offset, t.storage.size(), SIZE_MAX); !r) return error(r.error(), ctx);
  const std::uint64_t numel = numel_of(t.shape);
  if (begin > numel || count > numel - begin) return error(checkpoint_errc::bad_pieces, ctx);
  if (begin == 0 && count == numel) return add(t);
  const std::size_t width = codec::size_of(t.dtype);
  std::span<const std::byte> bytes;
  if (strides == contiguous) {
    bytes = t.storage.subspan(static_cast<std::size_t>((t.offset + begin) * width), static_cast<std::size_t>(count * width));
  } else {
    s.gathered = gather(t);
    bytes = std::span<const std::byte>(s.gathered).subspan(static_cast<std::size_t>(begin * width),
                                                           static_cast<std::size_t>(count * width));
  }
  const std::uint64_t shape[] = {count};
  FERRY_TRY(s.w.add({.name = t.name, .dtype = t.dtype, .shape = shape, .strides = {}, .offset = 0, .storage = bytes}));
  s.pieces.push_back({std::string(t.name), t.dtype, {t.shape.begin(), t.shape.end()}, begin, count});
  return {};
}

result<void, error> shard_writer::add_part(std::string_view name, codec::dtype dtype,
                                           std::span<const std::uint64_t> shape, std::uint64_t begin,
                                           std::span<const std::byte> elements) {
  state& s = *s_;
  const std::string ctx = detail::tensor_context(s.file, name);
  const std::size_t width = codec::size_of(dtype);
  std::uint64_t numel = 1;
  for (const auto e : shape) {
    if (__builtin_mul_overflow(numel, e, &numel)) return error(checkpoint_errc::shape_overflow, ctx);
  }
  const std::uint64_t count = elements.size() / width;
  if (elements.size() % width != 0 || begin > numel || count > numel - begin) {
    return error(checkpoint_errc::bad_pieces, ctx);
  }
  if (begin == 0 && count == numel) {
    return add({.name = name, .dtype = dtype, .shape = shape, .strides = {}, .offset = 0, .storage = elements});
  }
  const std::uint64_t piece_shape[] = {count};
  FERRY_TRY(s.w.add({.name = name, .dtype = dtype, .shape = piece_shape, .strides = {}, .offset = 0, .storage = elements}));
  s.pieces.push_back({std::string(name), dtype, {shape.begin(), shape.end()}, begin, count});
  return {};
}

result<shard_record, error> shard_writer::commit() {
  state& s = *s_;
  FERRY_TRY(s.w.commit());
  return shard_record{s.file, s.w.bytes_written(), s.w.manifest_crc32c(), s.order, s.rank, std::move(s.pieces)};
}

std::uint64_t shard_writer::bytes_written() const noexcept { return s_->w.bytes_written(); }

result<void, error> commit_set(const std::filesystem::path& index, std::string_view save_id, std::uint32_t world,
                               std::span<const shard_record> shards, const std::map<std::string, std::string>& metadata,
                               const write_options& opt) {
  const std::string where = index.string();
  std::vector<const shard_record*> by_rank;
  for (const auto& r : shards) by_rank.push_back(&r);
  std::stable_sort(by_rank.begin(), by_rank.end(), [](auto* a, auto* b) { return a->rank < b->rank; });

  set_manifest m;
  m.save_id = std::string(save_id);
  m.world = world;
  m.metadata = metadata;
  std::unordered_map<std::string_view, std::size_t> tensor_of;
  std::vector<std::pair<std::uint32_t, std::string_view>> first_shard;  // per tensor, for errors
  for (const shard_record* r : by_rank) {
    const auto k = static_cast<std::uint32_t>(m.shards.size());
    m.shards.push_back({r->file, r->size, r->manifest_crc32c, static_cast<std::uint8_t>(r->order), r->rank});
    for (const auto& p : r->pieces) {
      const auto [it, fresh] = tensor_of.emplace(p.name, m.tensors.size());
      if (fresh) {
        m.tensors.push_back({p.name, codec::code(p.dtype), p.shape, {}, false});
      } else {
        const auto& t = m.tensors[it->second];
        if (t.dtype != codec::code(p.dtype) || t.shape != p.shape) {
          return error(checkpoint_errc::bad_shard, detail::tensor_context(where + ": shard '" + r->file + "'", p.name) +
                                                       ": dtype or shape differs from another shard's");
        }
      }
      m.tensors[it->second].pieces.push_back({k, p.begin, p.count});
    }
  }
  for (auto& t : m.tensors) {
    std::sort(t.pieces.begin(), t.pieces.end(), [](const piece_record& a, const piece_record& b) { return a.begin < b.begin; });
  }
  FERRY_TRY(detail::check_set(m, opt.limits, where));
  FERRY_TRY(write_index(index, m, opt));
  remove_superseded_shards(index, m.shards);
  return {};
}

result<void, error> save_set(const std::filesystem::path& index, std::span<const tensor_ref> tensors,
                             std::uint32_t shards, const std::map<std::string, std::string>& metadata,
                             const write_options& opt) {
  if (shards == 0) return error(errc::bad_value, index.string() + ": 0 shards");
  const auto plan = plan_shards(tensors, shards);
  const std::string id = new_save_id();
  std::vector<std::optional<result<shard_record, error>>> records(shards);
  std::atomic<std::uint32_t> next{0};
  const auto work = [&] {
    for (std::uint32_t k; (k = next.fetch_add(1)) < shards;) {
      auto one = [&]() -> result<shard_record, error> {
        FERRY_TRY_ASSIGN(auto w, shard_writer::create(index, id, k, shards, opt));
        for (const auto& p : plan[k]) FERRY_TRY(w.add_piece(tensors[p.tensor], p.begin, p.count));
        return w.commit();
      };
      try {
        records[k] = one();
      } catch (const std::bad_alloc&) {  // not across the thread's edge
        records[k] = error(errc::io_error, index.string() + ": out of memory");
      }
    }
  };
  const unsigned threads = std::min<unsigned>(shards, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  std::vector<shard_record> done;
  for (auto& r : records) {
    if (!*r) return r->error();
    done.push_back(std::move(**r));
  }
  return commit_set(index, id, shards, done, metadata, opt);
}

}  // namespace ferry::checkpoint
