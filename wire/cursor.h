// ferry/wire/cursor.h: bounds-checked reader and writer over byte spans.
//
// The reader is the one place ferry's decoders touch untrusted bytes. Its
// contract:
// - Every read either succeeds completely and advances the position, or
//   fails with an errc and leaves the position where it was.
// - Every bound check is written so it cannot overflow
//   (`n <= size - pos`, never `pos + n <= size`), on 32-bit size_t too.
// - Nothing here allocates; lengths read from the input are checked against
//   the bytes that remain (and a caller's limit) before anyone can act on them.
// - No exceptions; errors are the values of ferry::errc documented below.
//
// Scalars use the layouts of wire/byte_order.h, varints those of
// wire/varint.h. A length-prefixed byte string is a varint length followed by
// that many bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "ferry/wire/bulk.h"
#include "ferry/wire/byte_order.h"
#include "ferry/base/error.h"
#include "ferry/wire/varint.h"

namespace ferry::wire {

class reader {
 public:
  // The reader views `in`; the bytes must outlive it.
  constexpr explicit reader(std::span<const std::byte> in) noexcept : in_(in) {}

  [[nodiscard]] constexpr std::size_t position() const noexcept { return pos_; }
  [[nodiscard]] constexpr std::size_t size() const noexcept { return in_.size(); }
  [[nodiscard]] constexpr std::size_t remaining() const noexcept { return in_.size() - pos_; }
  [[nodiscard]] constexpr bool at_end() const noexcept { return pos_ == in_.size(); }
  /// The bytes not read yet.
  [[nodiscard]] constexpr std::span<const std::byte> rest() const noexcept { return in_.subspan(pos_); }

  /// One scalar stored in `order`. Errors: truncated.
  template <scalar T>
  constexpr result<T> read(byte_order order) noexcept {
    if (remaining() < sizeof(T)) return errc::truncated;
    const T v = load<T>(in_.data() + pos_, order);
    pos_ += sizeof(T);
    return v;
  }

  /// `out.size()` scalars stored contiguously in `order`, through the bulk
  /// kernels. Errors: truncated (out is left unspecified then).
  template <scalar T>
  result<void> read_array(std::span<T> out, byte_order order) noexcept {
    if (out.size() > remaining() / sizeof(T)) return errc::truncated;
    const std::size_t n = out.size() * sizeof(T);
    load_array<T>(in_.subspan(pos_, n), order, out);
    pos_ += n;
    return {};
  }

