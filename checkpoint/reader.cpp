#include "ferry/checkpoint/reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "ferry/checkpoint/detail/layout.h"
#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/detail/set.h"
#include "ferry/codec/crc32c.h"
#include "ferry/wire/bulk.h"

namespace ferry::checkpoint {
namespace {

using detail::file_error;
using detail::parsed_file;

// A range of the file mapped privately (writable copy-on-write when asked),
// unmapped on destruction. Empty when the range could not be mapped.
class mapping {
 public:
  mapping() = default;
  mapping(void* base, std::size_t length, std::size_t delta, std::size_t n) noexcept
      : base_(base), length_(length), bytes_(static_cast<std::byte*>(base) + delta, n) {}
  mapping(mapping&& o) noexcept
      : base_(std::exchange(o.base_, nullptr)), length_(o.length_), bytes_(std::exchange(o.bytes_, {})) {}
  mapping& operator=(mapping&&) = delete;
  ~mapping() {
    if (base_ != nullptr) ::munmap(base_, length_);
  }
  [[nodiscard]] explicit operator bool() const noexcept { return base_ != nullptr; }
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return bytes_; }

 private:
  void* base_ = nullptr;
  std::size_t length_ = 0;
  std::span<std::byte> bytes_;
};

// A storage's bytes as a mapping of the file; mutable_bytes() exposes a
// copy-on-write mapping when the reader was opened with copy_on_write.
class mapped_storage final : public storage_buffer {
 public:
  mapped_storage(mapping m, bool expose) noexcept : map_(std::move(m)) {
    bytes_ = map_.bytes();
    if (expose) mutable_ = map_.bytes();
  }
  [[nodiscard]] std::span<std::byte> writable() const noexcept { return map_.bytes(); }

 private:
  mapping map_;
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

// A set's shards are opened (by open_set, open_hf_set) while its index is:
// an index met then is a shard that is an index (one naming itself, or
// two naming each other), refused so that opening never recurses.
thread_local int opening_shards = 0;
struct set_guard {
  set_guard() noexcept { ++opening_shards; }
  ~set_guard() { --opening_shards; }
  set_guard(const set_guard&) = delete;
  set_guard& operator=(const set_guard&) = delete;
};
error not_a_shard(const std::filesystem::path& path) {
  return file_error(path, checkpoint_errc::bad_shard, 0, "a set's index, not a shard");
}

}  // namespace

struct reader::state {
  std::filesystem::path path;
  read_options opt;
  int fd = -1;
  std::uint64_t size = 0;
  parsed_file file;
  std::unordered_map<std::string_view, std::size_t> by_name;
  std::vector<std::uint32_t> first_tensor_of;  // per storage, for error messages
  std::unique_ptr<detail::shard_set> set;      // a set's shards, when `path` is its index

  mutable std::mutex mu;
  mutable std::vector<std::weak_ptr<const storage_buffer>> cache;
  mutable std::vector<bool> verified;
  mutable std::uint64_t loaded = 0;

  ~state() {
    if (fd >= 0) ::close(fd);
  }

  error storage_error(std::uint32_t i, error_code c, int sys_errno = 0) const {
    if (i == UINT32_MAX) return file_error(path, c, sys_errno);
    const std::uint32_t t = first_tensor_of[i];
    if (t == UINT32_MAX) return file_error(path, c, sys_errno, "storage " + std::to_string(i));
    return error(c, detail::tensor_context(path.string(), file.tensors[t].name), sys_errno);
  }

