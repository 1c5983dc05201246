// The reader: a checkpoint opened (its format told and parsed through the
// format table, detail/formats.h), its storages fetched through the mapped
// file (detail/mapped_file.h) or the format's storage_source
// (detail/parsed.h), checked (detail/checksum.h), converted to host order
// and cached while a tensor holds them. Names no format.
#include "ferry/checkpoint/reader.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/checkpoint/detail/checksum.h"
#include "ferry/checkpoint/detail/formats.h"
#include "ferry/checkpoint/detail/fresh_storage.h"
#include "ferry/checkpoint/detail/mapped_file.h"
#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/wire/bulk.h"

namespace ferry::checkpoint {
namespace {

using detail::file_error;
using detail::fresh_storage;
using detail::mapped_file;
using detail::mapping;
using detail::parsed_file;

// A storage's bytes as a view of the file's window: read-only, or of a
// copy-on-write window, which mutable_bytes() exposes, when the reader was
// opened with copy_on_write.
class mapped_storage final : public storage_buffer {
 public:
  mapped_storage(detail::mapped_view v, bool expose) noexcept : owner_(std::move(v.owner)) {
    bytes_ = v.bytes;
    if (expose) mutable_ = v.bytes;
  }

 private:
  std::shared_ptr<const mapping> owner_;
};

// A storage read into memory (no mapping, an unaligned record, or a
// range a 32-bit host cannot map).
class copied_storage final : public storage_buffer {
 public:
  copied_storage(std::vector<std::byte> data, bool expose) noexcept : data_(std::move(data)) {
    bytes_ = data_;
    if (expose) mutable_ = data_;
  }
  [[nodiscard]] std::span<std::byte> writable() noexcept { return data_; }

 private:
  std::vector<std::byte> data_;
};

}  // namespace

struct reader::state {
  std::filesystem::path path;
  read_options opt;
  std::optional<mapped_file> mapped;  // empty: a directory, whose format's source reads it
  parsed_file file;
  std::unordered_map<std::string_view, std::size_t> by_name;
  // The tensors over each storage, in file order: storage i's are
  // over_storage[over_start[i] .. over_start[i + 1]).
  std::vector<std::uint32_t> over_start, over_storage;
  std::vector<std::uint32_t> first_tensor_of;  // per storage, for error messages

  mutable std::mutex mu;
  mutable std::vector<std::weak_ptr<const storage_buffer>> cache;
  // Copy-on-write: every storage handed out, kept until the reader closes
  // (a tensor fetched again shows what was written to it).
  mutable std::vector<std::shared_ptr<const storage_buffer>> kept;
  mutable std::vector<bool> verified;
  mutable std::uint64_t loaded = 0;

  state(const std::filesystem::path& p, const read_options& o, std::optional<mapped_file> m, parsed_file f)
      : path(p), opt(o), mapped(std::move(m)), file(std::move(f)) {
    first_tensor_of.assign(file.storages.size(), UINT32_MAX);
    over_start.assign(file.storages.size() + 1, 0);
    by_name.reserve(file.tensors.size());
    for (std::size_t i = 0; i < file.tensors.size(); ++i) {
      by_name.emplace(file.tensors[i].name, i);
      auto& first = first_tensor_of[file.tensors[i].storage];
      if (first == UINT32_MAX) first = static_cast<std::uint32_t>(i);
      ++over_start[file.tensors[i].storage + 1];
    }
    for (std::size_t i = 0; i < file.storages.size(); ++i) over_start[i + 1] += over_start[i];
    over_storage.resize(file.tensors.size());
    std::vector<std::uint32_t> at(over_start.begin(), over_start.end() - 1);
    for (std::size_t i = 0; i < file.tensors.size(); ++i) {
      over_storage[at[file.tensors[i].storage]++] = static_cast<std::uint32_t>(i);
    }
    cache.resize(file.storages.size());
    verified.assign(file.storages.size(), false);
  }

