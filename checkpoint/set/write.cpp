// Writing checkpoint sets (set.h): the planner, shard writers, the index
// and the cleanup of superseded shards.
#include "ferry/checkpoint/set.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "ferry/base/file.h"
#include "ferry/base/random_id.h"
#include "ferry/checkpoint/ferry/layout.h"
#include "ferry/checkpoint/set/internal.h"
#include "ferry/checkpoint/writer.h"
#include "ferry/codec/crc32c.h"

namespace ferry::checkpoint {
namespace {

using detail::piece_record;
using detail::set_manifest;
using detail::set_tensor_record;
using detail::folder_of;
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

// Removes the shard files of `index`'s stem that neither `keep` nor any
// other set index in the folder names (none when one cannot be read), and
// the temporaries of shard files that no live writer holds.
void remove_superseded_shards(const std::filesystem::path& index, const std::vector<shard_entry>& keep) {
  const std::string stem = stem_of(index);
  const std::filesystem::path folder = folder_of(index);
  constexpr std::string_view tmp_mark = ".ferry-tmp.";
  std::set<std::string, std::less<>> named;
  for (const auto& s : keep) named.insert(s.file);
  std::vector<std::filesystem::path> candidates, temporaries;
  bool unreadable_index = false;
  std::error_code ec, stat_ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_shard_name(name, stem)) {
      candidates.push_back(it->path());
    } else if (name.ends_with(".ferry") && !name.starts_with(".") && name != index.filename().string() &&
               !it->is_directory(stat_ec)) {
      // Another index keeps what it names; other .ferry files name nothing.
      if (auto files = detail::set_files(it->path(), {})) {
        named.insert(files->begin(), files->end());
      } else if (files.error().code() != checkpoint_errc::bad_index) {
        unreadable_index = true;
      }
    } else if (name.starts_with(".") && name.find(tmp_mark) != std::string::npos) {
      const std::string target = name.substr(1, name.find(tmp_mark) - 1);
      if (is_shard_name(target, stem)) temporaries.push_back(folder / target);
    }
  }
  // A folder not read to its end may hold an index naming any candidate.
  if (ec) return;
  for (const auto& p : candidates) {
    if (!unreadable_index && !named.contains(p.filename().string())) std::filesystem::remove(p, ec);
  }
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

std::string new_save_id() { return base::random_hex_id(); }

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

namespace {

shard_entry entry_of(const shard_info& s) {
  return {s.file, s.size, s.manifest_crc32c, static_cast<std::uint8_t>(s.order), s.rank, s.save_id, s.world};
}

}  // namespace

// Shard 0 is the record's own; the others hold its kept pieces.
std::vector<std::byte> shard_record::encode() const {
  set_manifest m;
  m.shards.push_back(entry_of(*this));
  for (const auto& p : pieces) {
    m.tensors.push_back({p.name, codec::code(p.dtype), p.shape, {{0, p.begin, p.count}}, false});
  }
  std::map<std::string_view, std::uint32_t> shard_of;
  for (const auto& k : kept) {
    const auto [it, fresh] = shard_of.emplace(k.shard.file, static_cast<std::uint32_t>(m.shards.size()));
    if (fresh) m.shards.push_back(entry_of(k.shard));
    m.tensors.push_back({k.p.name, codec::code(k.p.dtype), k.p.shape, {{it->second, k.p.begin, k.p.count}}, false});
  }
  auto bytes = graph::write(m, detail::set_options({}, wire::host_order));
  return bytes ? std::move(*bytes) : std::vector<std::byte>{};
}

result<shard_record, error> shard_record::decode(std::span<const std::byte> bytes, const limits& lim) {
  auto m = graph::read<set_manifest>(bytes, detail::set_options(lim, wire::host_order));
  if (!m) return error(m.error(), "shard record");
  const auto fail = [](std::string_view what) { return error(checkpoint_errc::bad_index, "shard record: " + std::string(what)); };
  if (m->shards.empty()) return fail("no shard");
  std::vector<shard_info> shards;
  for (auto& s : m->shards) {
    if (s.order > 1) return error(errc::bad_byte_order, "shard record");
    shards.push_back({std::move(s.file), s.size, s.manifest_crc32c, static_cast<wire::byte_order>(s.order), s.rank,
                      std::move(s.save_id), s.world});
  }
  if (m->tensors.size() > lim.max_tensors) return error(errc::limit_exceeded, "shard record: tensors");
  shard_record out;
  static_cast<shard_info&>(out) = shards.front();
  for (auto& t : m->tensors) {
    auto dtype = codec::dtype_from_code(t.dtype);
    if (!dtype) return error(dtype.error(), "shard record");
    if (t.pieces.size() != 1 || t.pieces.front().shard >= shards.size()) return fail("a tensor not in one piece");
    const auto& at = t.pieces.front();
    shard_record::piece p{std::move(t.name), *dtype, std::move(t.shape), at.begin, at.count, 0};
    if (at.shard == 0) {
      out.pieces.push_back(std::move(p));
    } else {
      out.kept.push_back({shards[at.shard], std::move(p)});
    }
  }
  return out;
}

struct shard_writer::state {
  explicit state(writer opened) : w(std::move(opened)) {}
  writer w;
  std::string file;
  std::uint32_t rank = 0;
  wire::byte_order order = wire::host_order;
  std::map<std::pair<const std::byte*, std::size_t>, storage_id> written;
  std::vector<shard_record::piece> pieces;
  std::vector<std::byte> gathered;
  std::string save_id;
  std::uint32_t world = 0;
  std::filesystem::path folder;
  // Incremental saves (base_on): the previous save's pieces by name, the
  // pieces kept, and the earlier shards opened to confirm (null: unusable).
  bool track = false;
  std::map<std::string, shard_record::kept_piece, std::less<>> previous;
  std::vector<shard_record::kept_piece> kept;
  std::map<std::string, std::unique_ptr<reader>, std::less<>> earlier;

