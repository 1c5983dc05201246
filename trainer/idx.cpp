#include "ferry/trainer/idx.h"

#define ZLIB_CONST  // next_in is a pointer to const
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "ferry/base/file.h"
#include "ferry/base/require.h"
#include "ferry/wire/bulk.h"
#include "ferry/wire/cursor.h"

namespace ferry::trainer {
namespace {

constexpr auto big = wire::byte_order::big;

// The checked header of an IDX file: its data fills the rest of the input,
// or (cut to its first entries) begins it.
struct idx_header {
  codec::dtype type = codec::dtype::u8;
  std::vector<std::uint32_t> dims;
  std::size_t header_bytes = 0;  // 4 + 4R
  std::size_t data_bytes = 0;    // what follows the header (or the entries kept)
};

std::string hex(std::uint8_t b) {
  static constexpr char digits[] = "0123456789abcdef";
  return {'0', 'x', digits[b >> 4], digits[b & 15]};
}

// The header's fields, each checked as in idx.h, and the size they announce
// (data_bytes); nothing about what follows the header.
result<idx_header, error> parse_fields(std::span<const std::byte> bytes, const idx_limits& lim) {
  // bad_magic as soon as a byte that is there is wrong, so that only
  // prefixes of valid files are `truncated`.
  for (std::size_t i = 0; i < 2 && i < bytes.size(); ++i) {
    FERRY_REQUIRE(bytes[i] == std::byte{0}, errc::bad_magic, "IDX magic");
  }
  wire::reader in(bytes);
  if (auto m = in.read_be<std::uint16_t>(); !m) return error(m.error(), "IDX magic");
  const auto code = in.read_be<std::uint8_t>();
  if (!code) return error(code.error(), "type code");
  idx_header h;
  if (auto t = idx_type_from_code(*code); t) {
    h.type = *t;
  } else {
    return error(t.error(), "type code " + hex(*code));
  }
  const auto rank = in.read_be<std::uint8_t>();
  if (!rank) return error(rank.error(), "rank");
  FERRY_REQUIRE(*rank != 0, trainer_errc::bad_idx_dimensions, "rank 0");
  FERRY_REQUIRE(*rank <= lim.max_dims, errc::limit_exceeded, "rank ", *rank, "; the limit is ", lim.max_dims);
  // Every field in file order, then the size they announce together.
  h.dims.reserve(*rank);
  for (unsigned k = 0; k < *rank; ++k) {
    const auto d = in.read_be<std::uint32_t>();
    if (!d) return make_error(d.error(), "extent ", k);
    FERRY_REQUIRE(*d != 0, trainer_errc::bad_idx_dimensions, "extent ", k, " is 0");
    FERRY_REQUIRE(*d <= lim.max_extent, errc::limit_exceeded, "extent ", k, " is ", *d, "; the limit is ",
                  lim.max_extent);
    h.dims.push_back(*d);
  }
  std::uint64_t data_bytes = codec::size_of(h.type);
  for (const std::uint32_t d : h.dims) {
    FERRY_REQUIRE(!__builtin_mul_overflow(data_bytes, std::uint64_t{d}, &data_bytes), errc::limit_exceeded,
                  "data size overflows 64 bits");
  }
  h.header_bytes = in.position();
  FERRY_REQUIRE(data_bytes <= lim.max_bytes && h.header_bytes <= lim.max_bytes - data_bytes, errc::limit_exceeded,
                data_bytes, " bytes of data; the limit is ", lim.max_bytes, " bytes with the header");
  h.data_bytes = static_cast<std::size_t>(data_bytes);  // <= max_bytes, which the caller could allocate
  return h;
}

// Cuts `h` to its first `first` entries of the outermost dimension when
// 0 < first < that extent; says whether it did.
bool cut_to_first(idx_header& h, std::size_t first) {
  if (first == 0 || first >= h.dims[0]) return false;
  h.data_bytes = h.data_bytes / h.dims[0] * first;  // the extent divides it exactly
  h.dims[0] = static_cast<std::uint32_t>(first);
  return true;
}

// The checked header of an IDX file whose data fills the rest of `bytes`:
// everything the layout in idx.h requires, checked before anything of the
// announced size is allocated. With 0 < first < the outermost extent, of
// an array cut to its first `first` entries: their data must be there, and
// what follows them is not looked at.
result<idx_header, error> parse_header(std::span<const std::byte> bytes, const idx_limits& lim, std::size_t first = 0) {
  FERRY_TRY_ASSIGN(idx_header h, parse_fields(bytes, lim));
  const std::size_t present = bytes.size() - h.header_bytes;
  if (cut_to_first(h, first)) {
    FERRY_REQUIRE(h.data_bytes <= present, errc::truncated, "data: ", h.data_bytes, " bytes for the first ", first,
                  " entries, ", present, " present");
    return h;
  }
  FERRY_REQUIRE(h.data_bytes <= present, errc::truncated, "data: ", h.data_bytes, " bytes announced, ", present,
                " present");
  FERRY_REQUIRE(h.data_bytes >= present, errc::trailing_bytes, present - h.data_bytes,
                " bytes after the data");
  return h;
}

// Frees a z_stream on every path out of gunzip().
class inflater {
 public:
  inflater() {
    // 16 + MAX_WBITS: a gzip wrapper (not zlib's, not raw deflate), whose
    // CRC-32 and ISIZE zlib checks.
    if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();
  }
  inflater(const inflater&) = delete;
  inflater& operator=(const inflater&) = delete;
  ~inflater() { inflateEnd(&zs_); }
  z_stream* get() noexcept { return &zs_; }

