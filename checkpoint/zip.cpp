#include "ferry/checkpoint/detail/zip.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "ferry/checkpoint/error.h"
#include "ferry/wire/byte_order.h"

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

template <class T>
T le(std::span<const std::byte> b, std::size_t at) noexcept {
  return wire::load<T>(b.data() + at, wire::byte_order::little);
}

std::string record_what(std::string_view name) { return "record " + quote(name); }

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
                                      bool offset_sat, bool disk_sat, const std::string& what) {
  bool seen = false;
  for (std::size_t at = 0; at < extra.size();) {
    if (extra.size() - at < 4) return zip_malformed(what + ": extra fields");
    const auto id = le<std::uint16_t>(extra, at);
    const auto n = le<std::uint16_t>(extra, at + 2);
    if (n > extra.size() - at - 4) return zip_malformed(what + ": extra fields");
    const auto field = extra.subspan(at + 4, n);
    at += 4 + std::size_t{n};
    if (id != zip64_extra_id) continue;
    if (seen) return zip_malformed(what + ": two ZIP64 extra fields");
    seen = true;
    std::size_t p = 0;
    const auto take64 = [&](std::uint64_t& out) {
      if (field.size() - p < 8) return false;
      out = le<std::uint64_t>(field, p);
      p += 8;
      return true;
    };
    if (size_sat && !take64(v.size)) return zip_malformed(what + ": ZIP64 extra field too short");
    if (comp_sat && !take64(v.compressed)) return zip_malformed(what + ": ZIP64 extra field too short");
    if (offset_sat && !take64(v.offset)) return zip_malformed(what + ": ZIP64 extra field too short");
    if (disk_sat) {
      if (field.size() - p < 4) return zip_malformed(what + ": ZIP64 extra field too short");
      v.disk = le<std::uint32_t>(field, p);
    }
  }
  if (!seen && (size_sat || comp_sat || offset_sat || disk_sat)) {
    return zip_malformed(what + ": saturated field without a ZIP64 extra field");
  }
  return {};
}

}  // namespace

error zip_malformed(std::string what) { return error(checkpoint_errc::zip_malformed, std::move(what)); }

