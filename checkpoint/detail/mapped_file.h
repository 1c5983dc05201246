// ferry/checkpoint/detail/mapped_file.h: INTERNAL. A checkpoint file open
// for reading, and the policy of how its ranges are mapped: never whole,
// one storage (or one checksum window) at a time, so a file larger than the
// address space opens. Not part of the API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <utility>

#include "ferry/base/error.h"

namespace ferry::checkpoint::detail {

/// A range of a file mapped privately (writable copy-on-write when asked),
/// unmapped on destruction. Empty when the range could not be mapped.
class mapping {
 public:
  mapping() = default;
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

  mapped_file(mapped_file&& o) noexcept : fd_(std::exchange(o.fd_, -1)), size_(o.size_) {}
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

  /// Maps [offset, offset + n) privately (writable copy-on-write if asked)
  /// and, if `fault`, faults it in (a caller about to read every byte, for a
  /// CRC, lets its reads fault it in: 4% faster). A cold range (its first
  /// byte not in the page cache) is asked for whole first: faulting a cold
  /// mapping in reads it in small windows around each fault, 4x slower from
  /// a disk; a warm one skips the advice, which costs a page-cache walk.
  /// Empty when mmap failed (its errno in map_errno) or the range is not
  /// mapped on this host: 32-bit hosts read ranges that end beyond 4 GiB
  /// with pread, because qemu-user (7.2, which the armhf tests run under)
  /// truncates mmap offsets of 32-bit guests to 32 bits and maps the wrong
  /// bytes. Requires: the range lies within the file.
  [[nodiscard]] mapping map(std::uint64_t offset, std::size_t n, bool writable, int& map_errno,
                            bool fault = true) const noexcept;

 private:
  mapped_file(int fd, std::uint64_t size) noexcept : fd_(fd), size_(size) {}
  void* map_aligned(std::size_t length, int prot, std::uint64_t offset, std::size_t block) const noexcept;
  [[nodiscard]] bool cached(std::uint64_t offset) const noexcept;

  int fd_ = -1;
  std::uint64_t size_ = 0;
};

}  // namespace ferry::checkpoint::detail
