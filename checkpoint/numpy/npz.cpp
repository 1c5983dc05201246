// NumPy .npz files (npy.h): the zip of .npy records read (records checked
// by zip/zip.h, deflated ones inflated with zlib) and written by
// save_npz() (over zip/zip.cpp's sequential zip writer: docs/gguf-and-numpy.md
// says why it is not libzip).
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <climits>
#include <cstring>
#include <set>

#include "ferry/base/file.h"
#include "ferry/base/require.h"
#include "ferry/checkpoint/detail/fresh_storage.h"
#include "ferry/checkpoint/numpy/internal.h"
#include "ferry/wire/bulk.h"
#include "ferry/wire/cursor.h"

namespace ferry::checkpoint {
namespace {

using detail::npz_source;
using detail::zip_read_at;
using detail::record_what;

constexpr std::size_t input_window = 256 * 1024;  // compressed bytes read at a time
// Deflate's largest ratio: a match of 258 bytes costs at least 2 bits (a
// 1-bit length code and a 1-bit distance code in a dynamic block), so one
// compressed byte yields at most 4 * 258 = 1032 bytes. A record that
// declares more is refused at open, before anything is allocated for it:
// what load() allocates for a deflated record stays within 1032 times the
// file's size.
constexpr std::uint64_t max_deflate_ratio = 1032;

// A deflated record inflated a piece at a time into the caller's memory:
// never more than the record's declared size comes out (the caller's
// spans add up to at most that), so a record cannot inflate past its bound.
class inflater {
 public:
  inflater(const npz_source& src, const zip_read_at& read) : src_(src), read_(read) {}
  inflater(const inflater&) = delete;
  inflater& operator=(const inflater&) = delete;
  ~inflater() {
    if (live_) inflateEnd(&z_);
  }

  // Fills `out` exactly. Errors: bad_deflate (the stream ends first or is
  // corrupt), truncated, io_error.
  result<void, error> produce(std::span<std::byte> out) {
    if (!live_) {
      if (inflateInit2(&z_, -MAX_WBITS) != Z_OK) return fail("zlib could not start");  // raw deflate
      live_ = true;
    }
    z_.next_out = reinterpret_cast<Bytef*>(out.data());  // zlib's byte type
    std::size_t left = out.size();
    while (left > 0) {
      // zlib may hold output back after taking in the last input byte (an
      // unfinished match): inflate again without input before giving up.
      if (z_.avail_in == 0 && consumed_ < src_.compressed_size) {
        FERRY_TRY(refill());
      }
      const auto chunk = static_cast<uInt>(std::min<std::size_t>(left, UINT32_MAX));
      z_.avail_out = chunk;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const std::size_t made = chunk - z_.avail_out;
      left -= made;
      if (rc == Z_STREAM_END && left > 0) return fail("inflates to fewer bytes than the record's size");
      if (rc == Z_BUF_ERROR && made == 0) {  // no progress: zlib needs input and none is left
        return fail("inflates to fewer bytes than the record's size");
      }
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) return fail("corrupt deflate stream");
    }
    crc_ = detail::zip_crc32(out, crc_);
    return {};
  }

  // After every declared byte: the stream MUST end here, having used
  // exactly the record's compressed bytes; returns the CRC-32 of all the
  // bytes produced.
  result<std::uint32_t, error> finish() {
    std::byte extra{};
    z_.next_out = reinterpret_cast<Bytef*>(&extra);  // zlib's byte type
    z_.avail_out = 1;
    for (;;) {
      if (z_.avail_in == 0 && consumed_ < src_.compressed_size) {
        FERRY_TRY(refill());
      }
      const int rc = inflate(&z_, Z_NO_FLUSH);
      if (z_.avail_out == 0) return fail("inflates to more bytes than the record's size");
      if (rc == Z_STREAM_END) break;
      const bool more_input = z_.avail_in == 0 && consumed_ < src_.compressed_size;
      if (rc != Z_OK && !(rc == Z_BUF_ERROR && more_input)) return fail("deflate stream does not end with the record");
      if (rc == Z_BUF_ERROR && !more_input) return fail("deflate stream does not end with the record");
    }
    if (z_.avail_in != 0 || consumed_ != src_.compressed_size) return fail("bytes after the deflate stream");
    return crc_;
  }

 private:
  error fail(std::string_view why) const { return make_error(checkpoint_errc::bad_deflate, record_what(src_.name), ": ", why); }

