// ferry/checkpoint/tensor.h: tensors as a checkpoint describes, writes and
// hands them out.
//
//   tensor_info  what the file says of a tensor: name, dtype, shape, strides,
//                offset and which storage it views.
//   tensor_ref   a tensor in the caller's memory, to be written: the same
//                description plus the storage's bytes (host order).
//   tensor       a tensor fetched from a file: its info and shared ownership
//                of its storage's bytes in host order. Tensors over one
//                storage hold the same storage_buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/codec/dtype.h"
#include "ferry/checkpoint/error.h"

namespace ferry::checkpoint {

/// A tensor as recorded in a file.
struct tensor_info {
  std::string name;
  codec::dtype dtype = codec::dtype::f32;
  std::vector<std::uint64_t> shape;    ///< [] for a 0-d tensor
  std::vector<std::uint64_t> strides;  ///< in elements, one per extent
  std::uint64_t offset = 0;            ///< first element, from the storage's start
  std::uint32_t storage = 0;           ///< index into reader::storages()

  /// Product of the extents (1 for a 0-d tensor).
  [[nodiscard]] std::uint64_t numel() const noexcept;
  /// numel() * the dtype's size: the bytes of a contiguous copy.
  [[nodiscard]] std::uint64_t nbytes() const noexcept;
  /// Whether the strides are row-major for the shape (at any offset).
  [[nodiscard]] bool is_contiguous() const noexcept;
};

/// Row-major strides of `shape`, in elements.
[[nodiscard]] std::vector<std::uint64_t> contiguous_strides(std::span<const std::uint64_t> shape);

/// A tensor in memory, described for writing. Nothing is owned: the spans
/// must stay valid until the call that takes the ref returns.
struct tensor_ref {
  std::string_view name;
  codec::dtype dtype = codec::dtype::f32;
  std::span<const std::uint64_t> shape;
  /// Empty for row-major (contiguous) strides.
  std::span<const std::uint64_t> strides;
  std::uint64_t offset = 0;
  /// All of the storage the tensor views, in host order. In one call that
  /// takes several refs (save(), save_as(), save_pt()), refs whose storage
  /// spans are equal (same address and size) share one storage where their
  /// elements have one layout (size and byte-order unit).
  std::span<const std::byte> storage;
};

/// A storage's bytes in host order, as a reader hands them out: a mapping
/// of the file or a converted copy. Immutable once built, unless the reader
/// was opened with read_options::copy_on_write.
class storage_buffer {
 public:
  virtual ~storage_buffer() = default;
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return bytes_; }
  /// The same bytes, writable: private to this process (a copy-on-write
  /// mapping or a copy), so writes never reach the file. Empty unless the
  /// reader was opened with read_options::copy_on_write.
  [[nodiscard]] std::span<std::byte> mutable_bytes() const noexcept { return mutable_; }

 protected:
  std::span<const std::byte> bytes_;
  std::span<std::byte> mutable_;
};

/// A storage held in memory (a converted copy, a storage read without a
/// mapping, or one the caller built).
class owned_storage final : public storage_buffer {
 public:
  explicit owned_storage(std::vector<std::byte> bytes) noexcept : data_(std::move(bytes)) { bytes_ = data_; }
  [[nodiscard]] std::span<std::byte> writable() noexcept { return data_; }

 private:
  std::vector<std::byte> data_;
};

/// A tensor fetched from a checkpoint: a view in host order. Copies share
/// the storage; the storage lives as long as any tensor over it.
class tensor {
 public:
  tensor() = default;
  tensor(tensor_info info, std::shared_ptr<const storage_buffer> storage) noexcept
      : info_(std::move(info)), storage_(std::move(storage)) {}

  [[nodiscard]] const tensor_info& info() const noexcept { return info_; }
  [[nodiscard]] const std::string& name() const noexcept { return info_.name; }
  [[nodiscard]] codec::dtype dtype() const noexcept { return info_.dtype; }
  [[nodiscard]] std::span<const std::uint64_t> shape() const noexcept { return info_.shape; }
  [[nodiscard]] std::span<const std::uint64_t> strides() const noexcept { return info_.strides; }

  /// The whole storage the tensor views (host order). Tensors that share a
  /// storage in the file return the same span.
  [[nodiscard]] std::span<const std::byte> storage_bytes() const noexcept;
  [[nodiscard]] const std::shared_ptr<const storage_buffer>& storage() const noexcept { return storage_; }
  /// The tensor's own bytes when it is contiguous.
  // Requires: info().is_contiguous() or numel() == 0 (use contiguous_copy()).
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept;
  /// The elements in row-major order, gathered through the strides.
  [[nodiscard]] std::vector<std::byte> contiguous_copy() const;
  /// As a tensor_ref, for writing it elsewhere.
  [[nodiscard]] tensor_ref ref() const noexcept;

 private:
  tensor_info info_;
  std::shared_ptr<const storage_buffer> storage_;
};

/// The elements of `t` in row-major order, gathered through its strides.
// Requires: t passed check_view() against t.storage.
[[nodiscard]] std::vector<std::byte> gather(const tensor_ref& t);

/// The one shape rule of every reader and writer (NumPy's, which refuses
/// "array is too big"): the product of the non-zero extents times the
/// element size fits in 63 bits, a valid byte count for NumPy (npy_intp),
/// torch and ggml (int64) alike, and a zero extent makes the tensor empty
/// (so [0, 2^63-1, 2^63-1] is refused, not taken for 0 bytes). Elements come
/// in units of `unit_elements` taking `unit_bytes` (a ggml block; 1 and the
/// dtype's size otherwise); a partial unit counts whole. Returns the bytes
/// of the elements: 0 when empty. Errors: shape_overflow.
[[nodiscard]] result<std::uint64_t> shape_bytes(std::span<const std::uint64_t> shape, std::uint64_t unit_bytes,
                                                std::uint64_t unit_elements = 1) noexcept;

/// Checks a tensor's description against its storage's size in bytes:
/// dims, strides count, shape_bytes()'s rule, overflow and bounds. The one
/// rule that writers and readers apply.
[[nodiscard]] result<void> check_view(codec::dtype dtype, std::span<const std::uint64_t> shape,
                                      std::span<const std::uint64_t> strides, std::uint64_t offset,
                                      std::uint64_t storage_nbytes, std::size_t max_dims) noexcept;

/// Whether `name` is 1..max_bytes bytes of valid UTF-8 (no overlong forms,
/// no surrogates, nothing above U+10FFFF).
[[nodiscard]] bool valid_name(std::string_view name, std::size_t max_bytes) noexcept;
[[nodiscard]] bool valid_utf8(std::string_view s) noexcept;

}  // namespace ferry::checkpoint
