#include "ferry/checkpoint/zip/zip.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "ferry/base/require.h"
#include "ferry/checkpoint/error.h"
#include "ferry/wire/bulk.h"
#include "ferry/wire/cursor.h"

namespace ferry::checkpoint::detail {
namespace {

constexpr std::uint32_t eocd_signature = 0x06054b50;
constexpr std::uint32_t locator_signature = 0x07064b50;
constexpr std::uint32_t zip64_eocd_signature = 0x06064b50;
constexpr std::uint32_t central_signature = 0x02014b50;
constexpr std::uint32_t local_signature = 0x04034b50;
constexpr std::size_t eocd_size = 22;
constexpr std::size_t locator_size = 20;
constexpr std::size_t zip64_eocd_size = 56;
constexpr std::size_t central_size = 46;
constexpr std::size_t local_size = 30;
constexpr std::uint16_t zip64_extra_id = 0x0001;
constexpr std::uint32_t max32 = 0xFFFFFFFF;
constexpr std::uint16_t max16 = 0xFFFF;

// Reads through one window of the file: the local headers of a zip of many
// small records lie one after another, and cost one read per 64 KiB, not
// two per record.
class window_reader {
 public:
  window_reader(const zip_read_at& read, std::uint64_t end) : read_(read), end_(end) {}

  // The n bytes at `offset`: from the window, else read with as much after
  // them as lies before `end` (where the headers stop).
  result<std::span<const std::byte>, error> get(std::uint64_t offset, std::size_t n) {
    if (offset < at_ || offset - at_ > buf_.size() || n > buf_.size() - (offset - at_)) {
      const std::uint64_t ahead = offset < end_ ? end_ - offset : 0;
      buf_.resize(static_cast<std::size_t>(std::max<std::uint64_t>(n, std::min<std::uint64_t>(window, ahead))));
      FERRY_TRY(read_(offset, buf_));
      at_ = offset;
    }
    return std::span<const std::byte>(buf_).subspan(static_cast<std::size_t>(offset - at_), n);
  }

