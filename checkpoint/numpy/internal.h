// ferry/checkpoint/numpy/internal.h: INTERNAL. The .npy and .npz decoders
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
#include "ferry/checkpoint/zip/zip.h"
#include "ferry/checkpoint/npy.h"

namespace ferry::checkpoint::detail {

/// Where an .npz tensor's bytes lie: its zip record, and the array data
/// inside the record after the .npy header.
struct npz_source {
  std::uint16_t method = 0;              ///< 0 stored, 8 deflated
  std::uint64_t record_offset = 0;       ///< the record's first (compressed) byte in the file
  std::uint64_t compressed_size = 0;
  std::uint64_t record_size = 0;         ///< uncompressed: the .npy header and data
  std::uint32_t crc32 = 0;               ///< of the uncompressed record
  std::uint64_t header_bytes = 0;        ///< the .npy header: data starts here in the record
  std::string name;                      ///< the zip record's name, for errors
};

/// An .npz's storages, one record each (npz.cpp): a deflated record is
/// inflated into memory, its CRC-32 always checked; a stored one is read
/// by the reader as a range, its record's CRC-32 (which covers the .npy
/// header too) checked here under fetch_checks::every_checksum. verify()
/// checks every record's CRC-32.
class npz_storages final : public storage_source {
 public:
  explicit npz_storages(std::vector<npz_source> records) noexcept : records_(std::move(records)) {}
  [[nodiscard]] result<std::shared_ptr<const storage_buffer>, error> load(const parsed_file& f,
                                                                          const load_request& r) const override;
  [[nodiscard]] std::optional<result<void, error>> verify(
      const parsed_file& f, const mapped_file* file, const std::filesystem::path& path,
      const std::function<void(std::uint64_t)>& progress) const override;
  [[nodiscard]] bool direct_reads() const noexcept override { return false; }

 private:
  std::vector<npz_source> records_;
};

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
/// enough). Its source is an npz_storages, one record per storage.
[[nodiscard]] result<parsed_file, error> parse_npz(zip_directory&& dir, const zip_read_at& read,
                                                   const read_options& opt);

/// The array data of deflated record `src`, inflated
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