  // The reader of a checkpoint opened and checked.
  static result<reader, error> make(detail::source s, const read_options& opt, bool shard) {
    FERRY_TRY_ASSIGN(auto parsed, detail::parse(s, opt, shard));
    const std::filesystem::path path = s.path();
    return reader(std::make_unique<state>(path, opt, std::move(s).take_file(), std::move(parsed)));
  }

  error storage_error(std::uint32_t i, error_code c, int sys_errno = 0) const {
    if (i == UINT32_MAX) return file_error(path, c, sys_errno);
    const std::uint32_t t = first_tensor_of[i];
    if (t == UINT32_MAX) return file_error(path, c, sys_errno, "storage " + std::to_string(i));
    return error(c, detail::tensor_context(path.string(), file.tensors[t].name), sys_errno);
  }

  // Maps (or reads) storage i, checks its checksums if `check` (the first
  // fetch) and converts it to host order, with at most `threads` threads
  // (read_stored). Touches no shared state: threads may load storages at
  // once.
  result<std::shared_ptr<const storage_buffer>, error> load(std::uint32_t i, bool check, unsigned threads) const {
    const storage_info& st = file.storages[i];
    if (st.nbytes > SIZE_MAX / 2) return storage_error(i, checkpoint_errc::storage_too_large);
    if (file.source) {  // the format's own way, where it has one
      const std::function<error(error_code, int)> fail = [&](error_code c, int e) { return storage_error(i, c, e); };
      const detail::load_request r{i, check, opt, mapped ? &*mapped : nullptr, path, fail};
      FERRY_TRY_ASSIGN(auto own, file.source->load(file, r));
      if (own) return own;
    }
    if (!mapped) return storage_error(i, checkpoint_errc::not_a_checkpoint);  // a directory's source must load it
    const auto n = static_cast<std::size_t>(st.nbytes);
    // The unit of byte order, and of alignment: an element, or each part of
    // a complex one.
    const std::size_t width = codec::order_width(st.dtype);
    const wire::byte_order order = st.order.value_or(file.order);
    // Storages of blocks (the source's block_bytes()) swap field by field
    // rather than as elements.
    const bool swap = order != wire::host_order && (width > 1 || block_bytes(i) > 0);
    // A storage that does not start on its element's alignment in the file
    // (a zip record placed by another tool) is copied to aligned memory:
    // a mapping starts where the page does.
    const bool aligned = st.offset % width == 0;
    const auto checks = detail::checksums_on_fetch(st, opt.checks, check);
    std::shared_ptr<storage_buffer> buf;
    if (n > 0 && swap) {
      // Another byte order: read into fresh memory and converted there
      // (read_stored). Converting from a mapping of the file instead cost a
      // page fault per 4 KiB read: a 1 GiB storage took 658 ms, 174 ms read
      // (one thread), 115 ms with one thread per core (2-core VM,
      // bench/formats_bench); converting in place in a private mapping
      // costs a copy-on-write fault a page, worse still.
      std::shared_ptr<fresh_storage> o;
      try {
        o = std::make_shared<fresh_storage>(n, opt.copy_on_write);
      } catch (const std::bad_alloc&) {
        return storage_error(i, checkpoint_errc::out_of_memory);
      }
      if (auto r = read_stored(i, o->writable(), checks, threads); !r) return r.error();
      return std::shared_ptr<const storage_buffer>(std::move(o));
    }
    // A view of the file's window (copy-on-write: of its private window).
    std::span<const std::byte> stored;
    int map_errno = 0;
    if (n > 0 && aligned) {
      if (auto v = mapped->view(st.offset, n, map_errno, !checks.any(), opt.copy_on_write)) {
        stored = v.bytes;
        buf = std::make_shared<mapped_storage>(std::move(v), opt.copy_on_write);
      }
    }
    // Otherwise read: empty, unaligned, beyond 4 GiB on 32-bit, a file
    // system without mmap, or no mapping to be had (the process's budget
    // spent, the address space full).
    if (!buf) {
      std::shared_ptr<copied_storage> o;
      try {
        o = std::make_shared<copied_storage>(std::vector<std::byte>(n), opt.copy_on_write);
      } catch (const std::bad_alloc&) {
        return storage_error(i, checkpoint_errc::out_of_memory);
      }
      int sys_errno = 0;
      if (auto r = mapped->read(st.offset, o->writable(), sys_errno); !r) return storage_error(i, r.error(), sys_errno);
      stored = o->writable();
      buf = std::move(o);
    }
    if (auto r = detail::check_storage(stored, st, checks); !r) return storage_error(i, r.error());
    return std::shared_ptr<const storage_buffer>(std::move(buf));
  }