 private:
  static constexpr std::uint64_t window = 64 * 1024;
  const zip_read_at& read_;
  std::uint64_t end_;
  std::vector<std::byte> buf_;
  std::uint64_t at_ = 0;
};

// The values a ZIP64 extra field supplies for the saturated fields of a
// header, in the order APPNOTE 4.5.3 gives. Fields that are not saturated
// keep their header value.
struct sizes64 {
  std::uint64_t size, compressed, offset;
  std::uint32_t disk;
};
result<void, error> apply_zip64_extra(std::span<const std::byte> extra, sizes64& v, bool size_sat, bool comp_sat,
                                      bool offset_sat, bool disk_sat, std::uint64_t entry) {
  bool seen = false;
  wire::reader in(extra);
  while (!in.at_end()) {
    std::uint16_t id = 0, n = 0;
    FERRY_REQUIRE(in.read_le(id, n), checkpoint_errc::zip_malformed, "central directory entry ", entry, ": extra fields");
    auto field = in.sub(n);
    FERRY_REQUIRE(field, checkpoint_errc::zip_malformed, "central directory entry ", entry, ": extra fields");
    if (id != zip64_extra_id) continue;
    FERRY_REQUIRE(!seen, checkpoint_errc::zip_malformed, "central directory entry ", entry, ": two ZIP64 extra fields");
    seen = true;
    const auto take = [&](bool saturated, auto& out) {
      if (!saturated) return true;
      const auto x = field->read_le<std::remove_reference_t<decltype(out)>>();
      if (x) out = *x;
      return static_cast<bool>(x);
    };
    FERRY_REQUIRE(take(size_sat, v.size) && take(comp_sat, v.compressed) && take(offset_sat, v.offset) &&
                      take(disk_sat, v.disk),
                  checkpoint_errc::zip_malformed, "central directory entry ", entry, ": ZIP64 extra field too short");
  }
  FERRY_REQUIRE(seen || !(size_sat || comp_sat || offset_sat || disk_sat), checkpoint_errc::zip_malformed, "central directory entry ", entry,
                ": saturated field without a ZIP64 extra field");
  return {};
}


// Writing (zip_local_header, zip_central_directory).

constexpr std::uint16_t align_id = 0xD935;  // Android zipalign's padding field
constexpr std::uint16_t dos_date_1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01
constexpr std::uint64_t data_align = 64;

bool ascii(std::string_view s) noexcept {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// The header fields shared by local and central headers, 6..30 (APPNOTE
// 4.3.7): version needed, flags, method, time, date, CRC, sizes (saturated
// where a ZIP64 field carries them: in a local header, whose ZIP64 field
// holds both sizes, both; APPNOTE 4.5.3), name length, extra length.
void common_fields(wire::vector_writer& w, const zip_written& r, bool zip64, std::size_t extra_len,
                   bool local = false) {
  const bool both = local && zip64;
  constexpr auto le = wire::byte_order::little;
  w.write<std::uint16_t>(zip64 ? 45 : 20, le);
  w.write<std::uint16_t>(ascii(r.name) ? 0 : 0x0800, le);  // bit 11: the name is UTF-8
  w.write<std::uint16_t>(r.method, le);
  w.write<std::uint16_t>(0, le);  // 00:00
  w.write<std::uint16_t>(dos_date_1980, le);
  w.write<std::uint32_t>(r.crc, le);
  w.write<std::uint32_t>(both || r.compressed >= max32 ? max32 : static_cast<std::uint32_t>(r.compressed), le);
  w.write<std::uint32_t>(both || r.size >= max32 ? max32 : static_cast<std::uint32_t>(r.size), le);
  w.write<std::uint16_t>(static_cast<std::uint16_t>(r.name.size()), le);
  w.write<std::uint16_t>(static_cast<std::uint16_t>(extra_len), le);
}

}  // namespace

error zip_malformed(std::string what) { return error(checkpoint_errc::zip_malformed, std::move(what)); }

std::string record_what(std::string_view name) { return "record " + quote(name); }

std::uint32_t zip_crc32(std::span<const std::byte> bytes, std::uint32_t crc) noexcept {
  // zlib answers a null buffer with the initial value 0, whatever `crc` was:
  // an empty span (data() may be null) leaves the CRC as it is.
  if (bytes.empty()) return crc;
  return static_cast<std::uint32_t>(::crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));  // zlib's byte type
}

zip_read_at memory_reader(std::span<const std::byte> bytes) {
  return [bytes](std::uint64_t offset, std::span<std::byte> out) -> result<void, error> {
    if (offset > bytes.size() || out.size() > bytes.size() - offset) return error(errc::truncated);
    if (!out.empty()) std::memcpy(out.data(), bytes.data() + offset, out.size());
    return {};
  };
}

result<zip_directory, error> read_zip_directory(std::uint64_t size, const zip_read_at& read, const limits& lim) {
  if (size < eocd_size) return error(errc::truncated, "zip end record");
  // The EOCD lies in the last 22 + 65535 bytes; with ZIP64, its locator
  // and record precede it.
  const std::uint64_t window = std::min<std::uint64_t>(size, eocd_size + max16 + locator_size + zip64_eocd_size);
  std::vector<std::byte> tail(static_cast<std::size_t>(window));
  FERRY_TRY(read(size - window, tail));
  const wire::reader t(tail);
  std::vector<std::size_t> ends;  // EOCD candidates whose comment reaches EOF
  bool found_signature = false;
  for (std::size_t at = tail.size() - eocd_size + 1; at-- > 0;) {
    if (t.read_le_at<std::uint32_t>(at).value_or(0) != eocd_signature) continue;
    found_signature = true;
    if (at + eocd_size + *t.read_le_at<std::uint16_t>(at + 20) == tail.size()) ends.push_back(at);
    if (tail.size() - at > eocd_size + max16) break;
  }
  if (ends.empty()) {
    if (found_signature) return error(errc::trailing_bytes, "after the zip end record");
    return error(errc::truncated, "no zip end record");
  }
  if (ends.size() > 1) return zip_malformed("two zip end records reach the end of the file");
  const std::size_t e = ends.front();
  const std::uint64_t eocd_offset = size - window + e;

  // The end record (APPNOTE 4.3.16), all of it in `tail`.
  std::uint32_t eocd_sig = 0, dir_size32 = 0, dir_offset32 = 0;
  std::uint16_t eocd_disk = 0, dir_disk = 0, disk_entries = 0, entries16 = 0, zip_comment_len = 0;
  FERRY_TRY_ASSIGN(auto eocd, t.sub_at(e, eocd_size));
  FERRY_TRY(eocd.read_le(eocd_sig, eocd_disk, dir_disk, disk_entries, entries16, dir_size32, dir_offset32,
                         zip_comment_len));
  std::uint64_t entries = entries16;
  std::uint64_t dir_size = dir_size32;
  std::uint64_t dir_offset = dir_offset32;
  if (eocd_disk != 0 || dir_disk != 0) return zip_malformed("zip spans disks");
  if (disk_entries != entries) return zip_malformed("zip end record: entry counts differ");
  std::uint64_t dir_end = eocd_offset;  // where the central directory must end

  const bool has_locator = e >= locator_size && t.read_le_at<std::uint32_t>(e - locator_size).value_or(0) == locator_signature;
  if (has_locator) {
    // The ZIP64 end record locator (4.3.15), just before the end record.
    std::uint32_t loc_signature = 0, record_disk = 0, disks = 0;
    std::uint64_t record_offset = 0;
    FERRY_TRY_ASSIGN(auto loc, t.sub_at(e - locator_size, locator_size));
    FERRY_TRY(loc.read_le(loc_signature, record_disk, record_offset, disks));
    if (record_disk != 0 || disks != 1) return zip_malformed("zip spans disks");
    const std::uint64_t locator_offset = eocd_offset - locator_size;
    if (locator_offset < zip64_eocd_size || record_offset != locator_offset - zip64_eocd_size) {
      return zip_malformed("ZIP64 end record does not end where its locator starts");
    }
    // The ZIP64 end record (4.3.14), without an extensible data sector.
    std::array<std::byte, zip64_eocd_size> z{};
    FERRY_TRY(read(record_offset, z));
    wire::reader r(z);
    std::uint32_t sig64 = 0, disk64 = 0, dir_disk64 = 0;
    std::uint16_t made_by = 0, needed = 0;
    std::uint64_t record_size = 0, disk_entries64 = 0, entries64 = 0, size64 = 0, offset64 = 0;
    FERRY_TRY(r.read_le(sig64, record_size, made_by, needed, disk64, dir_disk64, disk_entries64, entries64, size64,
                        offset64));
    if (sig64 != zip64_eocd_signature || record_size != zip64_eocd_size - 12) {
      return zip_malformed("ZIP64 end record");
    }
    if (disk64 != 0 || dir_disk64 != 0) return zip_malformed("zip spans disks");
    if (disk_entries64 != entries64) return zip_malformed("ZIP64 end record: entry counts differ");
    if ((entries != max16 && entries != entries64) || (dir_size != max32 && dir_size != size64) ||
        (dir_offset != max32 && dir_offset != offset64)) {
      return zip_malformed("zip end record and ZIP64 end record disagree");
    }
    entries = entries64;
    dir_size = size64;
    dir_offset = offset64;
    dir_end = record_offset;
  }
  if (entries > lim.max_zip_entries || entries > UINT32_MAX) return error(errc::limit_exceeded, "zip entries");
  if (dir_offset > dir_end || dir_size != dir_end - dir_offset) {
    return zip_malformed("central directory does not end where the end record starts");
  }
  if (entries > dir_size / central_size) return zip_malformed("central directory too small for its entries");
  // Each entry is at most a header and three 64 KiB fields: read no more
  // (dir_size > entries * most, without the product).
  constexpr std::uint64_t most = central_size + 3 * std::uint64_t{max16};
  if (dir_size > 0 && (dir_size - 1) / most >= entries) {
    return zip_malformed("central directory larger than its entries can be");
  }
  if (dir_size > SIZE_MAX) return error(errc::limit_exceeded, "central directory");

  std::vector<std::byte> dir(static_cast<std::size_t>(dir_size));
  FERRY_TRY(read(dir_offset, dir));
  zip_directory out;
  out.offset = dir_offset;
  out.entries.reserve(static_cast<std::size_t>(entries));
  wire::reader d(dir);
  for (std::uint64_t i = 0; i < entries; ++i) {
    // The central directory header (4.3.12), then name, extra and comment.
    std::uint32_t signature = 0, crc = 0, compressed = 0, size32 = 0, attributes = 0, offset = 0;
    std::uint16_t made_by = 0, needed = 0, flags = 0, method = 0, time = 0, date = 0, name_len = 0, extra_len = 0,
                  comment_len = 0, disk = 0, internal = 0;
    FERRY_REQUIRE(d.read_le(signature, made_by, needed, flags, method, time, date, crc, compressed, size32, name_len,
                            extra_len, comment_len, disk, internal, attributes, offset) &&
                      signature == central_signature,
                  checkpoint_errc::zip_malformed, "central directory entry ", i);
    const auto name = d.read_bytes(name_len);
    const auto extra = d.read_bytes(extra_len);
    FERRY_REQUIRE(name && extra && d.skip(comment_len), checkpoint_errc::zip_malformed, "central directory entry ", i);
    zip_entry entry;
    entry.record.name.assign(reinterpret_cast<const char*>(name->data()), name->size());  // char view of the bytes
    entry.flags = flags;
    entry.method = method;
    entry.record.crc32 = crc;
    sizes64 v{size32, compressed, offset, disk};
    if (v.size == max32 || v.compressed == max32 || v.offset == max32 || v.disk == max16 || !extra->empty()) {
      FERRY_TRY(apply_zip64_extra(*extra, v, v.size == max32, v.compressed == max32, v.offset == max32,
                                  v.disk == max16, i));
    }
    FERRY_REQUIRE(v.disk == 0, checkpoint_errc::zip_malformed, "central directory entry ", i, ": on another disk");
    entry.record.size = v.size;
    entry.compressed_size = v.compressed;
    entry.header_offset = v.offset;
    out.entries.push_back(std::move(entry));
  }
  if (!d.at_end()) return zip_malformed("central directory has bytes after its last entry");
  return out;
}

record_index::record_index(std::span<const zip_record> records) {
  sorted_.reserve(records.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    sorted_.emplace_back(std::hash<std::string_view>{}(records[i].name), static_cast<std::uint32_t>(i));
  }
  // By hash, then by name: names whose hashes collide (MurmurHash2 has
  // collisions a file can be made of) cost a comparison each, not a scan.
  std::sort(sorted_.begin(), sorted_.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    const int c = records[a.second].name.compare(records[b.second].name);
    return c != 0 ? c < 0 : a.second < b.second;
  });
}