  // Requires: consumed_ < src_.compressed_size.
  result<void, error> refill() {
    buf_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(input_window, src_.compressed_size - consumed_)));
    FERRY_TRY(read_(src_.record_offset + consumed_, buf_));
    consumed_ += buf_.size();
    z_.next_in = reinterpret_cast<Bytef*>(buf_.data());  // zlib's byte type; inflate only reads it
    z_.avail_in = static_cast<uInt>(buf_.size());
    return {};
  }

  const npz_source& src_;
  const zip_read_at& read_;
  z_stream z_{};
  bool live_ = false;
  std::vector<std::byte> buf_;
  std::uint64_t consumed_ = 0;
  std::uint32_t crc_ = 0;
};

// The npy header at the start of a record, within its first `n` bytes: a
// stored record's `n` bytes are read at once; a deflated one inflates the
// 12 bytes that hold the header's length, then only the rest of the header
// (opening an .npz never inflates a record's data).
result<std::vector<std::byte>, error> record_head(const npz_source& src, const zip_read_at& read, std::size_t n) {
  std::vector<std::byte> head(n);
  if (src.method == 0) {
    FERRY_TRY(read(src.record_offset, head));
    return head;
  }
  inflater z(src, read);
  head.resize(std::min<std::size_t>(n, 12));
  FERRY_TRY(z.produce(head));
  std::size_t want = n;
  if (head.size() == 12) {  // magic (6), version (2), length: u16 in 1.0, u32 after
    wire::reader in(std::span<const std::byte>(head).subspan(8));
    const bool v1 = head[6] == std::byte{1};
    const std::uint64_t length = v1 ? in.read_le<std::uint16_t>().value_or(0) : in.read_le<std::uint32_t>().value_or(0);
    want = static_cast<std::size_t>(std::min<std::uint64_t>(n, (v1 ? 10 : 12) + length));
  }
  if (want > head.size()) {
    const std::size_t have = head.size();
    head.resize(want);
    FERRY_TRY(z.produce(std::span(head).subspan(have)));
  }
  return head;
}

}  // namespace

namespace detail {

bool looks_like_npz(const zip_directory& dir) noexcept {
  return std::all_of(dir.entries.begin(), dir.entries.end(), [](const zip_entry& e) {
    return e.record.name.ends_with(".npy");
  });
}

result<parsed_file, error> parse_npz(zip_directory&& dir, const zip_read_at& read, const read_options& opt) {
  const limits& lim = opt.lim;
  if (dir.entries.size() > lim.max_tensors) return make_error(errc::limit_exceeded, "npz records");
  const std::uint64_t dir_offset = dir.offset;
  FERRY_TRY_ASSIGN(zip_records zip, check_zip_records(std::move(dir), read, /*allow_deflate=*/true));
  parsed_file out;
  out.format = file_format::npz;
  out.data_end = dir_offset;
  out.alignment = 1;  // records lie where the zip put them: no promise
  std::vector<npz_source> records;
  records.reserve(zip.records.size());
  for (const zip_record& r : zip.records) {
    const std::string_view name = std::string_view(r.name).substr(0, r.name.size() - 4);  // without ".npy"
    FERRY_REQUIRE(valid_name(name, lim.max_name_bytes), checkpoint_errc::bad_name, record_what(r.name));
    npz_source src;
    src.method = r.method;
    src.record_offset = r.data_offset;
    src.compressed_size = r.compressed_size;
    src.record_size = r.size;
    src.crc32 = r.crc32;
    src.name = r.name;
    if (r.method == 8 && r.size / max_deflate_ratio > r.compressed_size) {
      return make_error(checkpoint_errc::bad_deflate, record_what(r.name), ": ", r.size, " bytes declared from ",
                        r.compressed_size, " compressed (deflate inflates at most ", max_deflate_ratio, " to 1)");
    }
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(r.size, 12 + lim.max_npy_header_bytes));
    FERRY_TRY_ASSIGN(const std::vector<std::byte> head, record_head(src, read, n));
    auto h = parse_npy_header(head, lim);
    if (!h) return h.error().wrap(record_what(r.name));
    auto order = npy_order(*h, opt.npy_native_order);
    if (!order) return order.error().wrap(record_what(r.name));
    const std::uint64_t present = r.size - h->data_offset;  // data_offset <= n <= size
    FERRY_REQUIRE(h->data_bytes <= present, errc::truncated, record_what(r.name), ": npy data of ", h->data_bytes,
                  " bytes announced, ", present, " present");
    FERRY_REQUIRE(h->data_bytes == present, errc::trailing_bytes, record_what(r.name), ": after the npy data");
    src.header_bytes = h->data_offset;
    const auto index = static_cast<std::uint32_t>(out.storages.size());
    auto t = npy_tensor(*h, std::string(name), index);
    if (!t) return t.error().wrap(record_what(r.name));
    storage_info st;
    st.offset = r.method == 0 ? r.data_offset + h->data_offset : r.data_offset;  // deflated: never mapped
    st.nbytes = h->data_bytes;
    st.dtype = t->dtype;
    st.order = *order;
    if (out.storages.empty()) out.order = *order;
    out.tensors.push_back(std::move(*t));
    out.storages.push_back(st);
    records.push_back(std::move(src));
  }
  out.source = std::make_shared<const npz_storages>(std::move(records));
  return out;
}

