#include "ferry/wire/cursor.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace ferry::wire {

std::byte* writer::no_room() noexcept { return nullptr; }

std::byte* vector_writer::grow(std::size_t n) {
  if (n > sink_.max_size() - pos_) throw std::length_error("ferry::wire::vector_writer: too large");
  // Capacity grows geometrically (amortised O(1) appends); the size grows
  // in steps of at most 64 KiB, so the zero-filling resize() touches each
  // byte just before it is written, while it is in cache. flush() trims.
  constexpr std::size_t step = std::size_t{64} << 10;
  const std::size_t need = pos_ + n;
  if (need > sink_.capacity()) sink_.reserve(std::max({need, 2 * sink_.capacity(), std::size_t{256}}));
  sink_.resize(std::max(need, std::min(sink_.capacity(), pos_ + step)));
  data_ = sink_.data();
  capacity_ = sink_.size();
  std::byte* p = data_ + pos_;
  pos_ += n;
  return p;
}

}  // namespace ferry::wire