  // Maps (or reads) storage i, checks its CRC if `check` and converts it to
  // host order. Touches no shared state: threads may load storages at once.
  result<std::shared_ptr<const storage_buffer>, error> load(std::uint32_t i, bool check) const {
    const storage_info& st = file.storages[i];
    if (set) return set->load(i, st.nbytes, opt.copy_on_write);  // the shards check their CRCs
    if (st.nbytes > SIZE_MAX / 2) return storage_error(i, checkpoint_errc::storage_too_large);
    const auto n = static_cast<std::size_t>(st.nbytes);
    const std::size_t width = codec::size_of(st.dtype);
    const bool swap = file.order != wire::host_order && width > 1;
    // .ferry and safetensors storages start aligned; a .pt record re-zipped
    // by another tool may not, and its elements are then copied to aligned
    // memory (a mapping starts where the page does).
    const bool aligned = st.offset % width == 0;
    // The checksums checked (read_options::checks): the format's own, every
    // one the file holds (a .pt record's CRC-32 too), or none.
    const bool check_crc32c = check && st.crc32c && opt.checks != fetch_checks::none;
    const bool check_zip = check && st.crc32 && opt.checks == fetch_checks::every_checksum;
    std::shared_ptr<storage_buffer> buf;
    std::span<std::byte> writable;
    if (n > 0 && aligned) {
      int map_errno = 0;
      if (auto m = map_range(st.offset, n, swap || opt.copy_on_write, map_errno, !(check_crc32c || check_zip))) {
        auto ms = std::make_shared<mapped_storage>(std::move(m), opt.copy_on_write);
        writable = ms->writable();
        buf = std::move(ms);
      } else if (map_errno == ENOMEM || map_errno == EOVERFLOW) {
        return storage_error(i, checkpoint_errc::storage_too_large);
      }
    }
    if (!buf) {  // empty, unaligned, beyond 4 GiB on 32-bit, or a file system without mmap
      std::shared_ptr<copied_storage> o;
      try {
        o = std::make_shared<copied_storage>(std::vector<std::byte>(n), opt.copy_on_write);
      } catch (const std::bad_alloc&) {
        return storage_error(i, checkpoint_errc::storage_too_large);
      }
      int sys_errno = 0;
      if (auto r = detail::pread_exact(fd, st.offset, o->writable(), sys_errno); !r) {
        return storage_error(i, r.error(), sys_errno);
      }
      writable = o->writable();
      buf = std::move(o);
    }
    if (check_crc32c && codec::crc32c(writable) != *st.crc32c) return storage_error(i, errc::checksum_mismatch);
    if (check_zip && detail::zip_crc32(writable) != *st.crc32) return storage_error(i, checkpoint_errc::crc32_mismatch);
    if (swap) wire::convert_in_place(writable, width, file.order, wire::host_order);
    return std::shared_ptr<const storage_buffer>(std::move(buf));
  }

  // Maps [offset, offset + n) privately (writable copy-on-write if asked)
  // and, if `fault`, faults it in (a caller about to read every byte, for a
  // CRC, lets its reads fault it in: 4% faster). A cold range (its first
  // byte not in the page cache)
  // is asked for whole first: faulting a cold mapping in reads it in small
  // windows around each fault, 4x slower from a disk; a warm one skips the
  // advice, which costs a page-cache walk. Empty when mmap failed (its
  // errno in map_errno) or the range is not mapped on this host: 32-bit
  // hosts read ranges that end beyond 4 GiB with pread, because qemu-user
  // (7.2, which the armhf tests run under) truncates mmap offsets of 32-bit
  // guests to 32 bits and maps the wrong bytes.
  mapping map_range(std::uint64_t offset, std::size_t n, bool writable, int& map_errno, bool fault = true) const noexcept {
    if (sizeof(void*) < 8 && offset + n > (std::uint64_t{1} << 32)) return {};
    const std::uint64_t page = page_size();
    std::uint64_t map_offset = offset & ~(page - 1);
    std::uint64_t map_end = offset + n;
    // Ranges of 2 MiB or more are mapped from and to 2 MiB boundaries of the
    // file (within it) at a 2 MiB-aligned address: the page cache's 2 MiB
    // folios (a file read or written in big pieces) are then each mapped
    // by one fault (a PMD entry), not 64 KiB at a time (measured: a 1 GiB
    // .pt of 4 MiB storages loads with 1,500 faults in 9.7 ms, not 9,400 in
    // 20 ms). The bytes around the range are the same file's, never exposed.
    constexpr std::uint64_t block = std::uint64_t{2} << 20;
    const bool huge = sizeof(void*) >= 8 && n >= block;
    if (huge) {
      map_offset = offset & ~(block - 1);
      map_end = std::min((map_end + block - 1) & ~(block - 1), (size + page - 1) & ~(page - 1));
    }
    const auto length = static_cast<std::size_t>(map_end - map_offset);
    const auto delta = static_cast<std::size_t>(offset - map_offset);
    if (!cached(offset)) {
      (void)::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_WILLNEED);
    }
    const int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
    void* base = huge ? map_aligned(length, prot, map_offset, static_cast<std::size_t>(block)) : MAP_FAILED;
    if (base == MAP_FAILED) base = ::mmap(nullptr, length, prot, MAP_PRIVATE, fd, static_cast<off_t>(map_offset));
    if (base == MAP_FAILED) {
      map_errno = errno;
      return {};
    }
    if (fault) {
      const std::size_t into_page = delta % static_cast<std::size_t>(page);
      fault_in(static_cast<const std::byte*>(base) + (delta - into_page), into_page + n);
    }
    return {base, length, delta, n};
  }