std::uint32_t zip_crc32(std::span<const std::byte> bytes, std::uint32_t crc) noexcept {
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
  std::vector<std::size_t> ends;  // EOCD candidates whose comment reaches EOF
  bool found_signature = false;
  for (std::size_t at = tail.size() - eocd_size + 1; at-- > 0;) {
    if (le<std::uint32_t>(tail, at) != eocd_signature) continue;
    found_signature = true;
    if (at + eocd_size + le<std::uint16_t>(tail, at + 20) == tail.size()) ends.push_back(at);
    if (tail.size() - at > eocd_size + max16) break;
  }
  if (ends.empty()) {
    if (found_signature) return error(errc::trailing_bytes, "after the zip end record");
    return error(errc::truncated, "no zip end record");
  }
  if (ends.size() > 1) return zip_malformed("two zip end records reach the end of the file");
  const std::size_t e = ends.front();
  const auto eocd = std::span<const std::byte>(tail).subspan(e, eocd_size);
  const std::uint64_t eocd_offset = size - window + e;

  std::uint64_t entries = le<std::uint16_t>(eocd, 10);
  std::uint64_t dir_size = le<std::uint32_t>(eocd, 12);
  std::uint64_t dir_offset = le<std::uint32_t>(eocd, 16);
  if (le<std::uint16_t>(eocd, 4) != 0 || le<std::uint16_t>(eocd, 6) != 0) return zip_malformed("zip spans disks");
  if (le<std::uint16_t>(eocd, 8) != entries) return zip_malformed("zip end record: entry counts differ");
  std::uint64_t dir_end = eocd_offset;  // where the central directory must end

  const bool has_locator = e >= locator_size && le<std::uint32_t>(tail, e - locator_size) == locator_signature;
  if (has_locator) {
    const auto loc = std::span<const std::byte>(tail).subspan(e - locator_size, locator_size);
    if (le<std::uint32_t>(loc, 4) != 0 || le<std::uint32_t>(loc, 16) != 1) return zip_malformed("zip spans disks");
    const std::uint64_t record_offset = le<std::uint64_t>(loc, 8);
    const std::uint64_t locator_offset = eocd_offset - locator_size;
    if (locator_offset < zip64_eocd_size || record_offset != locator_offset - zip64_eocd_size) {
      return zip_malformed("ZIP64 end record does not end where its locator starts");
    }
    std::array<std::byte, zip64_eocd_size> z{};
    FERRY_TRY(read(record_offset, z));
    const std::span<const std::byte> r(z);
    if (le<std::uint32_t>(r, 0) != zip64_eocd_signature || le<std::uint64_t>(r, 4) != zip64_eocd_size - 12) {
      return zip_malformed("ZIP64 end record");
    }
    if (le<std::uint32_t>(r, 16) != 0 || le<std::uint32_t>(r, 20) != 0) return zip_malformed("zip spans disks");
    const auto entries64 = le<std::uint64_t>(r, 32);
    const auto size64 = le<std::uint64_t>(r, 40);
    const auto offset64 = le<std::uint64_t>(r, 48);
    if (le<std::uint64_t>(r, 24) != entries64) return zip_malformed("ZIP64 end record: entry counts differ");
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
  const std::span<const std::byte> d(dir);
  std::size_t at = 0;
  for (std::uint64_t i = 0; i < entries; ++i) {
    const auto what = [i] { return "central directory entry " + std::to_string(i); };  // built on failure only
    if (d.size() - at < central_size || le<std::uint32_t>(d, at) != central_signature) return zip_malformed(what());
    const auto h = d.subspan(at, central_size);
    const std::size_t name_len = le<std::uint16_t>(h, 28);
    const std::size_t extra_len = le<std::uint16_t>(h, 30);
    const std::size_t comment_len = le<std::uint16_t>(h, 32);
    if (d.size() - at - central_size < name_len + extra_len + comment_len) return zip_malformed(what());
    zip_entry entry;
    entry.record.name.resize(name_len);
    std::memcpy(entry.record.name.data(), d.data() + at + central_size, name_len);
    entry.flags = le<std::uint16_t>(h, 8);
    entry.method = le<std::uint16_t>(h, 10);
    entry.record.crc32 = le<std::uint32_t>(h, 16);
    sizes64 v{le<std::uint32_t>(h, 24), le<std::uint32_t>(h, 20), le<std::uint32_t>(h, 42), le<std::uint16_t>(h, 34)};
    const auto extra = d.subspan(at + central_size + name_len, extra_len);
    if (v.size == max32 || v.compressed == max32 || v.offset == max32 || v.disk == max16 || !extra.empty()) {
      FERRY_TRY(apply_zip64_extra(extra, v, v.size == max32, v.compressed == max32, v.offset == max32,
                                  v.disk == max16, what()));
    }
    if (v.disk != 0) return zip_malformed(what() + ": on another disk");
    entry.record.size = v.size;
    entry.compressed_size = v.compressed;
    entry.header_offset = v.offset;
    out.entries.push_back(std::move(entry));
    at += central_size + name_len + extra_len + comment_len;
  }
  if (at != d.size()) return zip_malformed("central directory has bytes after its last entry");
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

result<zip_records, error> check_zip_records(zip_directory&& dir, const zip_read_at& read) {
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
    if (e.method != 0) {
      return error(checkpoint_errc::unsupported_zip_feature,
                   what(r) + ": compressed (method " + std::to_string(e.method) + "), never inflated");
    }
    if (e.compressed_size != r.size) return zip_malformed(what(r) + ": stored sizes differ");

    if (e.header_offset > dir.offset) return zip_malformed(what(r) + ": local header after the central directory");
    // Every field of the header is taken before the next get(), which may
    // refill the window `h` views.
    FERRY_TRY_ASSIGN(const std::span<const std::byte> h, local.get(e.header_offset, local_size));
    if (le<std::uint32_t>(h, 0) != local_signature) return zip_malformed(what(r) + ": no local header at its offset");
    const std::size_t name_len = le<std::uint16_t>(h, 26);
    const std::size_t extra_len = le<std::uint16_t>(h, 28);
    const auto flags = le<std::uint16_t>(h, 6);
    const auto method = le<std::uint16_t>(h, 8);
    const auto crc = le<std::uint32_t>(h, 14);
    const std::uint64_t comp = le<std::uint32_t>(h, 18);
    const std::uint64_t size = le<std::uint32_t>(h, 22);
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
    if (r.data_offset > dir.offset || r.size > dir.offset - r.data_offset) {
      return zip_malformed(what(r) + ": data runs into the central directory");
    }
    if (previous != nullptr && e.header_offset < previous_end) {
      return zip_malformed(what(r) + ": overlaps record " + quote(previous->name));
    }
    previous = &r;
    previous_end = r.data_offset + r.size;
  }
  return out;
}

}  // namespace ferry::checkpoint::detail