  // Reads storage i whole into `out` with pread, in pieces of about 1 MiB
  // (whole elements, or whole blocks: their fields swap one by one), each
  // checksummed under `checks` and converted to host order while it is in
  // the cache. From 64 MiB on, without checksums to chain, up to
  // `threads` threads (0: one per core, at most 8) take a share of the
  // pieces (a file may hold one large array). A storage not in the page cache
  // is asked for whole first (posix_fadvise), as a mapping is.
  result<void, error> read_stored(std::uint32_t i, std::span<std::byte> out, detail::fetch_checksums checks,
                                  unsigned threads = 0) const {
    const storage_info& st = file.storages[i];
    mapped->will_need(st.offset, out.size());
    const std::size_t width = codec::order_width(st.dtype);
    const wire::byte_order order = st.order.value_or(file.order);
    const std::size_t block = block_bytes(i);
    const std::size_t unit = block > 0 ? block : codec::size_of(st.dtype);
    const std::size_t piece = std::max<std::size_t>((std::size_t{1} << 20) / unit, 1) * unit;
    std::uint32_t crc32c = 0, zip_crc32 = 0;
    // Pieces [first, last) of `out`; the checksums only from one thread.
    const auto read_pieces = [&](std::size_t first, std::size_t last) -> result<void, error> {
      for (std::size_t k = first; k < last; ++k) {
        const std::size_t at = k * piece;
        const auto chunk = out.subspan(at, std::min(piece, out.size() - at));
        int sys_errno = 0;
        if (auto r = mapped->read(st.offset + at, chunk, sys_errno); !r) return storage_error(i, r.error(), sys_errno);
        if (checks.crc32c) crc32c = detail::checksum_extend(detail::checksum_kind::crc32c, crc32c, chunk);
        if (checks.zip_crc32) zip_crc32 = detail::checksum_extend(detail::checksum_kind::zip_crc32, zip_crc32, chunk);
        if (order == wire::host_order) continue;
        if (block > 0) file.source->blocks_to_host(i, chunk, order);
        else if (width > 1) wire::convert_in_place(chunk, width, order, wire::host_order);
      }
      return {};
    };
    const std::size_t pieces = (out.size() + piece - 1) / piece;
    if (threads == 0) threads = std::max(1u, std::min(std::thread::hardware_concurrency(), 8u));
    const std::size_t shares = checks.any() || out.size() < (std::size_t{64} << 20) ? 1 : threads;
    std::vector<std::optional<error>> errors(shares);
    std::vector<std::thread> pool;
    pool.reserve(shares - 1);
    const auto share = [&](std::size_t k) noexcept {
      try {
        auto r = read_pieces(pieces * k / shares, pieces * (k + 1) / shares);
        if (!r) errors[k] = std::move(r.error());
      } catch (const std::bad_alloc&) {  // an error's text: not across the thread's edge
        errors[k] = error(checkpoint_errc::out_of_memory);
      }
    };
    std::size_t started = 1;
    try {
      for (; started < shares; ++started) pool.emplace_back(share, started);
    } catch (const std::system_error&) {  // no thread to spare: this one reads those shares too
    }
    share(0);
    for (std::size_t k = started; k < shares; ++k) share(k);
    for (auto& t : pool) t.join();
    for (auto& e : errors) {
      if (e) return std::move(*e);
    }
    if (checks.crc32c && crc32c != *st.crc32c) return storage_error(i, errc::checksum_mismatch);
    if (checks.zip_crc32 && zip_crc32 != *st.crc32) return storage_error(i, checkpoint_errc::crc32_mismatch);
    return {};
  }