std::size_t record_index::find(std::span<const zip_record> records, std::string_view name) const noexcept {
  const std::uint64_t h = std::hash<std::string_view>{}(name);
  const auto it = std::lower_bound(sorted_.begin(), sorted_.end(), h, [&](const auto& a, std::uint64_t hash) {
    return a.first != hash ? a.first < hash : std::string_view(records[a.second].name) < name;
  });
  return it != sorted_.end() && it->first == h && records[it->second].name == name ? it->second : npos;
}

std::size_t record_index::duplicate(std::span<const zip_record> records) const noexcept {
  std::size_t found = npos;
  for (std::size_t k = 1; k < sorted_.size(); ++k) {  // equal names are neighbours, in order of position
    if (sorted_[k].first == sorted_[k - 1].first && records[sorted_[k].second].name == records[sorted_[k - 1].second].name) {
      found = std::min<std::size_t>(found, sorted_[k].second);
    }
  }
  return found;
}

result<zip_records, error> check_zip_records(zip_directory&& dir, const zip_read_at& read, bool allow_deflate) {
  const auto what = [](const zip_record& r) { return record_what(r.name); };  // built on failure only
  // Names first, unique, from the directory alone: nothing of the file
  // is read for a zip of a million copies of one name.
  zip_records out;
  out.records.reserve(dir.entries.size());
  for (zip_entry& e : dir.entries) out.records.push_back(std::move(e.record));
  const auto& records = out.records;
  out.index = record_index(records);
  if (const std::size_t d = out.index.duplicate(records); d != record_index::npos) {
    return zip_malformed(what(records[d]) + ": two records of this name");
  }
  // Then each record in the order its local header lies in the file, so the
  // window reads every header once, whatever order the directory lists
  // them in; records must not overlap.
  std::vector<std::uint32_t> order(dir.entries.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::uint32_t>(i);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return dir.entries[a].header_offset != dir.entries[b].header_offset
               ? dir.entries[a].header_offset < dir.entries[b].header_offset
               : a < b;
  });
  window_reader local(read, dir.offset);
  const zip_record* previous = nullptr;  // the record before, in file order
  std::uint64_t previous_end = 0;
  for (const std::uint32_t i : order) {
    const zip_entry& e = dir.entries[i];
    zip_record& r = out.records[i];
    if ((e.flags & 0x41) != 0) return error(checkpoint_errc::unsupported_zip_feature, what(r) + ": encrypted");
    FERRY_REQUIRE(e.method == 0 || (allow_deflate && e.method == 8), checkpoint_errc::unsupported_zip_feature,
                  record_what(r.name), ": compressed (method ", e.method, allow_deflate ? "), not deflated" : "), never inflated");
    if (e.method == 0 && e.compressed_size != r.size) return zip_malformed(what(r) + ": stored sizes differ");
    r.method = e.method;
    r.compressed_size = e.compressed_size;

    if (e.header_offset > dir.offset) return zip_malformed(what(r) + ": local header after the central directory");
    // Every field of the header is taken before the next get(), which may
    // refill the window `h` views.
    FERRY_TRY_ASSIGN(const std::span<const std::byte> h, local.get(e.header_offset, local_size));
    // The local file header (4.3.7).
    std::uint32_t signature = 0, crc = 0, comp32 = 0, size32 = 0;
    std::uint16_t needed = 0, flags = 0, method = 0, time = 0, date = 0, name_len = 0, extra_len = 0;
    FERRY_TRY(wire::reader(h).read_le(signature, needed, flags, method, time, date, crc, comp32, size32, name_len,
                                      extra_len));
    if (signature != local_signature) return zip_malformed(what(r) + ": no local header at its offset");
    const std::uint64_t comp = comp32;
    const std::uint64_t size = size32;
    if (flags != e.flags || method != e.method || name_len != r.name.size()) {
      return zip_malformed(what(r) + ": local header disagrees with the central directory");
    }
    FERRY_TRY_ASSIGN(const std::span<const std::byte> tail, local.get(e.header_offset + local_size, name_len));
    if (std::memcmp(tail.data(), r.name.data(), name_len) != 0) {
      return zip_malformed(what(r) + ": local header disagrees with the central directory");
    }
    if ((flags & 0x08) == 0) {  // no data descriptor: the local header holds CRC and sizes
      if (crc != r.crc32 || (comp != max32 && comp != e.compressed_size) || (size != max32 && size != r.size)) {
        return zip_malformed(what(r) + ": local header disagrees with the central directory");
      }
    }
    r.data_offset = e.header_offset + local_size + name_len + extra_len;
    if (r.data_offset > dir.offset || r.compressed_size > dir.offset - r.data_offset) {
      return zip_malformed(what(r) + ": data runs into the central directory");
    }
    if (previous != nullptr && e.header_offset < previous_end) {
      return zip_malformed(what(r) + ": overlaps record " + quote(previous->name));
    }
    previous = &r;
    previous_end = r.data_offset + r.compressed_size;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Writing: local header, data, ..., central directory, (ZIP64 end record and
// locator,) end record; the fields above, little-endian.

// The local header of `r` at r.offset, padded so that its data starts on a
// multiple of 64 when stored.
std::vector<std::byte> zip_local_header(const zip_written& r) {
  constexpr auto le = wire::byte_order::little;
  const bool zip64 = r.size >= max32 || r.compressed >= max32;
  std::vector<std::byte> extra;
  {
    wire::vector_writer x(extra);
    if (zip64) {  // a local ZIP64 field holds both sizes
      x.write<std::uint16_t>(zip64_extra_id, le);
      x.write<std::uint16_t>(16, le);
      x.write<std::uint64_t>(r.size, le);
      x.write<std::uint64_t>(r.compressed, le);
    }
  }
  if (r.method == 0) {
    const std::uint64_t before = r.offset + 30 + r.name.size() + extra.size() + 6;  // 6: the padding field's head
    const auto pad = static_cast<std::size_t>((data_align - before % data_align) % data_align);
    {
      wire::vector_writer x(extra);  // gone before the resize: its flush would trim the padding
      x.write<std::uint16_t>(align_id, le);
      x.write<std::uint16_t>(static_cast<std::uint16_t>(2 + pad), le);
      x.write<std::uint16_t>(static_cast<std::uint16_t>(data_align), le);
    }
    extra.resize(extra.size() + pad, std::byte{0});
  }
  std::vector<std::byte> out;
  wire::vector_writer w(out);
  w.write<std::uint32_t>(0x04034b50, le);
  common_fields(w, r, zip64, extra.size(), /*local=*/true);
  w.write_bytes(std::as_bytes(std::span(r.name)));
  w.write_bytes(extra);
  w.flush();
  return out;
}

// The central directory, ZIP64 end record and locator where needed, and
// the end record, for records written up to `dir_offset`.
std::vector<std::byte> zip_central_directory(std::span<const zip_written> records, std::uint64_t dir_offset) {
  constexpr auto le = wire::byte_order::little;
  std::vector<std::byte> out;
  wire::vector_writer w(out);
  bool any64 = false;
  for (const zip_written& r : records) {
    std::vector<std::byte> extra;
    {
      wire::vector_writer x(extra);
      std::uint16_t n = 0;
      for (const std::uint64_t v : {r.size, r.compressed, r.offset}) n = static_cast<std::uint16_t>(n + (v >= max32 ? 8 : 0));
      if (n > 0) {  // in APPNOTE's order, only the saturated fields
        x.write<std::uint16_t>(zip64_extra_id, le);
        x.write<std::uint16_t>(n, le);
        if (r.size >= max32) x.write<std::uint64_t>(r.size, le);
        if (r.compressed >= max32) x.write<std::uint64_t>(r.compressed, le);
        if (r.offset >= max32) x.write<std::uint64_t>(r.offset, le);
      }
    }
    const bool zip64 = !extra.empty();
    any64 = any64 || zip64;
    w.write<std::uint32_t>(0x02014b50, le);
    w.write<std::uint16_t>(static_cast<std::uint16_t>((3 << 8) | (zip64 ? 45 : 20)), le);  // made by: Unix
    common_fields(w, r, zip64, extra.size());
    w.write<std::uint16_t>(0, le);  // comment length
    w.write<std::uint16_t>(0, le);  // disk
    w.write<std::uint16_t>(0, le);  // internal attributes
    w.write<std::uint32_t>(std::uint32_t{0100644} << 16, le);  // a regular file, rw-r--r--
    w.write<std::uint32_t>(r.offset >= max32 ? max32 : static_cast<std::uint32_t>(r.offset), le);
    w.write_bytes(std::as_bytes(std::span(r.name)));
    w.write_bytes(extra);
  }
  const std::uint64_t dir_size = w.position();
  const std::uint64_t n = records.size();
  const bool end64 = any64 || n >= 0xFFFF || dir_size >= max32 || dir_offset >= max32;
  if (end64) {
    const std::uint64_t record_offset = dir_offset + dir_size;
    w.write<std::uint32_t>(0x06064b50, le);
    w.write<std::uint64_t>(44, le);
    w.write<std::uint16_t>((3 << 8) | 45, le);
    w.write<std::uint16_t>(45, le);
    w.write<std::uint32_t>(0, le);
    w.write<std::uint32_t>(0, le);
    w.write<std::uint64_t>(n, le);
    w.write<std::uint64_t>(n, le);
    w.write<std::uint64_t>(dir_size, le);
    w.write<std::uint64_t>(dir_offset, le);
    w.write<std::uint32_t>(0x07064b50, le);
    w.write<std::uint32_t>(0, le);
    w.write<std::uint64_t>(record_offset, le);
    w.write<std::uint32_t>(1, le);
  }
  w.write<std::uint32_t>(0x06054b50, le);
  w.write<std::uint16_t>(0, le);
  w.write<std::uint16_t>(0, le);
  const auto count16 = static_cast<std::uint16_t>(std::min<std::uint64_t>(n, 0xFFFF));
  w.write<std::uint16_t>(count16, le);
  w.write<std::uint16_t>(count16, le);
  w.write<std::uint32_t>(static_cast<std::uint32_t>(std::min<std::uint64_t>(dir_size, max32)), le);
  w.write<std::uint32_t>(static_cast<std::uint32_t>(std::min<std::uint64_t>(dir_offset, max32)), le);
  w.write<std::uint16_t>(0, le);  // comment length
  w.flush();
  return out;
}

result<zip_written, error> write_stored_record(base::atomic_file& out, std::string name, std::uint64_t size,
                                              const zip_emit& emit) {
  zip_written r;
  r.name = std::move(name);
  r.offset = out.size();
  r.size = r.compressed = size;
  FERRY_TRY(emit([&](std::span<const std::byte> b) -> result<void, error> {
    r.crc = zip_crc32(b, r.crc);
    return {};
  }));
  FERRY_TRY(out.write(zip_local_header(r)));
  FERRY_TRY(emit([&](std::span<const std::byte> b) { return out.write(b); }));
  return r;
}

result<void, error> emit_in_order(std::span<const std::byte> data, std::size_t width, wire::byte_order order,
                                  const zip_sink& sink) {
  if (order == wire::host_order || width == 1) return sink(data);
  constexpr std::size_t piece = std::size_t{1} << 20;  // a multiple of every width
  std::vector<std::byte> buf(std::min(piece, data.size()));
  for (std::size_t at = 0; at < data.size(); at += piece) {
    const std::size_t k = std::min(piece, data.size() - at);
    wire::convert(data.subspan(at, k), wire::host_order, std::span(buf).first(k), order, width);
    FERRY_TRY(sink(std::span<const std::byte>(buf).first(k)));
  }
  return {};
}

bool zip_head(std::span<const std::byte> head, std::uint64_t size) noexcept {
  const auto starts = [&](const char* magic) { return head.size() >= 4 && std::memcmp(head.data(), magic, 4) == 0; };
  return starts("PK\x03\x04") || (size >= 22 && starts("PK\x05\x06"));
}

}  // namespace ferry::checkpoint::detail
