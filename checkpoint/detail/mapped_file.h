// ferry/checkpoint/detail/mapped_file.h: INTERNAL. A checkpoint file open
// for reading, and the policy of how its ranges are mapped. Not part of the
// API.
//
// The file is mapped in windows: aligned pieces of window_bytes (1 GiB on
// 64-bit hosts, 64 MiB on 32-bit ones), each mapped once, when a range in
// it is first asked for, and unmapped when the last view of it goes (on
// 64-bit hosts the window used last stays while the file is open: tensors
// fetched and dropped one by one map it once). So the mappings a reader
// holds grow with the file's size, not with its tensor count (a file of
// 2^20 tensors is one window, where a mapping per storage ran out of the
// kernel's vm.max_map_count, 65,530, at 65,000 tensors), and a file larger
// than the address space still opens. Copy-on-write readers get writable
// private windows of their own. A range that crosses a window's edge gets
// a mapping of its own.
// Every mapping ferry makes counts against one budget per process, half of
// vm.max_map_count: past it (or when mmap fails) a range is not mapped and
// the caller reads it instead, so the process never runs out of mappings
// for its threads and its allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <utility>

#include "ferry/base/error.h"

namespace ferry::checkpoint::detail {

/// A range of a file mapped privately (writable copy-on-write when asked),
/// unmapped on destruction, when it gives its place in the process's
/// mapping budget back. Empty when the range could not be mapped.
class mapping {
 public:
  mapping() = default;
  /// Takes over [base, base + length), which holds one place of the budget.
  mapping(void* base, std::size_t length, std::size_t delta, std::size_t n) noexcept
      : base_(base), length_(length), bytes_(static_cast<std::byte*>(base) + delta, n) {}
  mapping(mapping&& o) noexcept
      : base_(std::exchange(o.base_, nullptr)), length_(o.length_), bytes_(std::exchange(o.bytes_, {})) {}
  mapping& operator=(mapping&&) = delete;
  ~mapping();
  [[nodiscard]] explicit operator bool() const noexcept { return base_ != nullptr; }
  /// The range asked for (the mapping may cover more of the file around it).
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return bytes_; }

 private:
  void* base_ = nullptr;
  std::size_t length_ = 0;
  std::span<std::byte> bytes_;
};

/// A range of a file in memory and what keeps it mapped (its window, or a
/// mapping of its own): read-only, or writable copy-on-write (private to
/// the process). Empty when not mapped.
struct mapped_view {
  std::shared_ptr<const mapping> owner;
  std::span<std::byte> bytes;  ///< writable only when the view was asked writable
  [[nodiscard]] explicit operator bool() const noexcept { return owner != nullptr; }
};

/// Bytes of one window: a range inside one is a view of its mapping.
inline constexpr std::uint64_t window_bytes = sizeof(void*) >= 8 ? std::uint64_t{1} << 30 : std::uint64_t{64} << 20;

/// The mappings the process may hold through ferry at once: half of
/// vm.max_map_count (read once; 32,765 with the kernel's default), the
/// other half left to the allocator, thread stacks and libraries.
[[nodiscard]] std::size_t mapping_budget() noexcept;
/// The mappings held now (every reader's, windows included).
[[nodiscard]] std::size_t mappings_held() noexcept;

/// A regular file open read-only, its size taken when opened. Safe to use
/// from several threads at once (every read is positional).
class mapped_file {
 public:
  /// Opens `path` for random access (no speculative readahead: opening
  /// reads the header, the trailer and the manifest, nothing around them,
  /// and each storage is asked for whole when it is fetched). Errors, their
  /// context `path`: io_error (the OS's errno; EISDIR for a directory),
  /// not_a_checkpoint ("not a regular file": a FIFO, a device, ...).
  [[nodiscard]] static result<mapped_file, error> open(const std::filesystem::path& path);

  mapped_file(mapped_file&& o) noexcept;
  mapped_file& operator=(mapped_file&&) = delete;
  ~mapped_file();

  /// The descriptor, for the decoders that read through one.
  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

  /// Reads exactly `out.size()` bytes at `offset`. Errors: io_error (its
  /// errno in sys_errno), truncated (the file shrank).
  [[nodiscard]] result<void> read(std::uint64_t offset, std::span<std::byte> out, int& sys_errno) const noexcept;

  /// Asks for [offset, offset + n) whole (posix_fadvise WILLNEED) when its
  /// first byte is not in the page cache: a cold range about to be read in
  /// pieces, on a descriptor whose readahead is off (POSIX_FADV_RANDOM).
  void will_need(std::uint64_t offset, std::uint64_t n) const noexcept;

  /// [offset, offset + n): a view into the window that holds it, mapped by
  /// the first range asked of it (map()'s rules, `fault` for the range), or
  /// a mapping of its own when the range crosses a window's edge;
  /// `writable`: of the file's copy-on-write windows, which are others.
  /// Empty where map() would be, and when mmap failed (its errno in
  /// map_errno). Safe from several threads at once: one window is mapped
  /// once. Requires: the range lies within the file.
  [[nodiscard]] mapped_view view(std::uint64_t offset, std::size_t n, int& map_errno, bool fault = true,
                                 bool writable = false) const;

 private:
  struct windows;  // the windows mapped now, by number

  explicit mapped_file(int fd, std::uint64_t size);

  /// Maps [offset, offset + n) privately, on its own (writable
  /// copy-on-write if asked): a window, or a range that crosses one's edge
  /// (view()), taking a place in the budget. If `fault`, faults it in (a
  /// caller about to read every byte, for a CRC, lets its reads fault it
  /// in: 4% faster). A cold range (its first byte not in the page cache) is
  /// asked for whole first: faulting a cold mapping in reads it in small
  /// windows around each fault, 4x slower from a disk; a warm one skips the
  /// advice, which costs a page-cache walk. Empty when mmap failed (its
  /// errno in map_errno), the process's budget of mappings is spent
  /// (ENOMEM), or the range is not mapped on this host: 32-bit hosts read
  /// ranges that end beyond 4 GiB with pread, because qemu-user (7.2, which
  /// the armhf tests run under) truncates mmap offsets of 32-bit guests to
  /// 32 bits and maps the wrong bytes. Requires: the range lies within the
  /// file.
  [[nodiscard]] mapping map(std::uint64_t offset, std::size_t n, bool writable, int& map_errno,
                            bool fault) const noexcept;
  /// map() without the advice: a window is not asked for whole, only the
  /// ranges in it that are fetched.
  [[nodiscard]] mapping map_range(std::uint64_t offset, std::size_t n, bool writable, int& map_errno,
                                  bool fault) const noexcept;
  void* map_aligned(std::size_t length, int prot, std::uint64_t offset, std::size_t block) const noexcept;
  [[nodiscard]] bool cached(std::uint64_t offset) const noexcept;

  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::unique_ptr<windows> windows_;
};

}  // namespace ferry::checkpoint::detail
