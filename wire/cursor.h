// ferry/wire/cursor.h: bounds-checked reader and writer over byte spans.
//
// The reader is the one place ferry's decoders touch untrusted bytes: the
// graph archive, schema descriptors, frames, the .ferry header and trailer,
// zip directories, pickles, the handshake messages and IDX files all read
// through it, so its bounds checks are the ones to audit. Its contract:
// - Every read either succeeds completely and advances the position, or
//   fails with an errc and leaves the position where it was.
// - Every bound check is written so it cannot overflow
//   (`n <= size - pos`, never `pos + n <= size`), on 32-bit size_t too.
// - Nothing here allocates; lengths read from the input are checked against
//   the bytes that remain (and a caller's limit) before anyone can act on them.
// - No exceptions, no virtual calls; errors are the values of ferry::errc
//   documented below.
// - The limits a decoder shares with its reader (nesting depth, input
//   size, alignment) are one reader_options, as FlatBuffers' Verifier has
//   them.
//
// Scalars use the layouts of wire/byte_order.h, varints those of
// wire/varint.h. A length-prefixed byte string is a varint length followed by
// that many bytes. A reader made by sub() views part of its parent's bytes
// and knows where: offset() is a position in the outermost input, for the
// error a decoder reports.
#pragma once

#include <cassert>
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

/// The limits one reader enforces, each with a safe default (the shape of
/// FlatBuffers' Verifier::Options).
struct reader_options {
  /// enter() beyond this many levels fails with depth_exceeded. A decoder
  /// of nested input counts its levels here, so no input drives it (or
  /// its stack) deeper than its caller allowed.
  std::size_t max_depth = 64;
  /// reader::open() refuses a larger input with limit_exceeded: the bound
  /// on what one decode may touch, checked before a byte is read. (The
  /// constructor taking options does not check it: it serves decoders
  /// whose input their caller has already bounded, such as the pickle
  /// interpreter under limits::max_pickle_bytes.)
  std::size_t max_size = SIZE_MAX;
  /// When true, align() refuses a position that is not a multiple of its
  /// argument (counted from the start of the outermost input); when
  /// false, align() always succeeds.
  bool check_alignment = true;
};

class reader {
 public:
  // The reader views `in`; the bytes must outlive it.
  constexpr explicit reader(std::span<const std::byte> in) noexcept : in_(in) {}
  constexpr reader(std::span<const std::byte> in, const reader_options& opt) noexcept
      : in_(in), max_depth_(opt.max_depth), check_alignment_(opt.check_alignment) {}

  /// A reader of `in` under `opt`. Errors: limit_exceeded if in.size() > opt.max_size.
  static constexpr result<reader> open(std::span<const std::byte> in, const reader_options& opt) noexcept {
    if (in.size() > opt.max_size) return errc::limit_exceeded;
    return reader(in, opt);
  }

  [[nodiscard]] constexpr std::size_t position() const noexcept { return pos_; }
  [[nodiscard]] constexpr std::size_t size() const noexcept { return in_.size(); }
  [[nodiscard]] constexpr std::size_t remaining() const noexcept { return in_.size() - pos_; }
  [[nodiscard]] constexpr bool at_end() const noexcept { return pos_ == in_.size(); }
  /// The bytes not read yet.
  [[nodiscard]] constexpr std::span<const std::byte> rest() const noexcept { return in_.subspan(pos_); }
  /// All the bytes this reader views, read or not.
  [[nodiscard]] constexpr std::span<const std::byte> bytes() const noexcept { return in_; }
  /// Where this reader's first byte lies in the outermost input (0 unless
  /// made by sub()).
  [[nodiscard]] constexpr std::size_t base() const noexcept { return base_; }
  /// The position as an offset in the outermost input, for error contexts.
  [[nodiscard]] constexpr std::size_t offset() const noexcept { return base_ + pos_; }
  /// Levels entered and not left.
  [[nodiscard]] constexpr std::size_t depth() const noexcept { return depth_; }

  /// One scalar stored in `order`. Errors: truncated.
  template <scalar T>
  constexpr result<T> read(byte_order order) noexcept {
    if (remaining() < sizeof(T)) return errc::truncated;
    const T v = load<T>(in_.data() + pos_, order);
    pos_ += sizeof(T);
    return v;
  }
  /// One little-endian scalar. Errors: truncated.
  template <scalar T>
  constexpr result<T> read_le() noexcept { return read<T>(byte_order::little); }
  /// One big-endian scalar. Errors: truncated.
  template <scalar T>
  constexpr result<T> read_be() noexcept { return read<T>(byte_order::big); }