  // The bytes of storage i's blocks, when it holds blocks (0: elements).
  std::size_t block_bytes(std::uint32_t i) const noexcept { return file.source ? file.source->block_bytes(i) : 0; }

  // Whether [from, to) of the file is zero (padding): through the file's
  // window, else read in small pieces. Errors name storage i (UINT32_MAX:
  // the file). The piece is not zeroed first: it was 64 KiB cleared per
  // storage, most of verify()'s time for a file of 2^20 small tensors.
  result<void, error> check_zero(std::uint64_t from, std::uint64_t to, std::uint32_t i) const {
    const auto zero = [](std::span<const std::byte> b) {
      return std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; });
    };
    constexpr std::size_t piece_bytes = 64 * 1024;
    while (from < to) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(to - from, piece_bytes));
      int map_errno = 0;
      bool ok = false;
      if (const auto v = mapped->view(from, n, map_errno, false)) {
        ok = zero(v.bytes);
      } else {
        std::array<std::byte, piece_bytes> piece;  // NOLINT: filled by the read
        int sys_errno = 0;
        if (auto r = mapped->read(from, std::span(piece).first(n), sys_errno); !r) {
          return storage_error(i, r.error(), sys_errno);
        }
        ok = zero(std::span(piece).first(n));
      }
      if (!ok) return storage_error(i, checkpoint_errc::bad_padding);
      from += n;
    }
    return {};
  }

  // Storage i in host order, from the cache or loaded (its CRC checked the
  // first time). Concurrent fetches of one storage end with one buffer.
  result<std::shared_ptr<const storage_buffer>, error> fetch(std::uint32_t i, unsigned threads = 0) const {
    bool check = false;
    {
      std::lock_guard lock(mu);
      if (auto cached = cache[i].lock()) return cached;
      check = !verified[i];
    }
    FERRY_TRY_ASSIGN(auto buf, load(i, check, threads));
    std::lock_guard lock(mu);
    if (auto cached = cache[i].lock()) return cached;  // another thread won
    cache[i] = buf;
    if (opt.copy_on_write) kept.push_back(buf);
    verified[i] = true;
    loaded += file.storages[i].nbytes;
    return buf;
  }
};

reader::reader(std::unique_ptr<state> s) noexcept : s_(std::move(s)) {}
reader::reader(reader&&) noexcept = default;
reader& reader::operator=(reader&&) noexcept = default;
reader::~reader() = default;

result<reader, error> reader::open(const std::filesystem::path& path, const limits& lim) {
  read_options opt;
  opt.lim = lim;
  return open(path, opt);
}

result<reader, error> reader::open(const std::filesystem::path& path, const read_options& opt) {
  FERRY_TRY_ASSIGN(auto s, detail::source::open(path));
  return state::make(std::move(s), opt, false);
}

result<reader, error> detail::open_shard(const std::filesystem::path& path, const read_options& opt) {
  FERRY_TRY_ASSIGN(auto s, detail::source::open(path));
  return reader::state::make(std::move(s), opt, true);
}

const detail::parsed_file& detail::parsed_of(const reader& r) noexcept { return r.s_->file; }