  // Maps `length` bytes of the file at `offset` at an address aligned to
  // `block`: a reservation `block` longer, the file mapped over it, the
  // rest given back. MAP_FAILED if the address space has no room.
  void* map_aligned(std::size_t length, int prot, std::uint64_t offset, std::size_t block) const noexcept {
    void* area = ::mmap(nullptr, length + block, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (area == MAP_FAILED) return MAP_FAILED;
    const auto start = reinterpret_cast<std::uintptr_t>(area);
    const std::uintptr_t at = (start + block - 1) & ~(std::uintptr_t{block} - 1);
    void* base = ::mmap(reinterpret_cast<void*>(at), length, prot, MAP_PRIVATE | MAP_FIXED, fd, static_cast<off_t>(offset));
    if (base == MAP_FAILED) {
      ::munmap(area, length + block);
      return MAP_FAILED;
    }
    if (at > start) ::munmap(area, at - start);
    ::munmap(reinterpret_cast<void*>(at + length), start + block - at);
    return base;
  }

  // Maps the pages of [p, p + n) by touching one byte per 64 KiB: a read
  // fault maps the cached pages of the 64 KiB around it (the kernel's
  // fault-around window) or a whole 2 MiB folio, so touching every page
  // would only add TLB misses (measured: 1 GiB .pt load 9.7 -> 7.1 ms, and
  // no faults left when every page is read afterwards). Where fault-around
  // is set smaller, the pages between fault on first use instead.
  static void fault_in(const std::byte* p, std::size_t n) noexcept {
    constexpr std::size_t window = 64 * 1024;
    const auto* bytes = reinterpret_cast<const volatile unsigned char*>(p);
    unsigned char sink = 0;
    for (std::size_t i = 0; i < n; i += window) sink = static_cast<unsigned char>(sink ^ bytes[i]);
    if (n > 0) sink = static_cast<unsigned char>(sink ^ bytes[n - 1]);  // the last window
    (void)sink;
  }

  static std::size_t page_size() noexcept {
    static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return page;
  }

  // Whether the byte at `offset` is in the page cache (a read that must not
  // wait; where RWF_NOWAIT is unsupported the answer is "no").
  bool cached(std::uint64_t offset) const noexcept {
    std::byte b;
    iovec v{&b, 1};
    return ::preadv2(fd, &v, 1, static_cast<off_t>(offset), RWF_NOWAIT) == 1;
  }

  // The checksum of [offset, offset + nbytes) as stored, CRC32C or (.pt)
  // zlib's CRC-32, through windows of the file mapped one at a time:
  // verify() needs no address space for a whole storage (a 32-bit host
  // checks storages larger than it could map) and converts nothing.
  // Errors name storage i (UINT32_MAX: none; `record` then names it).
  enum class checksum : std::uint8_t { crc32c, zip_crc32 };
  result<std::uint32_t, error> file_crc(std::uint64_t offset, std::uint64_t nbytes, checksum kind,
                                        const std::function<error(error_code, int)>& fail,
                                        const std::function<void(std::uint64_t)>& progress) const {
    constexpr std::uint64_t window = std::uint64_t{64} << 20;
    std::uint32_t crc = 0;
    std::vector<std::byte> buffer;
    const auto extend = [&](std::span<const std::byte> b) {
      if (kind == checksum::crc32c) {
        crc = codec::crc32c_extend(crc, b);
      } else {
        crc = detail::zip_crc32(b, crc);
      }
    };
    for (std::uint64_t at = 0; at < nbytes;) {
      const auto n = static_cast<std::size_t>(std::min(window, nbytes - at));
      int map_errno = 0;
      if (const auto m = map_range(offset + at, n, false, map_errno, false)) {
        extend(m.bytes());
      } else {
        buffer.resize(n);
        int sys_errno = 0;
        if (auto r = detail::pread_exact(fd, offset + at, buffer, sys_errno); !r) return fail(r.error(), sys_errno);
        extend(buffer);
      }
      at += n;
      if (progress) progress(at);
    }
    return crc;
  }

  // Whether [from, to) of the file is zero (padding), read in small pieces.
  // Errors name storage i (UINT32_MAX: the file).
  result<void, error> check_zero(std::uint64_t from, std::uint64_t to, std::uint32_t i) const {
    std::array<std::byte, 64 * 1024> piece{};
    while (from < to) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(to - from, piece.size()));
      int sys_errno = 0;
      if (auto r = detail::pread_exact(fd, from, std::span(piece).first(n), sys_errno); !r) {
        return storage_error(i, r.error(), sys_errno);
      }
      if (std::any_of(piece.begin(), piece.begin() + static_cast<std::ptrdiff_t>(n),
                      [](std::byte b) { return b != std::byte{0}; })) {
        return storage_error(i, checkpoint_errc::bad_padding);
      }
      from += n;
    }
    return {};
  }

  // Storage i in host order, from the cache or loaded (its CRC checked the
  // first time). Concurrent fetches of one storage end with one buffer.
  result<std::shared_ptr<const storage_buffer>, error> fetch(std::uint32_t i) const {
    bool check = false;
    {
      std::lock_guard lock(mu);
      if (auto cached = cache[i].lock()) return cached;
      check = !verified[i];
    }
    FERRY_TRY_ASSIGN(auto buf, load(i, check));
    std::lock_guard lock(mu);
    if (auto cached = cache[i].lock()) return cached;  // another thread won
    cache[i] = buf;
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
  }
  return "unknown";
}

