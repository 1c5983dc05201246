// The reader: a checkpoint opened (its format told by detect_format(),
// detail/detect.h), its storages fetched through the mapped file
// (detail/mapped_file.h), checked (detail/checksum.h), converted to host
// order and cached while a tensor holds them.
#include "ferry/checkpoint/reader.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
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
#include "ferry/checkpoint/detail/detect.h"
#include "ferry/checkpoint/detail/gguf.h"
#include "ferry/checkpoint/detail/layout.h"
#include "ferry/checkpoint/detail/mapped_file.h"
#include "ferry/checkpoint/detail/npy.h"
#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/detail/set.h"
#include "ferry/codec/crc32c.h"
#include "ferry/wire/bulk.h"
#include "ferry/wire/cursor.h"

namespace ferry::checkpoint {
namespace {

using detail::file_error;
using detail::head_format;
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

// Memory a storage is written into whole (a deflated record inflated, a
// foreign-order storage converted), allocated without being zeroed: pages
// are committed only as they are written, so a deflated stream that ends
// short of its declared size costs only what it produced. From 2 MiB on it
// is aligned to 2 MiB and offered transparent huge pages (as NumPy does for
// its arrays): a 4 KiB page fault each, on a VM, cost more than converting
// the bytes (formats_bench, swapped .npy: 1.0 s for 256 MiB before).
class fresh_storage final : public storage_buffer {
 public:
  fresh_storage(std::size_t n, bool expose) : data_(allocate(n)) {
    bytes_ = {data_.get(), n};
    if (expose) mutable_ = {data_.get(), n};
  }
  [[nodiscard]] std::span<std::byte> writable() noexcept { return {data_.get(), bytes_.size()}; }