  /// Consecutive scalars stored in `order`, one bounds check for all of
  /// them: the fields of a fixed-size record in their file order.
  /// Errors: truncated (nothing is read then, and `out` keeps its values).
  template <scalar... T>
    requires(sizeof...(T) > 0)
  constexpr result<void> read_fields(byte_order order, T&... out) noexcept {
    constexpr std::size_t n = (sizeof(T) + ... + 0);
    if (remaining() < n) return errc::truncated;
    const std::byte* p = in_.data() + pos_;
    ((out = load<T>(p, order), p += sizeof(T)), ...);
    pos_ += n;
    return {};
  }
  template <scalar... T>
    requires(sizeof...(T) > 0)
  constexpr result<void> read_le(T&... out) noexcept { return read_fields(byte_order::little, out...); }
  template <scalar... T>
    requires(sizeof...(T) > 0)
  constexpr result<void> read_be(T&... out) noexcept { return read_fields(byte_order::big, out...); }

  /// The scalar stored in `order` at absolute position `at` of this
  /// reader; the position does not move. Errors: truncated.
  template <scalar T>
  [[nodiscard]] constexpr result<T> read_at(std::size_t at, byte_order order) const noexcept {
    if (at > in_.size() || sizeof(T) > in_.size() - at) return errc::truncated;
    return load<T>(in_.data() + at, order);
  }
  template <scalar T>
  [[nodiscard]] constexpr result<T> read_le_at(std::size_t at) const noexcept { return read_at<T>(at, byte_order::little); }
  template <scalar T>
  [[nodiscard]] constexpr result<T> read_be_at(std::size_t at) const noexcept { return read_at<T>(at, byte_order::big); }

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

  /// A view of the n bytes at absolute position `at`; the position does
  /// not move. Errors: truncated.
  [[nodiscard]] constexpr result<std::span<const std::byte>> bytes_at(std::size_t at, std::size_t n) const noexcept {
    if (at > in_.size() || n > in_.size() - at) return errc::truncated;
    return in_.subspan(at, n);
  }

  /// The bytes before the next `delim`, viewed in place; the position moves
  /// past the delimiter. Errors: truncated if no `delim` remains.
  constexpr result<std::span<const std::byte>> read_until(std::byte delim) noexcept {
    for (std::size_t i = pos_; i < in_.size(); ++i) {
      if (in_[i] == delim) {
        const auto s = in_.subspan(pos_, i - pos_);
        pos_ = i + 1;
        return s;
      }
    }
    return errc::truncated;
  }

  /// A reader of the next n bytes, which this one skips. The sub-reader
  /// starts at position 0, keeps this reader's limits and depth, and
  /// reports offset() in the outermost input. Errors: truncated.
  constexpr result<reader> sub(std::size_t n) noexcept {
    if (n > remaining()) return errc::truncated;
    reader r = sub_unchecked(pos_, n);
    pos_ += n;
    return r;
  }
  /// A reader of the n bytes at absolute position `at`; this reader does
  /// not move. Errors: truncated.
  [[nodiscard]] constexpr result<reader> sub_at(std::size_t at, std::size_t n) const noexcept {
    if (at > in_.size() || n > in_.size() - at) return errc::truncated;
    return sub_unchecked(at, n);
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

  /// Checks that offset() is a multiple of `alignment` (a power of two),
  /// when the options ask for alignment checks. The position does not
  /// move. Errors: out_of_range.
  [[nodiscard]] constexpr result<void> align(std::size_t alignment) const noexcept {
    if (check_alignment_ && (offset() & (alignment - 1)) != 0) return errc::out_of_range;
    return {};
  }

  /// One level deeper into nested input. Errors: depth_exceeded once
  /// depth() would pass the options' max_depth (the depth is unchanged then).
  constexpr result<void> enter() noexcept {
    if (depth_ >= max_depth_) return errc::depth_exceeded;
    ++depth_;
    return {};
  }
  /// One level back out.
  // Requires: depth() > 0 (a leave() without its enter() is a bug).
  constexpr void leave() noexcept {
    assert(depth_ > 0);
    --depth_;
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
  // Requires: at <= size() and n <= size() - at.
  [[nodiscard]] constexpr reader sub_unchecked(std::size_t at, std::size_t n) const noexcept {
    reader r(*this);
    r.in_ = in_.subspan(at, n);
    r.pos_ = 0;
    r.base_ = base_ + at;
    return r;
  }

  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  std::size_t base_ = 0;
  std::size_t depth_ = 0;
  std::size_t max_depth_ = reader_options{}.max_depth;
  bool check_alignment_ = reader_options{}.check_alignment;
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
