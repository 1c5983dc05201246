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

namespace detail {

/// The encodings both writers share, over a sink that hands out room:
/// Sink::reserve(n) returns n writable bytes, or nullptr when a fixed sink
/// is full; Sink::ok() and Sink::full(), of type Status, are what a write
/// returns then.
template <class Sink, class Status>
class basic_writer {
 public:
  using status = Status;

  /// Bytes written so far.
  [[nodiscard]] constexpr std::size_t position() const noexcept { return pos_; }
  [[nodiscard]] constexpr std::span<const std::byte> written() const noexcept { return {data_, pos_}; }

  template <scalar T>
  status write(T v, byte_order order) {
    std::byte* p = sink().reserve(sizeof(T));
    if (p == nullptr) return Sink::full();
    store<T>(v, p, order);
    return Sink::ok();
  }

  template <scalar T>
  status write_array(std::span<const T> values, byte_order order) {
    std::byte* p = sink().reserve(values.size_bytes());
    if (p == nullptr) return Sink::full();
    store_array<T>(values, {p, values.size_bytes()}, order);
    return Sink::ok();
  }

  /// `native` holds host-order elements of `width` bytes; they are written
  /// converted to `order` through the bulk kernels.
  // Requires: width is 1, 2, 4 or 8 and divides native.size().
  status write_elements(std::span<const std::byte> native, std::size_t width, byte_order order) {
    std::byte* p = sink().reserve(native.size());
    if (p == nullptr) return Sink::full();
    convert(native, host_order, {p, native.size()}, order, width);
    return Sink::ok();
  }

  status write_bytes(std::span<const std::byte> bytes) {
    std::byte* p = sink().reserve(bytes.size());
    if (p == nullptr) return Sink::full();
    if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
    return Sink::ok();
  }
  status write_varint(std::uint64_t v) {
    std::byte* p = sink().reserve(varint_size(v));
    if (p == nullptr) return Sink::full();
    encode_varint(v, p);
    return Sink::ok();
  }
  status write_zigzag(std::int64_t v) { return write_varint(zigzag_encode(v)); }
  /// A varint length, then the bytes.
  status write_length_prefixed(std::span<const std::byte> bytes) {
    const std::size_t head = varint_size(bytes.size());
    std::byte* p = bytes.size() > SIZE_MAX - head ? nullptr : sink().reserve(head + bytes.size());
    if (p == nullptr) return Sink::full();
    encode_varint(bytes.size(), p);
    if (!bytes.empty()) std::memcpy(p + head, bytes.data(), bytes.size());
    return Sink::ok();
  }

 protected:
  constexpr basic_writer(std::byte* data, std::size_t capacity, std::size_t pos) noexcept
      : data_(data), capacity_(capacity), pos_(pos) {}
  // Room for n more bytes at the end, if there is room to spare.
  std::byte* take(std::size_t n) noexcept {
    if (n <= capacity_ - pos_) [[likely]] {
      std::byte* p = data_ + pos_;
      pos_ += n;
      return p;
    }
    return nullptr;
  }

  std::byte* data_;
  std::size_t capacity_;
  std::size_t pos_;

 private:
  Sink& sink() noexcept { return static_cast<Sink&>(*this); }
};

}  // namespace detail

/// Writes into a fixed span, failing with no_space when it is full. Writes
/// are whole or nothing: on error, nothing of the failed value was written.
class writer : public detail::basic_writer<writer, result<void>> {
 public:
  // Writes into `out`, which must outlive the writer.
  constexpr explicit writer(std::span<std::byte> out) noexcept : basic_writer(out.data(), out.size(), 0) {}
  writer(const writer&) = delete;
  writer& operator=(const writer&) = delete;

 private:
  friend class detail::basic_writer<writer, result<void>>;
  static constexpr result<void> ok() noexcept { return {}; }
  static constexpr result<void> full() noexcept { return errc::no_space; }
  std::byte* reserve(std::size_t n) noexcept {
    std::byte* p = take(n);
    return p != nullptr ? p : no_room();
  }
  // Out of line, as vector_writer::grow() is: it keeps the compiler from
  // tracing a full buffer into the store it skips (GCC 12's
  // -Wstringop-overflow reports such paths).
  static std::byte* no_room() noexcept;
};

/// Appends to a std::vector<std::byte>, growing it; writes cannot fail
/// (running out of memory throws std::bad_alloc, as vector does).
///
/// The vector grows geometrically, so while the writer lives the vector
/// may be longer than position(); flush() trims it to exactly the bytes
/// written, and so does the destructor (which only ever shrinks the vector).
class vector_writer : public detail::basic_writer<vector_writer, void> {
 public:
  // Appends to `sink` (from its current end), which must outlive the writer.
  explicit vector_writer(std::vector<std::byte>& sink) noexcept
      : basic_writer(sink.data(), sink.size(), sink.size()), sink_(sink) {}
  vector_writer(const vector_writer&) = delete;
  vector_writer& operator=(const vector_writer&) = delete;
  ~vector_writer() { flush(); }

  /// Trims the vector to the bytes written; writing may continue.
  void flush() noexcept {
    if (sink_.size() > pos_) {
      sink_.resize(pos_);  // shrinking never allocates
      capacity_ = pos_;
    }
  }

 private:
  friend class detail::basic_writer<vector_writer, void>;
  static constexpr void ok() noexcept {}
  static constexpr void full() noexcept {}
  // Never null: grows the vector (inline for the common case of room).
  std::byte* reserve(std::size_t n) {
    std::byte* p = take(n);
    return p != nullptr ? p : grow(n);
  }
  std::byte* grow(std::size_t n);

  std::vector<std::byte>& sink_;
};

}  // namespace ferry::wire