const std::filesystem::path& reader::path() const noexcept { return s_->path; }
file_format reader::format() const noexcept { return s_->file.format; }
wire::byte_order reader::order() const noexcept { return s_->file.order; }
std::uint32_t reader::alignment() const noexcept { return s_->file.alignment; }
std::uint64_t reader::file_size() const noexcept {
  if (s_->file.source) {
    if (const auto n = s_->file.source->total_size()) return *n;
  }
  return s_->mapped ? s_->mapped->size() : 0;
}
std::uint32_t reader::manifest_crc32c() const noexcept { return s_->file.manifest_crc32c; }
std::span<const reader> reader::shards() const noexcept {
  return s_->file.source ? s_->file.source->shards() : std::span<const reader>();
}
std::span<const tensor_info> reader::tensors() const noexcept { return s_->file.tensors; }
std::span<const storage_info> reader::storages() const noexcept { return s_->file.storages; }
const std::map<std::string, std::string>& reader::metadata() const noexcept { return s_->file.metadata; }

const tensor_info* reader::find(std::string_view name) const noexcept {
  const auto it = s_->by_name.find(name);
  return it == s_->by_name.end() ? nullptr : &s_->file.tensors[it->second];
}

std::span<const std::uint32_t> reader::tensors_over(std::uint32_t storage) const noexcept {
  return std::span(s_->over_storage).subspan(s_->over_start[storage], s_->over_start[storage + 1] - s_->over_start[storage]);
}

std::vector<std::string> reader::shared_with(const tensor_info& t) const {
  std::vector<std::string> out;
  for (const std::uint32_t k : tensors_over(t.storage)) {
    if (s_->file.tensors[k].name != t.name) out.push_back(s_->file.tensors[k].name);
  }
  return out;
}

result<tensor, error> reader::get(std::string_view name) const {
  const tensor_info* t = find(name);
  if (t == nullptr) return error(checkpoint_errc::tensor_not_found, detail::tensor_context(s_->path.string(), name));
  return get(*t);
}

result<tensor, error> reader::get(const tensor_info& t) const {
  // Its elements must be addressable here: a view with stride 0 can describe
  // far more than its storage holds, and gathering it must not wrap size_t.
  if constexpr (sizeof(std::size_t) < sizeof(std::uint64_t)) {
    if (t.nbytes() > SIZE_MAX) {
      return error(checkpoint_errc::storage_too_large, detail::tensor_context(s_->path.string(), t.name));
    }
  }
  FERRY_TRY_ASSIGN(auto buf, s_->fetch(t.storage));
  return tensor(t, std::move(buf));
}

result<std::vector<tensor>, error> reader::get_all(unsigned threads) const {
  const auto& infos = s_->file.tensors;
  const std::size_t n = s_->file.storages.size();
  std::vector<std::shared_ptr<const storage_buffer>> buffers(n);
  std::vector<std::optional<error>> errors(n);
  std::atomic<std::size_t> next{0};
  // `threads` in all: as many storages at once as there are to load, and
  // the rest of the budget to each (a file of one foreign-order array is one storage).
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const unsigned budget = threads;
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(n, 1)));
  const unsigned inner = std::max(1u, budget / threads);
  const auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < n;) {
      if (s_->first_tensor_of[i] == UINT32_MAX) continue;  // no tensor views it
      try {
        auto b = s_->fetch(static_cast<std::uint32_t>(i), inner);
        if (b) buffers[i] = std::move(*b);
        else errors[i] = std::move(b.error());
      } catch (const std::bad_alloc&) {  // not across the thread's edge
        errors[i] = s_->storage_error(static_cast<std::uint32_t>(i), checkpoint_errc::out_of_memory);
      }
    }
  };
  std::vector<std::thread> pool;
  try {
    for (unsigned k = 1; k < threads; ++k) pool.emplace_back(work);
  } catch (const std::system_error&) {  // no thread to be had: fewer do the work
  }
  work();
  for (auto& t : pool) t.join();
  // The first bad storage in file order names its first tensor.
  for (auto& e : errors) {
    if (e) return std::move(*e);
  }
  // Every storage is loaded and held by `buffers`: get() finds it cached.
  std::vector<tensor> out;
  out.reserve(infos.size());
  for (const auto& t : infos) {
    FERRY_TRY_ASSIGN(auto one, get(t));
    out.push_back(std::move(one));
  }
  return out;
}