result<reader, error> reader::open(const std::filesystem::path& path, const limits& lim) {
  read_options opt;
  opt.lim = lim;
  return open(path, opt);
}

result<reader, error> reader::open(const std::filesystem::path& path, const read_options& opt) {
  const limits& lim = opt.lim;
  auto s = std::make_unique<state>();
  s->path = path;
  s->opt = opt;
  s->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (s->fd < 0) return error::from_errno(errno, path.string());
  // No speculative readahead: opening reads the header, the trailer and the
  // manifest, nothing around them, and each storage is asked for whole when
  // it is fetched (load(), file_crc()).
  (void)::posix_fadvise(s->fd, 0, 0, POSIX_FADV_RANDOM);
  struct stat st {};
  if (::fstat(s->fd, &st) != 0) return error::from_errno(errno, path.string());
  if (S_ISDIR(st.st_mode)) return error::from_errno(EISDIR, path.string());
  if (!S_ISREG(st.st_mode)) return file_error(path, checkpoint_errc::not_a_checkpoint, 0, "not a regular file");
  s->size = static_cast<std::uint64_t>(st.st_size);

  std::array<std::byte, header_size> head{};
  const auto have = static_cast<std::size_t>(std::min<std::uint64_t>(s->size, header_size));
  int sys_errno = 0;
  if (auto r = detail::pread_exact(s->fd, 0, std::span(head).first(have), sys_errno); !r) {
    return file_error(path, r.error(), sys_errno);
  }
  const auto prefix = std::min<std::size_t>(have, sizeof file_magic);
  result<parsed_file, error> parsed = file_error(path, checkpoint_errc::not_a_checkpoint);
  if (have > 0 && std::memcmp(head.data(), file_magic, prefix) == 0) {
    if (have < header_size) return file_error(path, errc::truncated);
    if (head[10] == std::byte{set_index_flag}) {  // a set's index (set.h)
      if (opening_shards > 0) return not_a_shard(path);
      const set_guard guard;
      FERRY_TRY_ASSIGN(auto container, detail::read_ferry_container(s->fd, s->size, path, head, lim));
      parsed_file index;
      FERRY_TRY_ASSIGN(s->set, detail::open_set(path, std::move(container), opt, index));
      parsed = std::move(index);
    } else {
      parsed = detail::parse_ferry(s->fd, s->size, path, head, lim);
    }
  } else if (have >= 4 && std::memcmp(head.data(), "PK\x03\x04", 4) == 0) {
    const int fd = s->fd;
    const detail::zip_read_at read = [fd](std::uint64_t offset, std::span<std::byte> out) -> result<void, error> {
      int read_errno = 0;
      if (auto r = detail::pread_exact(fd, offset, out, read_errno); !r) return error(r.error(), {}, read_errno);
      return {};
    };
    parsed = detail::parse_pytorch(s->size, read, opt);
    if (!parsed) return parsed.error().wrap(path.string());
  } else if (detail::legacy_pytorch(std::span(head).first(have))) {
    return file_error(path, checkpoint_errc::unsupported_pytorch, 0,
                      "a legacy torch.save file (PyTorch before 1.6, not a zip): re-save it with a newer torch.save");
  } else if (have > 8 && head[8] == std::byte{'{'} &&
             !(head[0] == std::byte{'{'} &&  // JSON with '{' at byte 8 too: an index, unless the length fits
               wire::load<std::uint64_t>(head.data(), wire::byte_order::little) > s->size - 8)) {
    const auto n = wire::load<std::uint64_t>(head.data(), wire::byte_order::little);
    parsed = detail::parse_safetensors(s->fd, s->size, n, lim);
    if (!parsed) return parsed.error().wrap(path.string());
  } else if (const auto first = std::find_if(head.begin(), head.begin() + static_cast<std::ptrdiff_t>(have),
                                             [](std::byte b) { return b != std::byte{' '} && b != std::byte{'\n'} &&
                                                                      b != std::byte{'\r'} && b != std::byte{'\t'}; });
             first != head.begin() + static_cast<std::ptrdiff_t>(have) && *first == std::byte{'{'}) {
    // JSON: a Hugging Face sharded safetensors index.
    if (opening_shards > 0) return not_a_shard(path);
    const set_guard guard;
    if (s->size > lim.max_header_bytes) return file_error(path, errc::limit_exceeded, 0, "index");
    std::string json(static_cast<std::size_t>(s->size), '\0');
    if (auto r = detail::pread_exact(s->fd, 0, std::as_writable_bytes(std::span(json)), sys_errno); !r) {
      return file_error(path, r.error(), sys_errno);
    }
    parsed_file index;
    FERRY_TRY_ASSIGN(s->set, detail::open_hf_set(path, json, opt, index));
    parsed = std::move(index);
  } else if (have < 9) {
    return file_error(path, errc::truncated);  // too short to be either format
  }
  if (!parsed) return parsed.error();
  s->file = std::move(*parsed);

  const auto& f = s->file;
  s->first_tensor_of.assign(f.storages.size(), UINT32_MAX);
  for (std::size_t i = 0; i < f.tensors.size(); ++i) {
    s->by_name.emplace(f.tensors[i].name, i);
    auto& first = s->first_tensor_of[f.tensors[i].storage];
    if (first == UINT32_MAX) first = static_cast<std::uint32_t>(i);
  }
  s->cache.resize(f.storages.size());
  s->verified.assign(f.storages.size(), false);
  return reader(std::move(s));
}

