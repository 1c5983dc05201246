// ferry/checkpoint/detail/npy.h: INTERNAL. The .npy and .npz decoders
// behind checkpoint::open() and the pieces save_npy() and save_npz() share.
// npy.h states the rules. Not part of the API.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/detail/zip.h"
#include "ferry/checkpoint/npy.h"

namespace ferry::checkpoint::detail {

/// The tensor a parsed header describes: row-major strides, or
/// column-major ones for fortran_order (no transpose), offset 0.
[[nodiscard]] result<tensor_info, error> npy_tensor(const npy_header& h, std::string name, std::uint32_t storage);

/// Parses a .npy file of `size` bytes read through `read` (one tensor,
/// "arr_0"). Contexts do not name the file.
[[nodiscard]] result<parsed_file, error> parse_npy(std::uint64_t size, const zip_read_at& read,
                                                   const read_options& opt);

/// Whether a zip directory is an .npz: no record is called */data.pkl and
/// every record's name ends in ".npy". (A .pt file is told first.)
[[nodiscard]] bool looks_like_npz(const zip_directory& dir) noexcept;

/// Parses an .npz whose directory is `dir` (npz.cpp): one tensor per
/// record, its header read (inflated, for a deflated record, just far
/// enough). Fills parsed_file::npz, one source per storage.
[[nodiscard]] result<parsed_file, error> parse_npz(zip_directory&& dir, const zip_read_at& read,
                                                   const read_options& opt);

/// The array data of deflated record `src` (parsed_file::npz), inflated
/// into `data` (exactly src's data bytes), the record's CRC-32 checked over
/// all of its inflated bytes. Errors: bad_deflate, crc32_mismatch,
/// truncated, io_error.
[[nodiscard]] result<void, error> inflate_npz_data(const npz_source& src, const zip_read_at& read,
                                                   std::span<std::byte> data);

/// The CRC-32 of record `src`'s bytes as the zip stores them uncompressed
/// (inflating a deflated one): what verify() checks. Errors: bad_deflate,
/// truncated, io_error.
[[nodiscard]] result<std::uint32_t, error> npz_record_crc32(const npz_source& src, const zip_read_at& read);

/// A tensor made ready to write as a .npy: its header, and its data as
/// host-order bytes in the order the header says (row-major, or
/// column-major when the view is exactly that), gathered when the view is
/// neither.
struct npy_payload {
  std::vector<std::byte> header;
  std::span<const std::byte> data;  ///< host order; views the ref's storage or `gathered`
  std::vector<std::byte> gathered;
  std::size_t width = 1;  ///< the unit of byte order (codec::order_width)
  wire::byte_order order = wire::host_order;

  [[nodiscard]] std::uint64_t size() const noexcept { return header.size() + data.size(); }
  /// Calls `sink` with the header, then the data in `order`, converted a
  /// piece at a time (nothing is converted when the order is the host's).
  [[nodiscard]] result<void, error> emit(const std::function<result<void, error>(std::span<const std::byte>)>& sink) const;
};

/// Checks `t` and prepares it. Errors: unsupported_npy_dtype,
/// view_out_of_bounds, shape_overflow, limit_exceeded, bad_value.
[[nodiscard]] result<npy_payload, error> prepare_npy(const tensor_ref& t, wire::byte_order order, const limits& lim);

}  // namespace ferry::checkpoint::detail