result<void, error> inflate_npz_data(const npz_source& src, const zip_read_at& read, std::span<std::byte> data) {
  assert(src.method == 8 && data.size() == src.record_size - src.header_bytes);
  inflater z(src, read);
  std::vector<std::byte> header(static_cast<std::size_t>(src.header_bytes));
  FERRY_TRY(z.produce(header));
  FERRY_TRY(z.produce(data));
  FERRY_TRY_ASSIGN(const std::uint32_t crc, z.finish());
  FERRY_REQUIRE(crc == src.crc32, checkpoint_errc::crc32_mismatch, record_what(src.name));
  return {};
}

result<std::uint32_t, error> npz_record_crc32(const npz_source& src, const zip_read_at& read) {
  std::vector<std::byte> piece(static_cast<std::size_t>(std::min<std::uint64_t>(input_window, src.record_size)));
  if (src.method == 0) {
    std::uint32_t crc = 0;
    for (std::uint64_t at = 0; at < src.record_size; at += piece.size()) {
      const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), src.record_size - at));
      FERRY_TRY(read(src.record_offset + at, std::span(piece).first(k)));
      crc = zip_crc32(std::span(piece).first(k), crc);
    }
    return crc;
  }
  inflater z(src, read);
  for (std::uint64_t at = 0; at < src.record_size; at += piece.size()) {
    const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), src.record_size - at));
    FERRY_TRY(z.produce(std::span(piece).first(k)));
  }
  return z.finish();
}

result<std::shared_ptr<const storage_buffer>, error> npz_storages::load(const parsed_file& f,
                                                                        const load_request& r) const {
  const npz_source& src = records_[r.storage];
  const storage_info& st = f.storages[r.storage];
  const zip_read_at read = file_reader(*r.file);
  // Stored records are read by the reader as ranges; their CRC-32 covers
  // the .npy header too, so every_checksum checks the whole record here.
  if (src.method == 0) {
    if (r.check && r.opt.checks == fetch_checks::every_checksum) {
      auto crc = npz_record_crc32(src, read);
      if (!crc) return crc.error().wrap(r.path.string());
      if (*crc != src.crc32) return r.storage_error(checkpoint_errc::crc32_mismatch, 0);
    }
    return std::shared_ptr<const storage_buffer>();
  }
  // Deflated: inflated into memory, the CRC-32 always checked.
  std::shared_ptr<fresh_storage> o;
  try {
    o = std::make_shared<fresh_storage>(static_cast<std::size_t>(st.nbytes), r.opt.copy_on_write);
  } catch (const std::bad_alloc&) {
    return r.storage_error(checkpoint_errc::out_of_memory, 0);
  }
  if (auto done = inflate_npz_data(src, read, o->writable()); !done) return done.error().wrap(r.path.string());
  const wire::byte_order order = st.order.value_or(f.order);
  const std::size_t width = codec::order_width(st.dtype);
  if (order != wire::host_order && width > 1) wire::convert_in_place(o->writable(), width, order, wire::host_order);
  return std::shared_ptr<const storage_buffer>(std::move(o));
}

std::optional<result<void, error>> npz_storages::verify(const parsed_file& f, const mapped_file* file,
                                                        const std::filesystem::path& path,
                                                        const std::function<void(std::uint64_t)>& progress) const {
  // Each record's CRC-32, over its .npy header and data (inflated if deflated).
  std::uint64_t done = 0;
  for (std::uint32_t i = 0; i < records_.size(); ++i) {
    auto crc = npz_record_crc32(records_[i], file_reader(*file));
    if (!crc) return crc.error().wrap(path.string());
    if (*crc != records_[i].crc32) {  // tensor i is storage i's
      return error(checkpoint_errc::crc32_mismatch, tensor_context(path.string(), f.tensors[i].name));
    }
    done += f.storages[i].nbytes;
    if (progress) progress(done);
  }
  return result<void, error>();
}

}  // namespace detail