const std::filesystem::path& reader::path() const noexcept { return s_->path; }
file_format reader::format() const noexcept { return s_->file.format; }
wire::byte_order reader::order() const noexcept { return s_->file.order; }
std::uint32_t reader::alignment() const noexcept { return s_->file.alignment; }
std::uint64_t reader::file_size() const noexcept { return s_->set ? s_->set->total_size : s_->size; }
std::uint32_t reader::manifest_crc32c() const noexcept { return s_->file.manifest_crc32c; }
std::span<const reader> reader::shards() const noexcept {
  return s_->set ? std::span<const reader>(s_->set->shards) : std::span<const reader>();
}
std::span<const tensor_info> reader::tensors() const noexcept { return s_->file.tensors; }
std::span<const storage_info> reader::storages() const noexcept { return s_->file.storages; }
const std::map<std::string, std::string>& reader::metadata() const noexcept { return s_->file.metadata; }

const tensor_info* reader::find(std::string_view name) const noexcept {
  const auto it = s_->by_name.find(name);
  return it == s_->by_name.end() ? nullptr : &s_->file.tensors[it->second];
}

std::vector<std::string> reader::shared_with(const tensor_info& t) const {
  std::vector<std::string> out;
  for (const auto& other : s_->file.tensors) {
    if (other.storage == t.storage && other.name != t.name) out.push_back(other.name);
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
  const auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < n;) {
      if (s_->first_tensor_of[i] == UINT32_MAX) continue;  // no tensor views it
      try {
        auto b = s_->fetch(static_cast<std::uint32_t>(i));
        if (b) buffers[i] = std::move(*b);
        else errors[i] = std::move(b.error());
      } catch (const std::bad_alloc&) {  // not across the thread's edge
        errors[i] = s_->storage_error(static_cast<std::uint32_t>(i), checkpoint_errc::storage_too_large);
      }
    }
  };
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(n, 1)));
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < threads; ++k) pool.emplace_back(work);
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
    if (st[i].crc32c) {
      FERRY_TRY_ASSIGN(const auto crc, s_->file_crc(st[i].offset, st[i].nbytes, state::checksum::crc32c, fail, report));
      if (crc != *st[i].crc32c) return s_->storage_error(i, errc::checksum_mismatch);
      std::lock_guard lock(s_->mu);
      s_->verified[i] = true;
    } else if (st[i].crc32) {
      FERRY_TRY_ASSIGN(const auto crc, s_->file_crc(st[i].offset, st[i].nbytes, state::checksum::zip_crc32, fail, report));
      if (crc != *st[i].crc32) return s_->storage_error(i, checkpoint_errc::crc32_mismatch);
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
    FERRY_TRY_ASSIGN(const auto crc, s_->file_crc(r.data_offset, r.size, state::checksum::zip_crc32, fail, {}));
    if (crc != r.crc32) return fail(checkpoint_errc::crc32_mismatch, 0);
  }
  return {};
}