  const reader* earlier_shard(const shard_info& info);
  bool unchanged(std::string_view name, codec::dtype dtype, std::span<const std::uint64_t> shape,
                 std::uint64_t begin, std::uint64_t count, std::span<const std::byte> elements, std::uint32_t& crc);
};

// The earlier shard `info` names, if it is still the file the index
// recorded.
const reader* shard_writer::state::earlier_shard(const shard_info& info) {
  const auto it = earlier.find(info.file);
  if (it != earlier.end()) return it->second.get();
  std::unique_ptr<reader> r;
  if (auto o = open(folder / info.file)) {
    const auto id = o->metadata().find("ferry.set.save_id");
    if (o->format() == file_format::ferry && id != o->metadata().end() && id->second == info.save_id &&
        o->file_size() == info.size && o->manifest_crc32c() == info.manifest_crc32c) {
      r = std::make_unique<reader>(std::move(*o));
    }
  }
  return earlier.emplace(info.file, std::move(r)).first->second.get();
}

// Whether the piece can be kept from the previous save: its CRC32C (set
// in `crc` whenever changes are tracked) and description match, and the
// earlier shard's copy has the same bytes. Anything unreadable there
// means "write it again".
bool shard_writer::state::unchanged(std::string_view name, codec::dtype dtype, std::span<const std::uint64_t> shape,
                                    std::uint64_t begin, std::uint64_t count, std::span<const std::byte> elements,
                                    std::uint32_t& crc) {
  if (!track) return false;
  crc = codec::crc32c(elements);
  const auto it = previous.find(name);
  if (it == previous.end()) return false;
  const auto& [info, p] = it->second;
  if (p.dtype != dtype || !std::equal(p.shape.begin(), p.shape.end(), shape.begin(), shape.end()) ||
      p.begin != begin || p.count != count || p.crc32c != crc) {
    return false;
  }
  const reader* r = earlier_shard(info);
  const tensor_info* t = r == nullptr ? nullptr : r->find(name);
  if (t == nullptr || t->dtype != dtype || t->numel() != count) return false;
  auto stored = r->get(*t);
  if (!stored) return false;
  std::vector<std::byte> copy;
  auto bytes = stored->info().is_contiguous() ? stored->bytes() : std::span<const std::byte>(copy = stored->contiguous_copy());
  if (bytes.size() != elements.size() || std::memcmp(bytes.data(), elements.data(), bytes.size()) != 0) return false;
  kept.push_back({info, p});
  return true;
}

void shard_writer::base_on(const shard_record* previous) {
  state& s = *s_;
  s.track = true;
  s.previous.clear();
  if (previous == nullptr) return;
  for (const auto& p : previous->pieces) s.previous.emplace(p.name, shard_record::kept_piece{*previous, p});
  for (const auto& k : previous->kept) s.previous.emplace(k.p.name, k);
}

shard_writer::shard_writer(std::unique_ptr<state> s) noexcept : s_(std::move(s)) {}
shard_writer::shard_writer(shard_writer&&) noexcept = default;
shard_writer& shard_writer::operator=(shard_writer&&) noexcept = default;
shard_writer::~shard_writer() = default;

result<shard_writer, error> shard_writer::create(const std::filesystem::path& index, std::string_view save_id,
                                                 std::uint32_t rank, std::uint32_t world, const write_options& opt) {
  if (!detail::valid_save_id(save_id)) return error(errc::bad_value, index.string() + ": save id " + quote(save_id));
  if (rank >= world) {
    return error(errc::bad_value, index.string() + ": rank " + std::to_string(rank) + " of " + std::to_string(world));
  }
  const auto path = shard_path(index, save_id, rank, world);
  FERRY_TRY_ASSIGN(auto w, writer::create(path, opt));
  FERRY_TRY(w.set_metadata("ferry.set.save_id", std::string(save_id)));
  FERRY_TRY(w.set_metadata("ferry.set.rank", std::to_string(rank)));
  auto s = std::make_unique<state>(std::move(w));
  s->file = path.filename().string();
  s->rank = rank;
  s->order = opt.order;
  s->save_id = std::string(save_id);
  s->world = world;
  s->folder = folder_of(index);
  return shard_writer(std::move(s));
}

result<void, error> shard_writer::add(const tensor_ref& t) {
  state& s = *s_;
  const std::uint64_t n = numel_of(t.shape);
  std::uint32_t crc = 0;
  if (s.track) {
    std::vector<std::uint64_t> strides(t.strides.begin(), t.strides.end());
    if (strides.empty()) strides = contiguous_strides(t.shape);
    if (auto r = check_view(t.dtype, t.shape, strides, t.offset, t.storage.size(), SIZE_MAX); !r) {
      return error(r.error(), detail::tensor_context(s.file, t.name));
    }
    const std::size_t width = codec::size_of(t.dtype);
    std::span<const std::byte> elements;
    if (strides == contiguous_strides(t.shape)) {
      elements = n == 0 ? std::span<const std::byte>() : t.storage.subspan(static_cast<std::size_t>(t.offset * width),
                                                                          static_cast<std::size_t>(n * width));
    } else {
      s.gathered = gather(t);
      elements = s.gathered;
    }
    if (s.unchanged(t.name, t.dtype, t.shape, 0, n, elements, crc)) return {};
  }
  const auto key = std::make_pair(t.storage.data(), t.storage.size());
  const auto it = t.storage.empty() ? s.written.end() : s.written.find(key);
  if (it != s.written.end()) {
    FERRY_TRY(s.w.add(t, it->second));
  } else {
    FERRY_TRY_ASSIGN(const auto id, s.w.add(t));
    if (!t.storage.empty()) s.written.emplace(key, id);
  }
  s.pieces.push_back({std::string(t.name), t.dtype, {t.shape.begin(), t.shape.end()}, 0, n, crc});
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
  std::uint32_t crc = 0;
  if (s.unchanged(t.name, t.dtype, t.shape, begin, count, bytes, crc)) return {};
  const std::uint64_t shape[] = {count};
  FERRY_TRY(s.w.add({.name = t.name, .dtype = t.dtype, .shape = shape, .strides = {}, .offset = 0, .storage = bytes}));
  s.pieces.push_back({std::string(t.name), t.dtype, {t.shape.begin(), t.shape.end()}, begin, count, crc});
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
  std::uint32_t crc = 0;
  if (s.unchanged(name, dtype, shape, begin, count, elements, crc)) return {};
  const std::uint64_t piece_shape[] = {count};
  FERRY_TRY(s.w.add({.name = name, .dtype = dtype, .shape = piece_shape, .strides = {}, .offset = 0, .storage = elements}));
  s.pieces.push_back({std::string(name), dtype, {shape.begin(), shape.end()}, begin, count, crc});
  return {};
}

result<shard_record, error> shard_writer::commit() {
  state& s = *s_;
  FERRY_TRY(s.w.commit());
  shard_record r;
  static_cast<shard_info&>(r) = {s.file, s.w.bytes_written(), s.w.manifest_crc32c(), s.order, s.rank, s.save_id, s.world};
  r.pieces = std::move(s.pieces);
  r.kept = std::move(s.kept);
  return r;
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
  // Own shards first, by rank, then the earlier ones kept pieces lie in.
  std::map<std::string_view, std::uint32_t> shard_of;
  for (const shard_record* r : by_rank) {
    shard_entry e = entry_of(*r);
    if (e.save_id.empty()) e.save_id = std::string(save_id);
    if (e.world == 0) e.world = world;
    shard_of.emplace(r->file, static_cast<std::uint32_t>(m.shards.size()));
    m.shards.push_back(std::move(e));
  }
  for (const shard_record* r : by_rank) {
    for (const auto& k : r->kept) {
      const auto [it, fresh] = shard_of.emplace(k.shard.file, static_cast<std::uint32_t>(m.shards.size()));
      if (fresh) {
        m.shards.push_back(entry_of(k.shard));
      } else if (m.shards[it->second].size != k.shard.size ||
                 m.shards[it->second].manifest_crc32c != k.shard.manifest_crc32c) {
        return error(checkpoint_errc::bad_shard, where + ": shard " + quote(k.shard.file) + " recorded twice, differently");
      }
    }
  }
  for (const shard_record* r : by_rank) {
    std::vector<std::pair<std::uint32_t, const shard_record::piece*>> all;
    for (const auto& p : r->pieces) all.emplace_back(shard_of.at(r->file), &p);
    for (const auto& k : r->kept) all.emplace_back(shard_of.at(k.shard.file), &k.p);
    for (const auto& [k, pp] : all) {
      const auto& p = *pp;
      const auto [it, fresh] = tensor_of.emplace(p.name, m.tensors.size());
      if (fresh) {
        m.tensors.push_back({p.name, codec::code(p.dtype), p.shape, {}, false});
      } else {
        const auto& t = m.tensors[it->second];
        if (t.dtype != codec::code(p.dtype) || t.shape != p.shape) {
          return error(checkpoint_errc::bad_shard,
                       detail::tensor_context(where + ": shard " + quote(m.shards[k].file), p.name) +
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
