#include "ferry/wire/cursor.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace ferry::wire {

std::byte* writer::reserve(std::size_t n) noexcept {
  if (n > capacity_ - pos_) {
    if (sink_ == nullptr || n > sink_->max_size() - pos_) return nullptr;
    try {
      // std::vector grows its capacity geometrically, so appending stays
      // amortised O(1) and only the n new bytes are value-initialised.
      sink_->resize(pos_ + n);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
    data_ = sink_->data();
    capacity_ = sink_->size();
  }
  std::byte* p = data_ + pos_;
  pos_ += n;
  return p;
}

result<void> writer::write_bytes(std::span<const std::byte> bytes) noexcept {
  std::byte* p = reserve(bytes.size());
  if (p == nullptr) return errc::no_space;
  if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
  return {};
}

result<void> writer::write_varint(std::uint64_t v) noexcept {
  std::byte* p = reserve(varint_size(v));
  if (p == nullptr) return errc::no_space;
  encode_varint(v, p);
  return {};
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