 private:
  static constexpr std::size_t huge = std::size_t{2} << 20;
  struct release {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  static std::unique_ptr<std::byte, release> allocate(std::size_t n) {
    // aligned_alloc wants a size that is a multiple of the alignment;
    // malloc's own alignment suits every element below 2 MiB.
    const std::size_t size = n < huge ? std::max<std::size_t>(n, 1) : (n + huge - 1) / huge * huge;
    auto* p = static_cast<std::byte*>(n < huge ? std::malloc(size) : std::aligned_alloc(huge, size));
    if (p == nullptr) throw std::bad_alloc();
    if (n >= huge) ::madvise(p, size, MADV_HUGEPAGE);  // advice only: refused where THP is off
    return std::unique_ptr<std::byte, release>(p);
  }
  std::unique_ptr<std::byte, release> data_;
};

// A file opened and told apart by its first bytes.
struct sniffed {
  mapped_file file;
  std::array<std::byte, header_size> head{};  // the file's first bytes (all of it when shorter)
  head_format format = head_format::unknown;
};

result<sniffed, error> sniff(const std::filesystem::path& path) {
  FERRY_TRY_ASSIGN(auto file, mapped_file::open(path));
  sniffed s{std::move(file)};
  const auto have = static_cast<std::size_t>(std::min<std::uint64_t>(s.file.size(), header_size));
  int sys_errno = 0;
  if (auto r = s.file.read(0, std::span(s.head).first(have), sys_errno); !r) return file_error(path, r.error(), sys_errno);
  s.format = detail::detect_format(std::span(s.head).first(have), s.file.size());
  return s;
}

// `r`, its error's context put after the file's name: for the decoders
// whose contexts do not name the file.
result<parsed_file, error> in_file(const std::filesystem::path& path, result<parsed_file, error> r) {
  if (!r) return r.error().wrap(path.string());
  return r;
}

// A zip_read_at over the file.
detail::zip_read_at zip_reader(const mapped_file& f) {
  return [&f](std::uint64_t offset, std::span<std::byte> out) -> result<void, error> {
    int read_errno = 0;
    if (auto r = f.read(offset, out, read_errno); !r) return error(r.error(), {}, read_errno);
    return {};
  };
}

// The structure of one file, checked by its format's decoder; never a set.
// An index met here is a shard that is an index (one naming itself, or two
// naming each other): refused, so opening a set never recurses. Every
// branch's errors name the file.
result<parsed_file, error> parse_file(const sniffed& s, const std::filesystem::path& path, const read_options& opt) {
  const std::span<const std::byte, header_size> head(s.head);
  switch (s.format) {
    case head_format::ferry_file:
      return detail::parse_ferry(s.file.fd(), s.file.size(), path, head, opt.lim);  // names the file itself
    case head_format::pytorch_zip: {
      // A .pt file or an .npz, told apart by the records' names.
      // (Draft: parse_pytorch reads the directory again.)
      const auto read = zip_reader(s.file);
      auto dir = detail::read_zip_directory(s.file.size(), read, opt.lim);
      if (!dir) return dir.error().wrap(path.string());
      // A zip of no records is an .npz (np.savez() of nothing) when it is
      // nothing but its end records; a .pt file always has records.
      const bool empty_npz = dir->entries.empty() && dir->offset == 0;
      if (empty_npz || (!dir->entries.empty() && detail::looks_like_npz(*dir))) {
        return in_file(path, detail::parse_npz(std::move(*dir), read, opt));
      }
      return in_file(path, detail::parse_pytorch(s.file.size(), read, opt));
    }
    case head_format::npy:
      return in_file(path, detail::parse_npy(s.file.size(), zip_reader(s.file), opt));
    case head_format::gguf:
      return in_file(path, detail::parse_gguf(s.file.size(), zip_reader(s.file), opt));
    case head_format::safetensors:
      // The header's length: the head's first 8 bytes (it holds header_size).
      return in_file(path, detail::parse_safetensors(s.file.fd(), s.file.size(),
                                                     *wire::reader(head).read_le<std::uint64_t>(), opt.lim));
    case head_format::pytorch_legacy:
      return file_error(path, checkpoint_errc::unsupported_pytorch, 0,
                        "a legacy torch.save file (PyTorch before 1.6, not a zip): re-save it with a newer torch.save");
    case head_format::ferry_set_index:
    case head_format::safetensors_index:
      return file_error(path, checkpoint_errc::bad_shard, 0, "a set's index, not a shard");
    case head_format::truncated:
      return file_error(path, errc::truncated);  // too short to be any format
    case head_format::unknown:
      break;
  }
  return file_error(path, checkpoint_errc::not_a_checkpoint);
}

// A set's index, checked, and its shards opened, each by
// detail::open_shard(), which opens no set. Errors name the index.
result<parsed_file, error> parse_set(const sniffed& s, const std::filesystem::path& path, const read_options& opt,
                                     std::unique_ptr<detail::shard_set>& set) {
  parsed_file index;
  if (s.format == head_format::ferry_set_index) {
    FERRY_TRY_ASSIGN(auto container, detail::read_ferry_container(s.file.fd(), s.file.size(), path, s.head, opt.lim));
    FERRY_TRY_ASSIGN(set, detail::open_set(path, std::move(container), opt, index));
    return index;
  }
  // A Hugging Face sharded safetensors index: JSON, read whole.
  if (s.file.size() > opt.lim.max_header_bytes) return file_error(path, errc::limit_exceeded, 0, "index");
  std::string json(static_cast<std::size_t>(s.file.size()), '\0');
  int sys_errno = 0;
  if (auto r = s.file.read(0, std::as_writable_bytes(std::span(json)), sys_errno); !r) {
    return file_error(path, r.error(), sys_errno);
  }
  FERRY_TRY_ASSIGN(set, detail::open_hf_set(path, json, opt, index));
  return index;
}

}  // namespace

struct reader::state {
  std::filesystem::path path;
  read_options opt;
  mapped_file mapped;
  parsed_file file;
  std::unordered_map<std::string_view, std::size_t> by_name;
  // The tensors over each storage, in file order: storage i's are
  // over_storage[over_start[i] .. over_start[i + 1]).
  std::vector<std::uint32_t> over_start, over_storage;
  std::vector<std::uint32_t> first_tensor_of;  // per storage, for error messages
  std::unique_ptr<detail::shard_set> set;      // a set's shards, when `path` is its index