 private:
  z_stream zs_{};
};

bool starts_gzip_member(std::span<const std::byte> rest) noexcept {
  // One byte left that could begin a member: let inflate report the member
  // as truncated, as every other prefix of a valid file is.
  return !rest.empty() && rest[0] == std::byte{0x1f} && (rest.size() == 1 || rest[1] == std::byte{0x8b});
}

// The bytes a gzip stream inflates to: at most `max_out` of them, or
// limit_exceeded. The output grows geometrically from a first guess that
// the compressed size justifies; deflate cannot expand more than 1032:1.
// Inflating stops after `stop_at` bytes: the rest of the stream (and its
// CRC-32) is then neither inflated nor checked.
result<std::vector<std::byte>, error> gunzip(std::span<const std::byte> in, std::uint64_t max_out,
                                             std::size_t stop_at = SIZE_MAX) {
  const std::size_t cap = static_cast<std::size_t>(std::min<std::uint64_t>(max_out, SIZE_MAX));
  constexpr std::size_t max_ratio = 1032;
  constexpr std::size_t min_chunk = std::size_t{1} << 16;
  // First guess: the last member's ISIZE (its length mod 2^32, exact for
  // single-member files under 4 GiB), believed only as far as the
  // compressed bytes could make it true.
  std::size_t isize = 0;
  if (in.size() >= 4) isize = *wire::reader(in).read_le_at<std::uint32_t>(in.size() - 4);
  const std::size_t possible = in.size() > cap / max_ratio ? cap : in.size() * max_ratio;
  const std::size_t guess = std::min({isize != 0 ? isize : min_chunk, possible, cap, stop_at});

  std::vector<std::byte> out(guess);
  std::size_t produced = 0;
  std::size_t consumed = 0;
  inflater z;
  z_stream* zs = z.get();
  for (;;) {
    // With the buffer full, inflate into one spare byte: the buffer grows
    // only once the stream is known to hold more (so an exact first guess
    // is never doubled), and past the cap that byte is the error.
    std::byte spare{};
    const bool full = produced == out.size();
    const std::size_t in_chunk = std::min<std::size_t>(in.size() - consumed, UINT_MAX);
    const std::size_t out_chunk = full ? 1 : std::min<std::size_t>(out.size() - produced, UINT_MAX);
    zs->next_in = static_cast<const Bytef*>(static_cast<const void*>(in.data() + consumed));
    zs->avail_in = static_cast<uInt>(in_chunk);
    zs->next_out = static_cast<Bytef*>(static_cast<void*>(full ? &spare : out.data() + produced));
    zs->avail_out = static_cast<uInt>(out_chunk);
    const int ret = inflate(zs, Z_NO_FLUSH);
    consumed += in_chunk - zs->avail_in;
    const std::size_t made = out_chunk - zs->avail_out;
    if (full && made != 0) {
      FERRY_REQUIRE(out.size() != cap, errc::limit_exceeded, "gzip: inflates to more than ", cap, " bytes");
      out.resize(std::min(stop_at, out.size() > cap / 2 ? cap : std::min(cap, std::max(out.size() * 2, min_chunk))));
      out[produced] = spare;
    }
    produced += made;
    if (produced >= stop_at) {
      out.resize(stop_at);
      return out;
    }
    switch (ret) {
      case Z_OK:
        break;
      case Z_STREAM_END: {
        const auto rest = in.subspan(consumed);
        if (rest.empty()) {
          out.resize(produced);
          return out;
        }
        FERRY_REQUIRE(starts_gzip_member(rest), errc::trailing_bytes, "gzip: ", rest.size(),
                      " bytes after the last member");
        if (inflateReset(zs) != Z_OK) return error(trainer_errc::bad_gzip, "gzip: reset failed");
        break;
      }
      case Z_BUF_ERROR:
        // No progress although the output has room: the input ran out
        // before the member's end.
        return error(errc::truncated, "gzip: stream ends before its trailer");
      case Z_MEM_ERROR:
        throw std::bad_alloc();
      default:  // Z_DATA_ERROR, Z_NEED_DICT (no dictionary exists in gzip), Z_STREAM_ERROR
        return error(trainer_errc::bad_gzip,
                     std::string("gzip: ") + (zs->msg != nullptr ? zs->msg : "invalid stream"));
    }
  }
}

// Also true for a lone 1F, the first byte of a gzip stream cut short, so
// that every prefix of a gzip'd file is `truncated`.
bool is_gzip(std::span<const std::byte> bytes) noexcept { return starts_gzip_member(bytes); }

// Decodes a raw IDX file held in `file` (its first `first` entries, if not
// 0), converting its data in place.
result<idx_array, error> decode_owned(std::vector<std::byte> file, const idx_limits& lim, std::size_t first) {
  FERRY_TRY_ASSIGN(idx_header h, parse_header(file, lim, first));
  std::memmove(file.data(), file.data() + h.header_bytes, h.data_bytes);
  file.resize(h.data_bytes);
  wire::convert_in_place(file, codec::size_of(h.type), big, wire::host_order);
  return idx_array{h.type, std::move(h.dims), std::move(file)};
}

error missing_file(const std::filesystem::path& plain) {
  return error::from_errno(ENOENT, plain.string() + "[.gz]");
}

// `<dir>/<name>`, or `<dir>/<name>.gz` when only that exists.
result<std::filesystem::path, error> find_idx(const std::filesystem::path& dir, const std::string& name) {
  const auto plain = dir / name;
  std::error_code ec;
  if (std::filesystem::status(plain, ec).type() != std::filesystem::file_type::not_found) return plain;
  auto gz = plain;
  gz += ".gz";
  if (std::filesystem::status(gz, ec).type() != std::filesystem::file_type::not_found) return gz;
  return missing_file(plain);
}

error file_error(const std::filesystem::path& path, error_code c, const std::string& what) {
  return error(c, path.string() + ": " + what);
}

}  // namespace

result<codec::dtype> idx_type_from_code(std::uint8_t code) noexcept {
  switch (code) {
    case 0x08: return codec::dtype::u8;
    case 0x09: return codec::dtype::i8;
    case 0x0B: return codec::dtype::i16;
    case 0x0C: return codec::dtype::i32;
    case 0x0D: return codec::dtype::f32;
    case 0x0E: return codec::dtype::f64;
    default: return trainer_errc::bad_idx_type;
  }
}

result<idx_array, error> decode_idx(std::span<const std::byte> bytes, const idx_limits& limits) {
  FERRY_TRY_ASSIGN(idx_header h, parse_header(bytes, limits));
  std::vector<std::byte> data(h.data_bytes);
  wire::convert(bytes.subspan(h.header_bytes), big, data, wire::host_order, codec::size_of(h.type));
  return idx_array{h.type, std::move(h.dims), std::move(data)};
}

result<idx_array, error> decode_idx_file(std::vector<std::byte> file, const idx_limits& limits, std::size_t first) {
  if (!is_gzip(file)) return decode_owned(std::move(file), limits, first);
  std::size_t stop_at = SIZE_MAX;
  if (first != 0) {
    // Inflate the longest header the limits allow (parse_fields refuses a
    // longer one before reading its extents), then only as far as the
    // entries kept.
    const std::size_t longest_header = 4 + 4 * std::min<std::size_t>(limits.max_dims, 255);
    FERRY_TRY_ASSIGN(const auto head, gunzip(file, limits.max_bytes, longest_header));
    FERRY_TRY_ASSIGN(idx_header h, parse_fields(head, limits));
    if (cut_to_first(h, first)) stop_at = h.header_bytes + h.data_bytes;
  }
  FERRY_TRY_ASSIGN(auto inflated, gunzip(file, limits.max_bytes, stop_at));
  file = {};  // the compressed bytes are no longer needed
  return decode_owned(std::move(inflated), limits, first);
}

result<idx_array, error> read_idx(const std::filesystem::path& path, const idx_limits& limits, std::size_t first) {
  // No IDX file within the limits is longer than max_bytes raw, nor gzip'd
  // (stored deflate blocks add 5 bytes per 64 KiB): a file of more than
  // twice the limit is refused before it is read into memory.
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  FERRY_REQUIRE(ec || limits.max_bytes > UINTMAX_MAX / 2 || size <= 2 * limits.max_bytes, errc::limit_exceeded,
                path.string(), ": ", size, " bytes; the limit is ", limits.max_bytes, " decoded");
  FERRY_TRY_ASSIGN(auto bytes, base::read_file(path));
  auto r = decode_idx_file(std::move(bytes), limits, first);
  if (!r) return r.error().wrap(path.string());
  return r;
}

result<dataset, error> load_dataset(const std::filesystem::path& dir, std::string_view split, std::uint32_t classes,
                                    const idx_limits& limits, std::size_t first) {
  assert(classes >= 1);
  const std::string prefix(split);
  FERRY_TRY_ASSIGN(const auto images_path, find_idx(dir, prefix + "-images-idx3-ubyte"));
  FERRY_TRY_ASSIGN(const auto labels_path, find_idx(dir, prefix + "-labels-idx1-ubyte"));
  FERRY_TRY_ASSIGN(idx_array images, read_idx(images_path, limits, first));
  if (images.type != codec::dtype::u8) {
    return file_error(images_path, trainer_errc::bad_idx_type,
                      "images must be U8, not " + std::string(codec::name(images.type)));
  }
  FERRY_REQUIRE(images.dims.size() == 3, trainer_errc::bad_idx_dimensions, images_path.string(),
                ": images must have 3 dimensions, not ", images.dims.size());
  FERRY_TRY_ASSIGN(idx_array labels, read_idx(labels_path, limits, first));
  if (labels.type != codec::dtype::u8) {
    return file_error(labels_path, trainer_errc::bad_idx_type,
                      "labels must be U8, not " + std::string(codec::name(labels.type)));
  }
  FERRY_REQUIRE(labels.dims.size() == 1, trainer_errc::bad_idx_dimensions, labels_path.string(),
                ": labels must have 1 dimension, not ", labels.dims.size());
  FERRY_REQUIRE(labels.dims[0] == images.dims[0], trainer_errc::count_mismatch, labels_path.string(), ": ",
                labels.dims[0], " labels for ", images.dims[0], " images");
  dataset out;
  out.count = images.dims[0];
  out.rows = images.dims[1];
  out.cols = images.dims[2];
  out.labels.resize(labels.data.size());
  for (std::size_t i = 0; i < out.labels.size(); ++i) {
    const auto label = std::to_integer<std::uint8_t>(labels.data[i]);
    FERRY_REQUIRE(label < classes, trainer_errc::bad_label, labels_path.string(), ": sample ", i, " has label ",
                  label, "; there are ", classes, " classes");
    out.labels[i] = label;
  }
  labels = {};
  out.images.resize(images.data.size());
  std::memcpy(out.images.data(), images.data.data(), images.data.size());
  return out;
}

}  // namespace ferry::trainer
