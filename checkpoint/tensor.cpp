#include "ferry/checkpoint/tensor.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace ferry::checkpoint {

std::uint64_t tensor_info::numel() const noexcept {
  std::uint64_t n = 1;
  for (const auto d : shape) n *= d;  // checked by check_view() before any tensor_info exists
  return n;
}

std::uint64_t tensor_info::nbytes() const noexcept { return numel() * codec::size_of(dtype); }

bool tensor_info::is_contiguous() const noexcept {
  if (strides.size() != shape.size()) return false;
  if (numel() == 0) return true;
  std::uint64_t expected = 1;
  for (std::size_t k = shape.size(); k-- > 0;) {
    if (shape[k] != 1 && strides[k] != expected) return false;
    expected *= shape[k];
  }
  return true;
}

std::vector<std::uint64_t> contiguous_strides(std::span<const std::uint64_t> shape) {
  std::vector<std::uint64_t> s(shape.size());
  std::uint64_t step = 1;
  for (std::size_t k = shape.size(); k-- > 0;) {
    s[k] = step;
    step *= shape[k] == 0 ? 1 : shape[k];
  }
  return s;
}

std::span<const std::byte> tensor::storage_bytes() const noexcept {
  return storage_ ? storage_->bytes() : std::span<const std::byte>{};
}

std::span<const std::byte> tensor::bytes() const noexcept {
  assert(info_.is_contiguous());
  const std::uint64_t n = info_.nbytes();
  if (n == 0) return {};
  return storage_bytes().subspan(static_cast<std::size_t>(info_.offset * codec::size_of(info_.dtype)),
                                 static_cast<std::size_t>(n));
}

std::vector<std::byte> tensor::contiguous_copy() const { return gather(ref()); }

std::vector<std::byte> gather(const tensor_ref& t) {
  const std::size_t width = codec::size_of(t.dtype);
  const std::size_t dims = t.shape.size();
  std::uint64_t numel = 1;
  for (const auto d : t.shape) numel *= d;
  std::vector<std::byte> out(static_cast<std::size_t>(numel * width));
  if (out.empty()) return out;
  const std::vector<std::uint64_t> row_major = contiguous_strides(t.shape);
  const std::span<const std::uint64_t> strides = t.strides.empty() ? std::span(row_major) : t.strides;
  const std::byte* base = t.storage.data();
  if (dims == 0 || std::equal(strides.begin(), strides.end(), row_major.begin())) {
    std::memcpy(out.data(), base + t.offset * width, out.size());
    return out;
  }
  // Odometer over the outer extents; the innermost one is copied element by
  // element.
  std::vector<std::uint64_t> index(dims, 0);
  std::uint64_t pos = t.offset;
  std::byte* dst = out.data();
  const std::uint64_t inner = t.shape[dims - 1];
  const std::uint64_t inner_stride = strides[dims - 1];
  for (;;) {
    std::uint64_t p = pos;
    for (std::uint64_t i = 0; i < inner; ++i, p += inner_stride, dst += width) {
      std::memcpy(dst, base + p * width, width);
    }
    std::size_t k = dims - 1;
    for (;;) {
      if (k == 0) return out;
      --k;
      pos += strides[k];
      if (++index[k] < t.shape[k]) break;
      pos -= strides[k] * index[k];
      index[k] = 0;
    }
  }
}

tensor_ref tensor::ref() const noexcept {
  return tensor_ref{info_.name, info_.dtype, info_.shape, info_.strides, info_.offset, storage_bytes()};
}

result<std::uint64_t> shape_bytes(std::span<const std::uint64_t> shape, std::uint64_t unit_bytes,
                                  std::uint64_t unit_elements) noexcept {
  constexpr std::uint64_t max_bytes = std::uint64_t{INT64_MAX};
  std::uint64_t nonzero = 1;
  bool empty = false;
  for (const std::uint64_t e : shape) {
    if (e == 0) empty = true;
    else if (__builtin_mul_overflow(nonzero, e, &nonzero)) return checkpoint_errc::shape_overflow;
  }
  const std::uint64_t units = nonzero / unit_elements + (nonzero % unit_elements != 0);
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(units, unit_bytes, &bytes) || bytes > max_bytes) return checkpoint_errc::shape_overflow;
  return empty ? 0 : bytes;
}

result<void> check_view(codec::dtype dtype, std::span<const std::uint64_t> shape,
                        std::span<const std::uint64_t> strides, std::uint64_t offset,
                        std::uint64_t storage_nbytes, std::size_t max_dims) noexcept {
  if (shape.size() > max_dims) return errc::limit_exceeded;
  if (strides.size() != shape.size()) return errc::bad_value;
  const std::uint64_t width = codec::size_of(dtype);
  FERRY_TRY(shape_bytes(shape, width));
  std::uint64_t last = offset;  // index of the last element
  bool empty = false;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0) {  // empty; the other extents' strides must not wrap either
      empty = true;
      continue;
    }
    std::uint64_t reach = 0;
    if (__builtin_mul_overflow(shape[k] - 1, strides[k], &reach) || __builtin_add_overflow(last, reach, &last)) {
      return checkpoint_errc::shape_overflow;
    }
  }
  if (empty) return {};
  // The last element's end, in bytes: (last + 1) * width <= storage_nbytes.
  std::uint64_t end = 0;
  if (__builtin_add_overflow(last, 1, &end) || __builtin_mul_overflow(end, width, &end)) {
    return checkpoint_errc::shape_overflow;
  }
  if (end > storage_nbytes) return checkpoint_errc::view_out_of_bounds;
  return {};
}

bool valid_utf8(std::string_view s) noexcept {
  const auto at = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned c = at(i);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t n = 0;
    std::uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07, min = 0x10000;
    else return false;
    if (s.size() - i <= n) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      if ((at(i + k) & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (at(i + k) & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

bool valid_name(std::string_view name, std::size_t max_bytes) noexcept {
  return !name.empty() && name.size() <= max_bytes && valid_utf8(name);
}

}  // namespace ferry::checkpoint