  mutable std::mutex mu;
  mutable std::vector<std::weak_ptr<const storage_buffer>> cache;
  // Copy-on-write: every storage handed out, kept until the reader closes
  // (a tensor fetched again shows what was written to it).
  mutable std::vector<std::shared_ptr<const storage_buffer>> kept;
  mutable std::vector<bool> verified;
  mutable std::uint64_t loaded = 0;

  state(const std::filesystem::path& p, const read_options& o, mapped_file m, parsed_file f,
        std::unique_ptr<detail::shard_set> s)
      : path(p), opt(o), mapped(std::move(m)), file(std::move(f)), set(std::move(s)) {
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

  // The reader of a file opened and checked (for an index: its shards open).
  static reader make(const std::filesystem::path& path, const read_options& opt, mapped_file m, parsed_file f,
                     std::unique_ptr<detail::shard_set> set) {
    return reader(std::make_unique<state>(path, opt, std::move(m), std::move(f), std::move(set)));
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
    if (set) return set->load(i, st.nbytes, opt.copy_on_write);  // the shards check their CRCs
    if (st.nbytes > SIZE_MAX / 2) return storage_error(i, checkpoint_errc::storage_too_large);
    const auto n = static_cast<std::size_t>(st.nbytes);
    // The unit of byte order, and of alignment: an element, or each part of
    // a complex one.
    const std::size_t width = codec::order_width(st.dtype);
    const wire::byte_order order = st.order.value_or(file.order);
    // A GGUF storage of quantized blocks (dtype u8) swaps field by field
    // (ggml_types.h's swap table) rather than as elements.
    const std::optional<ggml_type> blocks = gguf_blocks(i);
    const bool swap = order != wire::host_order && (width > 1 || blocks);
    if (!file.npz.empty()) {
      const detail::npz_source& src = file.npz[i];
      // Stored .npz records are mapped below; their CRC-32 covers the .npy
      // header too, so every_checksum checks the whole record here.
      if (src.method == 0 && check && opt.checks == fetch_checks::every_checksum) {
        auto crc = detail::npz_record_crc32(src, zip_reader(mapped));
        if (!crc) return crc.error().wrap(path.string());
        if (*crc != src.crc32) return storage_error(i, checkpoint_errc::crc32_mismatch);
      }
      if (src.method == 8) {  // deflated: inflated into memory, CRC-32 always checked
        std::shared_ptr<fresh_storage> o;
        try {
          o = std::make_shared<fresh_storage>(n, opt.copy_on_write);
        } catch (const std::bad_alloc&) {
          return storage_error(i, checkpoint_errc::out_of_memory);
        }
        if (auto r = detail::inflate_npz_data(src, zip_reader(mapped), o->writable()); !r) {
          return r.error().wrap(path.string());
        }
        if (swap) wire::convert_in_place(o->writable(), width, order, wire::host_order);
        return std::shared_ptr<const storage_buffer>(std::move(o));
      }
    }
    // .ferry and safetensors storages start aligned; a .pt record re-zipped
    // by another tool may not, and its elements are then copied to aligned
    // memory (a mapping starts where the page does).
    const bool aligned = st.offset % width == 0;
    const auto checks = detail::checksums_on_fetch(st, opt.checks, check);
    std::shared_ptr<storage_buffer> buf;
    if (n > 0 && swap) {
      // Another byte order: read into fresh memory and converted there
      // (read_stored). Converting from a mapping of the file instead cost a
      // page fault per 4 KiB read: a 1 GiB .npy took 658 ms, 174 ms read
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
      if (auto v = mapped.view(st.offset, n, map_errno, !checks.any(), opt.copy_on_write)) {
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
      if (auto r = mapped.read(st.offset, o->writable(), sys_errno); !r) return storage_error(i, r.error(), sys_errno);
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
  // pieces (a .npy holds one large array). A storage not in the page cache
  // is asked for whole first (posix_fadvise), as a mapping is.
  result<void, error> read_stored(std::uint32_t i, std::span<std::byte> out, detail::fetch_checksums checks,
                                  unsigned threads = 0) const {
    const storage_info& st = file.storages[i];
    mapped.will_need(st.offset, out.size());
    const std::size_t width = codec::order_width(st.dtype);
    const wire::byte_order order = st.order.value_or(file.order);
    const std::optional<ggml_type> blocks = gguf_blocks(i);
    const std::size_t unit = blocks ? info(*blocks).block_bytes : codec::size_of(st.dtype);
    const std::size_t piece = std::max<std::size_t>((std::size_t{1} << 20) / unit, 1) * unit;
    std::uint32_t crc32c = 0, zip_crc32 = 0;
    // Pieces [first, last) of `out`; the checksums only from one thread.
    const auto read_pieces = [&](std::size_t first, std::size_t last) -> result<void, error> {
      for (std::size_t k = first; k < last; ++k) {
        const std::size_t at = k * piece;
        const auto chunk = out.subspan(at, std::min(piece, out.size() - at));
        int sys_errno = 0;
        if (auto r = mapped.read(st.offset + at, chunk, sys_errno); !r) return storage_error(i, r.error(), sys_errno);
        if (checks.crc32c) crc32c = detail::checksum_extend(detail::checksum_kind::crc32c, crc32c, chunk);
        if (checks.zip_crc32) zip_crc32 = detail::checksum_extend(detail::checksum_kind::zip_crc32, zip_crc32, chunk);
        if (order == wire::host_order) continue;
        if (blocks) swap_blocks_in_place(*blocks, chunk, order, wire::host_order);
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

  // The ggml type of GGUF storage i when it holds quantized blocks.
  std::optional<ggml_type> gguf_blocks(std::uint32_t i) const noexcept {
    if (!file.gguf) return std::nullopt;
    const ggml_type t = file.gguf->tensors[i].type;
    if (!info(t).quantized) return std::nullopt;
    return t;
  }

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
      if (const auto v = mapped.view(from, n, map_errno, false)) {
        ok = zero(v.bytes);
      } else {
        std::array<std::byte, piece_bytes> piece;  // NOLINT: filled by the read
        int sys_errno = 0;
        if (auto r = mapped.read(from, std::span(piece).first(n), sys_errno); !r) {
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

std::string_view format_name(file_format f) noexcept {
  switch (f) {
    case file_format::ferry: return "ferry";
    case file_format::safetensors: return "safetensors";
    case file_format::pytorch: return "pytorch";
    case file_format::ferry_set: return "ferry-set";
    case file_format::safetensors_sharded: return "safetensors-sharded";
    case file_format::npy: return "npy";
    case file_format::npz: return "npz";
    case file_format::gguf: return "gguf";
  }
  return "unknown";
}

result<reader, error> reader::open(const std::filesystem::path& path, const limits& lim) {
  read_options opt;
  opt.lim = lim;
  return open(path, opt);
}

result<reader, error> reader::open(const std::filesystem::path& path, const read_options& opt) {
  FERRY_TRY_ASSIGN(auto s, sniff(path));
  std::unique_ptr<detail::shard_set> set;
  auto parsed = detail::is_set_index(s.format) ? parse_set(s, path, opt, set) : parse_file(s, path, opt);
  if (!parsed) return std::move(parsed).error();
  return state::make(path, opt, std::move(s.file), std::move(*parsed), std::move(set));
}

result<reader, error> detail::open_shard(const std::filesystem::path& path, const read_options& opt) {
  FERRY_TRY_ASSIGN(auto s, sniff(path));
  FERRY_TRY_ASSIGN(auto parsed, parse_file(s, path, opt));
  return reader::state::make(path, opt, std::move(s.file), std::move(parsed), nullptr);
}

const std::filesystem::path& reader::path() const noexcept { return s_->path; }
file_format reader::format() const noexcept { return s_->file.format; }
wire::byte_order reader::order() const noexcept { return s_->file.order; }
std::uint32_t reader::alignment() const noexcept { return s_->file.alignment; }
std::uint64_t reader::file_size() const noexcept { return s_->set ? s_->set->total_size : s_->mapped.size(); }
std::uint32_t reader::manifest_crc32c() const noexcept { return s_->file.manifest_crc32c; }
std::span<const reader> reader::shards() const noexcept {
  return s_->set ? std::span<const reader>(s_->set->shards) : std::span<const reader>();
}
std::span<const tensor_info> reader::tensors() const noexcept { return s_->file.tensors; }
std::span<const storage_info> reader::storages() const noexcept { return s_->file.storages; }
const std::map<std::string, std::string>& reader::metadata() const noexcept { return s_->file.metadata; }
const gguf_header* reader::gguf() const noexcept { return s_->file.gguf.get(); }

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
  // the rest of the budget to each (a foreign-order .npy is one storage).
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
  if (s_->set) return s_->set->verify(progress);
  const auto& st = s_->file.storages;
  if (!s_->file.npz.empty()) {  // each record's CRC-32, over its .npy header and data (inflated if deflated)
    std::uint64_t done = 0;
    for (std::uint32_t i = 0; i < st.size(); ++i) {
      auto crc = detail::npz_record_crc32(s_->file.npz[i], zip_reader(s_->mapped));
      if (!crc) return crc.error().wrap(s_->path.string());
      if (*crc != s_->file.npz[i].crc32) return s_->storage_error(i, checkpoint_errc::crc32_mismatch);
      done += st[i].nbytes;
      if (progress) progress(done);
    }
    return {};
  }
  const bool ferry_format = s_->file.format == file_format::ferry;
  std::uint64_t done = 0;
  const auto report = [&](std::uint64_t n) {
    if (progress) progress(done + n);
  };
  std::uint64_t end = header_size;
  for (std::uint32_t i = 0; i < st.size(); ++i) {
    if (ferry_format) {
      FERRY_TRY(s_->check_zero(end, st[i].offset, i));
    }
    const auto fail = [&](error_code c, int sys_errno) { return s_->storage_error(i, c, sys_errno); };
    if (const auto sum = detail::checksum_of(st[i])) {
      FERRY_TRY_ASSIGN(const auto crc,
                       detail::file_checksum(s_->mapped, st[i].offset, st[i].nbytes, sum->kind, fail, report));
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
  if (ferry_format) {
    FERRY_TRY(s_->check_zero(end, s_->file.data_end, st.empty() ? UINT32_MAX : static_cast<std::uint32_t>(st.size() - 1)));
  }
  // .pt: the records that are not storages (data.pkl, version, ...).
  for (const auto& r : s_->file.other_records) {
    const auto fail = [&](error_code c, int sys_errno) {
      return file_error(s_->path, c, sys_errno, "record " + quote(r.name));
    };
    if (r.crc32 == 0) continue;  // saved without CRC-32
    FERRY_TRY_ASSIGN(const auto crc,
                     detail::file_checksum(s_->mapped, r.data_offset, r.size, detail::checksum_kind::zip_crc32, fail, {}));
    if (crc != r.crc32) return fail(checkpoint_errc::crc32_mismatch, 0);
  }
  return {};
}

result<void, error> reader::read_into(const tensor_info& t, std::span<std::byte> out) const {
  const auto fail = [&](error_code c) { return error(c, detail::tensor_context(s_->path.string(), t.name)); };
  if (!t.is_contiguous() || out.size() != t.nbytes()) return fail(errc::bad_value);
  if (s_->set) return s_->set->read_into(t, out);
  const storage_info& st = s_->file.storages[t.storage];
  if (t.offset != 0 || out.size() != st.nbytes || s_->file.format == file_format::pytorch ||
      s_->file.format == file_format::npz) {
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
