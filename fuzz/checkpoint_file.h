// A file for the checkpoint fuzzers: the bytes go into an anonymous memory
// file (memfd), opened by path through /proc/self/fd, so the harnesses drive
// the same checkpoint::open(path) users call, without touching a disk.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <span>
#include <string>

#include "fuzz_check.h"

namespace ferry::fuzzing {

class memory_file {
 public:
  memory_file() : fd_(::memfd_create("ferry-fuzz", MFD_CLOEXEC)) { FUZZ_CHECK(fd_ >= 0); }
  ~memory_file() { ::close(fd_); }
  memory_file(const memory_file&) = delete;
  memory_file& operator=(const memory_file&) = delete;

  /// Replaces the content with `bytes`; returns the path that opens it.
  std::string hold(std::span<const std::byte> bytes) {
    FUZZ_CHECK(::ftruncate(fd_, 0) == 0);
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      FUZZ_CHECK(n > 0);
      done += static_cast<std::size_t>(n);
    }
    return "/proc/self/fd/" + std::to_string(fd_);
  }

 private:
  int fd_;
};

}  // namespace ferry::fuzzing