result<void, error> reader::verify(const std::function<void(std::uint64_t)>& progress) const {
  const parsed_file& file = s_->file;
  if (file.source) {  // the format's own checks, where it has them
    if (auto own = file.source->verify(file, s_->mapped ? &*s_->mapped : nullptr, s_->path, progress)) {
      return std::move(*own);
    }
  }
  const auto& st = file.storages;
  if (!s_->mapped) return file_error(s_->path, checkpoint_errc::not_a_checkpoint, 0, "no file to verify");
  const mapped_file& mapped = *s_->mapped;
  std::uint64_t done = 0;
  const auto report = [&](std::uint64_t n) {
    if (progress) progress(done + n);
  };
  std::uint64_t end = file.data_begin;
  for (std::uint32_t i = 0; i < st.size(); ++i) {
    if (file.zero_gaps) {
      FERRY_TRY(s_->check_zero(end, st[i].offset, i));
    }
    const auto fail = [&](error_code c, int sys_errno) { return s_->storage_error(i, c, sys_errno); };
    if (const auto sum = detail::checksum_of(st[i])) {
      FERRY_TRY_ASSIGN(const auto crc,
                       detail::file_checksum(mapped, st[i].offset, st[i].nbytes, sum->kind, fail, report));
      if (crc != sum->value) return s_->storage_error(i, sum->mismatch);
      if (sum->kind == detail::checksum_kind::crc32c) {  // a fetch need not check it again
        std::lock_guard lock(s_->mu);
        s_->verified[i] = true;
      }
    }
    end = st[i].offset + st[i].nbytes;
    done += st[i].nbytes;
    if (progress) progress(done);
  }
  if (file.zero_gaps) {
    FERRY_TRY(s_->check_zero(end, file.data_end, st.empty() ? UINT32_MAX : static_cast<std::uint32_t>(st.size() - 1)));
  }
  // The zip records that are not storages (a pickle, a version record, ...).
  for (const auto& r : file.other_records) {
    const auto fail = [&](error_code c, int sys_errno) {
      return file_error(s_->path, c, sys_errno, "record " + quote(r.name));
    };
    if (r.crc32 == 0) continue;  // saved without CRC-32
    FERRY_TRY_ASSIGN(const auto crc,
                     detail::file_checksum(mapped, r.data_offset, r.size, detail::checksum_kind::zip_crc32, fail, {}));
    if (crc != r.crc32) return fail(checkpoint_errc::crc32_mismatch, 0);
  }
  return {};
}

result<void, error> reader::read_into(const tensor_info& t, std::span<std::byte> out) const {
  const auto fail = [&](error_code c) { return error(c, detail::tensor_context(s_->path.string(), t.name)); };
  if (!t.is_contiguous() || out.size() != t.nbytes()) return fail(errc::bad_value);
  const parsed_file& file = s_->file;
  if (file.source) {
    if (auto own = file.source->read_into(t, out)) return std::move(*own);
  }
  const storage_info& st = file.storages[t.storage];
  // Straight into `out` when the stored bytes are the elements and a
  // CRC32C (or no checksum) covers them: a zip CRC-32 is checked on get().
  if (t.offset != 0 || out.size() != st.nbytes || st.crc32 || !s_->mapped ||
      (file.source && !file.source->direct_reads())) {
    FERRY_TRY_ASSIGN(auto whole, get(t));
    if (!out.empty()) std::memcpy(out.data(), whole.bytes().data(), out.size());
    return {};
  }
  detail::fetch_checksums checks;
  checks.crc32c = st.crc32c.has_value();
  FERRY_TRY(s_->read_stored(t.storage, out, checks));
  std::lock_guard lock(s_->mu);
  s_->verified[t.storage] = true;
  s_->loaded += st.nbytes;
  return {};
}

std::uint64_t reader::bytes_loaded() const noexcept {
  std::lock_guard lock(s_->mu);
  return s_->loaded;
}

}  // namespace ferry::checkpoint