result<void, error> reader::read_into(const tensor_info& t, std::span<std::byte> out) const {
  const auto fail = [&](error_code c) { return error(c, detail::tensor_context(s_->path.string(), t.name)); };
  if (!t.is_contiguous() || out.size() != t.nbytes()) return fail(errc::bad_value);
  if (s_->set) return s_->set->read_into(t, out);
  const storage_info& st = s_->file.storages[t.storage];
  const std::size_t width = codec::size_of(st.dtype);
  if (t.offset != 0 || out.size() != st.nbytes || s_->file.format == file_format::pytorch) {
    FERRY_TRY_ASSIGN(auto whole, get(t));
    if (!out.empty()) std::memcpy(out.data(), whole.bytes().data(), out.size());
    return {};
  }
  // pread in pieces that stay in the cache for the CRC and the swap.
  constexpr std::size_t piece = std::size_t{1} << 20;
  std::uint32_t crc = 0;
  for (std::size_t at = 0; at < out.size(); at += piece) {
    const auto chunk = out.subspan(at, std::min(piece, out.size() - at));
    int sys_errno = 0;
    if (auto r = detail::pread_exact(s_->fd, st.offset + at, chunk, sys_errno); !r) {
      return error(r.error(), detail::tensor_context(s_->path.string(), t.name), sys_errno);
    }
    if (st.crc32c) crc = codec::crc32c_extend(crc, chunk);
    if (s_->file.order != wire::host_order && width > 1) {
      wire::convert_in_place(chunk, width, s_->file.order, wire::host_order);
    }
  }
  if (st.crc32c && crc != *st.crc32c) return fail(errc::checksum_mismatch);
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
