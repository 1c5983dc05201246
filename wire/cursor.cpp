#include "ferry/wire/cursor.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace ferry::wire {

std::byte* writer::grow(std::size_t n) noexcept {
  if (sink_ == nullptr || n > sink_->max_size() - pos_) return nullptr;
  try {
    // Capacity grows geometrically (amortised O(1) appends); the size grows
    // in steps of at most 64 KiB, so the zero-filling resize() touches each
    // byte just before it is written, while it is in cache. flush() trims.
    constexpr std::size_t step = std::size_t{64} << 10;
    const std::size_t need = pos_ + n;
    if (need > sink_->capacity()) sink_->reserve(std::max({need, 2 * sink_->capacity(), std::size_t{256}}));
    sink_->resize(std::max(need, std::min(sink_->capacity(), pos_ + step)));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  data_ = sink_->data();
  capacity_ = sink_->size();
  std::byte* p = data_ + pos_;
  pos_ += n;
  return p;
}

result<void> writer::write_length_prefixed(std::span<const std::byte> bytes) noexcept {
  const std::size_t head = varint_size(bytes.size());
  if (bytes.size() > SIZE_MAX - head) return errc::no_space;
  std::byte* p = reserve(head + bytes.size());
  if (p == nullptr) return errc::no_space;
  encode_varint(bytes.size(), p);
  if (!bytes.empty()) std::memcpy(p + head, bytes.data(), bytes.size());
  return {};
}

}  // namespace ferry::wire
