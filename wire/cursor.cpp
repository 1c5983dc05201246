#include "ferry/wire/cursor.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace ferry::wire {

std::byte* writer::grow(std::size_t n) noexcept {
  if (sink_ == nullptr || n > sink_->max_size() - pos_) return nullptr;
  try {
    // Geometric growth keeps appending amortised O(1) with one resize per
    // doubling; flush() trims the spare room.
    sink_->resize(std::max(pos_ + n, std::max<std::size_t>(2 * sink_->size(), 256)));
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