namespace {

// `p` deflated (raw, as zip method 8 holds it) into memory, with the
// CRC-32 of its bytes.
result<std::vector<std::byte>, error> deflate_payload(const detail::npy_payload& p, int level, std::uint32_t& crc) {
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return make_error(errc::io_error, "zlib could not start deflating");
  }
  std::vector<std::byte> out(static_cast<std::size_t>(deflateBound(&z, static_cast<uLong>(std::min<std::uint64_t>(p.size(), ULONG_MAX)))));
  z.next_out = reinterpret_cast<Bytef*>(out.data());  // zlib's byte type
  z.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size(), UINT32_MAX));
  crc = 0;
  // More room after the total_out bytes written so far (avail_out is at
  // most 4 GiB, so that may lie before the end of `out`).
  const auto grow = [&] {
    const auto used = static_cast<std::size_t>(z.total_out);
    if (used == out.size()) out.resize(used * 2);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + used);  // zlib's byte type
    z.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size() - used, UINT32_MAX));
  };
  auto fed = p.emit([&](std::span<const std::byte> b) -> result<void, error> {
    crc = detail::zip_crc32(b, crc);
    // emit() hands host-order data over whole (any size): zlib's counts
    // are 32-bit, so it is fed below 4 GiB at a time.
    for (std::size_t at = 0; at < b.size();) {
      const std::size_t k = std::min<std::size_t>(b.size() - at, UINT32_MAX);
      z.next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(b.data() + at));  // zlib's API is not const
      z.avail_in = static_cast<uInt>(k);
      while (z.avail_in > 0) {
        if (z.avail_out == 0) grow();
        if (deflate(&z, Z_NO_FLUSH) == Z_STREAM_ERROR) return make_error(errc::io_error, "zlib deflate failed");
      }
      at += k;
    }
    return {};
  });
  int rc = Z_OK;
  while (fed && rc == Z_OK) {
    if (z.avail_out == 0) grow();
    rc = deflate(&z, Z_FINISH);
  }
  out.resize(static_cast<std::size_t>(z.total_out));
  deflateEnd(&z);
  if (!fed) return std::move(fed).error();
  if (rc != Z_STREAM_END) return make_error(errc::io_error, "zlib deflate did not finish");
  return out;
}

}  // namespace

result<void, error> save_npz(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                             const npy_options& opt) {
  const std::string file = target.string();
  if (tensors.size() > opt.limits.max_tensors) return make_error(errc::limit_exceeded, file, ": tensors");
  std::set<std::string_view> names;
  for (const tensor_ref& t : tensors) {
    // Zip names are at most 65535 bytes, ".npy" included.
    if (!valid_name(t.name, std::min<std::size_t>(opt.limits.max_name_bytes, 0xFFFF - 4))) {
      return make_error(checkpoint_errc::bad_name, file, ": tensor ", quote(t.name));
    }
    if (!names.insert(t.name).second) return make_error(errc::duplicate_key, file, ": tensor ", quote(t.name));
  }
  FERRY_TRY_ASSIGN(auto out, base::atomic_file::create(target, opt.sync, opt.sync && opt.direct));
  std::vector<detail::zip_written> records;
  records.reserve(tensors.size());
  for (const tensor_ref& t : tensors) {
    auto payload = detail::prepare_npy(t, opt.order, opt.limits);
    if (!payload) return payload.error().wrap(file + ": tensor " + quote(t.name));
    std::string name = std::string(t.name) + ".npy";
    if (!opt.compress) {
      FERRY_TRY_ASSIGN(auto r, detail::write_stored_record(out, std::move(name), payload->size(),
                                                           [&](const detail::zip_sink& sink) { return payload->emit(sink); }));
      records.push_back(std::move(r));
      continue;
    }
    detail::zip_written r;
    r.name = std::move(name);
    r.offset = out.size();
    r.size = payload->size();
    r.method = 8;
    FERRY_TRY_ASSIGN(auto deflated, deflate_payload(*payload, opt.level, r.crc));
    r.compressed = deflated.size();
    FERRY_TRY(out.write(detail::zip_local_header(r)));
    FERRY_TRY(out.write(deflated));
    records.push_back(std::move(r));
  }
  FERRY_TRY(out.write(detail::zip_central_directory(records, out.size())));
  return out.commit();
}

}  // namespace ferry::checkpoint