  /// A view of the next n bytes. Errors: truncated.
  constexpr result<std::span<const std::byte>> read_bytes(std::size_t n) noexcept {
    if (n > remaining()) return errc::truncated;
    const auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

  /// Advances n bytes. Errors: truncated.
  constexpr result<void> skip(std::size_t n) noexcept {
    if (n > remaining()) return errc::truncated;
    pos_ += n;
    return {};
  }

  /// Moves to an absolute position (size() is allowed). Errors: out_of_range.
  constexpr result<void> seek(std::size_t pos) noexcept {
    if (pos > in_.size()) return errc::out_of_range;
    pos_ = pos;
    return {};
  }

  /// One canonical varint. Errors: truncated, varint_overlong, varint_overflow.
  template <std::unsigned_integral T = std::uint64_t>
  constexpr result<T> read_varint() noexcept {
    if (pos_ < in_.size()) {  // most varints are one byte
      const auto b = std::to_integer<std::uint8_t>(in_[pos_]);
      if (b < 0x80 && (std::numeric_limits<T>::digits >= 8 || b <= std::numeric_limits<T>::max())) {
        ++pos_;
        return static_cast<T>(b);
      }
    }
    FERRY_TRY_ASSIGN(const decoded<T> d, decode_varint<T>(rest()));
    pos_ += d.size;
    return d.value;
  }

  /// One zigzag-encoded signed varint. Errors: as read_varint().
  template <std::signed_integral S = std::int64_t>
  constexpr result<S> read_zigzag() noexcept {
    FERRY_TRY_ASSIGN(const auto u, read_varint<std::make_unsigned_t<S>>());
    return zigzag_decode(u);
  }

  /// An element count for a container whose elements take at least
  /// `min_element_bytes` bytes each (>= 1) in the input. Checking it against
  /// the bytes that remain bounds any allocation by the input's size.
  /// Errors: as read_varint(); limit_exceeded if count > max_count;
  /// truncated if the remaining bytes cannot hold count elements.
  /// The position is unchanged on error.
  constexpr result<std::size_t> read_count(std::size_t min_element_bytes,
                                           std::size_t max_count) noexcept {
    const std::size_t start = pos_;
    FERRY_TRY_ASSIGN(const std::uint64_t c, read_varint<std::uint64_t>());
    if (c > max_count) {
      pos_ = start;
      return errc::limit_exceeded;
    }
    const auto count = static_cast<std::size_t>(c);  // <= max_count, so it fits
    if (min_element_bytes != 0 && count > remaining() / min_element_bytes) {
      pos_ = start;
      return errc::truncated;
    }
    return count;
  }

  /// A varint length then that many bytes, viewed in place.
  /// Errors: as read_count(1, max_length).
  constexpr result<std::span<const std::byte>> read_length_prefixed(std::size_t max_length) noexcept {
    FERRY_TRY_ASSIGN(const std::size_t n, read_count(1, max_length));
    return read_bytes(n);
  }

 private:
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

/// Writes into a fixed span (failing with no_space when it is full) or
/// appends to a std::vector<std::byte> (growing it). Writes are whole or
/// nothing: on error, nothing of the failed value was written.
///
/// A vector sink grows geometrically, so while the writer lives the vector
/// may be longer than position(); flush() trims it to exactly the bytes
/// written, and so does the destructor (which only ever shrinks the vector).
class writer {
 public:
  // Writes into `out`, which must outlive the writer.
  constexpr explicit writer(std::span<std::byte> out) noexcept
      : data_(out.data()), capacity_(out.size()) {}
  // Appends to `sink` (from its current end), which must outlive the writer.
  explicit writer(std::vector<std::byte>& sink) noexcept
      : data_(sink.data()), capacity_(sink.size()), pos_(sink.size()), sink_(&sink) {}
  writer(const writer&) = delete;
  writer& operator=(const writer&) = delete;
  ~writer() {
    if (sink_ != nullptr && sink_->size() > pos_) sink_->resize(pos_);
  }

  /// Trims a vector sink to the bytes written; writing may continue.
  void flush() noexcept {
    if (sink_ != nullptr && sink_->size() > pos_) {
      sink_->resize(pos_);  // shrinking never allocates
      capacity_ = pos_;
    }
  }

  /// Bytes written so far.
  [[nodiscard]] constexpr std::size_t position() const noexcept { return pos_; }
  [[nodiscard]] constexpr std::span<const std::byte> written() const noexcept { return {data_, pos_}; }

  template <scalar T>
  result<void> write(T v, byte_order order) noexcept {
    std::byte* p = reserve(sizeof(T));
    if (p == nullptr) return errc::no_space;
    store<T>(v, p, order);
    return {};
  }

  template <scalar T>
  result<void> write_array(std::span<const T> values, byte_order order) noexcept {
    std::byte* p = reserve(values.size_bytes());
    if (p == nullptr) return errc::no_space;
    store_array<T>(values, {p, values.size_bytes()}, order);
    return {};
  }

  /// `native` holds host-order elements of `width` bytes; they are written
  /// converted to `order` through the bulk kernels.
  // Requires: width is 1, 2, 4 or 8 and divides native.size().
  result<void> write_elements(std::span<const std::byte> native, std::size_t width, byte_order order) noexcept {
    std::byte* p = reserve(native.size());
    if (p == nullptr) return errc::no_space;
    convert(native, host_order, {p, native.size()}, order, width);
    return {};
  }

  result<void> write_bytes(std::span<const std::byte> bytes) noexcept {
    std::byte* p = reserve(bytes.size());
    if (p == nullptr) return errc::no_space;
    if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
    return {};
  }
  result<void> write_varint(std::uint64_t v) noexcept {
    std::byte* p = reserve(varint_size(v));
    if (p == nullptr) return errc::no_space;
    encode_varint(v, p);
    return {};
  }
  result<void> write_zigzag(std::int64_t v) noexcept { return write_varint(zigzag_encode(v)); }
  /// A varint length, then the bytes.
  result<void> write_length_prefixed(std::span<const std::byte> bytes) noexcept;

 private:
  // Room for n more bytes at the end, or nullptr (no_space / allocation
  // failure). Inline for the common case of room to spare.
  std::byte* reserve(std::size_t n) noexcept {
    if (n <= capacity_ - pos_) [[likely]] {
      std::byte* p = data_ + pos_;
      pos_ += n;
      return p;
    }
    return grow(n);
  }
  std::byte* grow(std::size_t n) noexcept;

  std::byte* data_;
  std::size_t capacity_;
  std::size_t pos_ = 0;
  std::vector<std::byte>* sink_ = nullptr;
};

}  // namespace ferry::wire
