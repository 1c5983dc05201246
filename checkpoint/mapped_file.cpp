// A checkpoint file open for reading and how its ranges are mapped
// (detail/mapped_file.h).
#include "ferry/checkpoint/detail/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/error.h"

namespace ferry::checkpoint::detail {
namespace {

std::size_t page_size() noexcept {
  static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// Maps the pages of [p, p + n) by touching one byte per 64 KiB: a read
// fault maps the cached pages of the 64 KiB around it (the kernel's
// fault-around window) or a whole 2 MiB folio, so touching every page
// would only add TLB misses (measured: a 1 GiB zip checkpoint loaded in 9.7 -> 7.1 ms, and
// no faults left when every page is read afterwards). Where fault-around
// is set smaller, the pages between fault on first use instead.
void fault_in(const std::byte* p, std::size_t n) noexcept {
  constexpr std::size_t window = 64 * 1024;
  const auto* bytes = reinterpret_cast<const volatile unsigned char*>(p);
  unsigned char sink = 0;
  for (std::size_t i = 0; i < n; i += window) sink = static_cast<unsigned char>(sink ^ bytes[i]);
  if (n > 0) sink = static_cast<unsigned char>(sink ^ bytes[n - 1]);  // the last window
  (void)sink;
}

// Ranges of a window smaller than this are not advised (will_need).
constexpr std::size_t advise_from = std::size_t{64} << 10;

std::atomic<std::size_t> held{0};

// A place in the budget, or false when it is spent.
bool take_place() noexcept {
  if (held.fetch_add(1, std::memory_order_relaxed) < mapping_budget()) return true;
  held.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

void give_place() noexcept { held.fetch_sub(1, std::memory_order_relaxed); }

}  // namespace

std::size_t mapping_budget() noexcept {
  static const std::size_t budget = [] {
    unsigned long count = 65530;  // the kernel's default, where /proc cannot tell
    if (std::FILE* f = std::fopen("/proc/sys/vm/max_map_count", "re")) {
      if (std::fscanf(f, "%lu", &count) != 1) count = 65530;
      std::fclose(f);
    }
    return std::max<std::size_t>(count / 2, 64);
  }();
  return budget;
}

std::size_t mappings_held() noexcept { return held.load(std::memory_order_relaxed); }

mapping::~mapping() {
  if (base_ != nullptr) {
    ::munmap(base_, length_);
    give_place();
  }
}

struct mapped_file::windows {
  std::mutex mu;
  // By number, times two, plus one for a writable (copy-on-write) window.
  std::unordered_map<std::uint64_t, std::weak_ptr<const mapping>> by_number;
  // The window last used stays mapped while the file is open, on 64-bit
  // hosts: tensors fetched, checked and dropped one by one (a conversion,
  // verify()) map it once, not once each. Not on 32-bit ones, where a set
  // of 48 shards would pin 3 GiB of address space.
  std::shared_ptr<const mapping> recent;
};

mapped_file::mapped_file(int fd, std::uint64_t size) : fd_(fd), size_(size), windows_(std::make_unique<windows>()) {}

mapped_file::mapped_file(mapped_file&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), size_(o.size_), windows_(std::move(o.windows_)) {}

result<mapped_file, error> mapped_file::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error::from_errno(errno, path.string());
  mapped_file f(fd, 0);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return error::from_errno(errno, path.string());
  if (S_ISDIR(st.st_mode)) return error::from_errno(EISDIR, path.string());
  if (!S_ISREG(st.st_mode)) return file_error(path, checkpoint_errc::not_a_checkpoint, 0, "not a regular file");
  f.size_ = static_cast<std::uint64_t>(st.st_size);
  return f;
}

mapped_file::~mapped_file() {
  if (fd_ >= 0) ::close(fd_);
}

result<void> mapped_file::read(std::uint64_t offset, std::span<std::byte> out, int& sys_errno) const noexcept {
  return pread_exact(fd_, offset, out, sys_errno);
}

void mapped_file::will_need(std::uint64_t offset, std::uint64_t n) const noexcept {
  if (n > 0 && !cached(offset)) {
    (void)::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_WILLNEED);
  }
}

mapping mapped_file::map(std::uint64_t offset, std::size_t n, bool writable, int& map_errno, bool fault) const noexcept {
  will_need(offset, n);
  return map_range(offset, n, writable, map_errno, fault);
}

mapping mapped_file::map_range(std::uint64_t offset, std::size_t n, bool writable, int& map_errno,
                               bool fault) const noexcept {
  if (sizeof(void*) < 8 && offset + n > (std::uint64_t{1} << 32)) return {};
  if (!take_place()) {
    map_errno = ENOMEM;
    return {};
  }
  const std::uint64_t page = page_size();
  std::uint64_t map_offset = offset & ~(page - 1);
  std::uint64_t map_end = offset + n;
  // Ranges of 2 MiB or more are mapped from and to 2 MiB boundaries of the
  // file (within it) at a 2 MiB-aligned address: the page cache's 2 MiB
  // folios (a file read or written in big pieces) are then each mapped
  // by one fault (a PMD entry), not 64 KiB at a time (measured: a 1 GiB
  // zip checkpoint of 4 MiB storages loads with 1,500 faults in 9.7 ms, not 9,400 in
  // 20 ms). The bytes around the range are the same file's, never exposed.
  constexpr std::uint64_t block = std::uint64_t{2} << 20;
  const bool huge = sizeof(void*) >= 8 && n >= block;
  if (huge) {
    map_offset = offset & ~(block - 1);
    map_end = std::min((map_end + block - 1) & ~(block - 1), (size_ + page - 1) & ~(page - 1));
  }
  const auto length = static_cast<std::size_t>(map_end - map_offset);
  const auto delta = static_cast<std::size_t>(offset - map_offset);
  const int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* base = huge ? map_aligned(length, prot, map_offset, static_cast<std::size_t>(block)) : MAP_FAILED;
  if (base == MAP_FAILED) base = ::mmap(nullptr, length, prot, MAP_PRIVATE, fd_, static_cast<off_t>(map_offset));
  if (base == MAP_FAILED) {
    map_errno = errno;
    give_place();
    return {};
  }
  if (fault) {
    const std::size_t into_page = delta % static_cast<std::size_t>(page);
    fault_in(static_cast<const std::byte*>(base) + (delta - into_page), into_page + n);
  }
  return {base, length, delta, n};
}

mapped_view mapped_file::view(std::uint64_t offset, std::size_t n, int& map_errno, bool fault, bool writable) const {
  const std::uint64_t number = offset / window_bytes;
  const std::uint64_t start = number * window_bytes;
  if (n > window_bytes - (offset - start)) {  // crosses the window's end: a mapping of its own
    auto own = map(offset, n, writable, map_errno, fault);
    if (!own) return {};
    auto owner = std::make_shared<const mapping>(std::move(own));
    const auto bytes = owner->bytes();
    return {std::move(owner), bytes};
  }
  std::shared_ptr<const mapping> window;
  {
    std::lock_guard lock(windows_->mu);
    const std::uint64_t key = number * 2 + (writable ? 1 : 0);
    auto& slot = windows_->by_number[key];
    window = slot.lock();
    if (!window) {
      auto m = map_range(start, static_cast<std::size_t>(std::min(window_bytes, size_ - start)), writable, map_errno,
                         false);
      if (!m) {
        windows_->by_number.erase(key);
        return {};
      }
      window = std::make_shared<const mapping>(std::move(m));
      slot = window;
    }
    if constexpr (sizeof(void*) >= 8) windows_->recent = window;  // 32-bit: address space is scarce
  }
  const auto bytes = window->bytes().subspan(static_cast<std::size_t>(offset - start), n);
  // A small range is faulted in with the pages around it anyway; asking
  // whether it is cached costs a system call a storage (a tenth of a
  // conversion of 2^20 one-element tensors, in perf).
  if (n >= advise_from) will_need(offset, n);
  if (fault) fault_in(bytes.data(), bytes.size());
  return {std::move(window), bytes};
}

// Maps `length` bytes of the file at `offset` at an address aligned to
// `block`: a reservation `block` longer, the file mapped over it, the
// rest given back. MAP_FAILED if the address space has no room.
void* mapped_file::map_aligned(std::size_t length, int prot, std::uint64_t offset, std::size_t block) const noexcept {
  void* area = ::mmap(nullptr, length + block, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (area == MAP_FAILED) return MAP_FAILED;
  const auto start = reinterpret_cast<std::uintptr_t>(area);
  const std::uintptr_t at = (start + block - 1) & ~(std::uintptr_t{block} - 1);
  void* base = ::mmap(reinterpret_cast<void*>(at), length, prot, MAP_PRIVATE | MAP_FIXED, fd_, static_cast<off_t>(offset));
  if (base == MAP_FAILED) {
    ::munmap(area, length + block);
    return MAP_FAILED;
  }
  if (at > start) ::munmap(area, at - start);
  ::munmap(reinterpret_cast<void*>(at + length), start + block - at);
  return base;
}

// Whether the byte at `offset` is in the page cache (a read that must not
// wait; where RWF_NOWAIT is unsupported the answer is "no").
bool mapped_file::cached(std::uint64_t offset) const noexcept {
  std::byte b;
  iovec v{&b, 1};
  return ::preadv2(fd_, &v, 1, static_cast<off_t>(offset), RWF_NOWAIT) == 1;
}

}  // namespace ferry::checkpoint::detail
