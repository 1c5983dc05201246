// ferry/checkpoint/detail/fresh_storage.h: INTERNAL. A storage buffer
// written whole by the reader or a format's storage_source (an inflated
// record, a storage converted to host order). Not part of the API.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>

#include "ferry/checkpoint/tensor.h"

namespace ferry::checkpoint::detail {

// Memory a storage is written into whole (a deflated record inflated, a
// foreign-order storage converted), allocated without being zeroed: pages
// are committed only as they are written, so a deflated stream that ends
// short of its declared size costs only what it produced. From 2 MiB on it
// is aligned to 2 MiB and offered transparent huge pages (as NumPy does for
// its arrays): a 4 KiB page fault each, on a VM, cost more than converting
// the bytes (formats_bench, a swapped 256 MiB array: 1.0 s before).
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

}  // namespace ferry::checkpoint::detail
