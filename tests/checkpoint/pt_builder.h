// Builds .pt files byte by byte for the tests and the fuzzers' seeds: a
// pickle assembler (opcode by opcode, hostile programs included) and a zip
// writer laid out as torch.save lays its files out (stored records, data on
// 64-byte boundaries through an "FB" extra field, ZIP64 end records), with
// switches that break one rule at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/wire/byte_order.h"

namespace ferry::checkpoint::testing {

/// A pickle program, assembled opcode by opcode.
class pickle_builder {
 public:
  pickle_builder& op(std::uint8_t code) { return raw({code}); }
  pickle_builder& raw(std::initializer_list<std::uint8_t> bytes) {
    for (auto b : bytes) out_.push_back(std::byte{b});
    return *this;
  }
  pickle_builder& raw(std::string_view s) {
    for (char c : s) out_.push_back(static_cast<std::byte>(c));
    return *this;
  }
  template <class T>
  pickle_builder& le(T v) {
    std::byte b[sizeof(T)];
    wire::store<T>(v, b, wire::byte_order::little);
    out_.insert(out_.end(), b, b + sizeof(T));
    return *this;
  }
  pickle_builder& proto(std::uint8_t v = 2) { return op(0x80).raw({v}); }
  pickle_builder& stop() { return op('.'); }
  pickle_builder& mark() { return op('('); }
  pickle_builder& global(std::string_view module, std::string_view name) {
    return op('c').raw(module).raw("\n").raw(name).raw("\n");
  }
  pickle_builder& str(std::string_view s) { return op('X').le<std::uint32_t>(static_cast<std::uint32_t>(s.size())).raw(s); }
  pickle_builder& integer(std::int32_t v) { return op('J').le(v); }
  pickle_builder& tuple() { return op('t'); }
  pickle_builder& reduce() { return op('R'); }
  pickle_builder& empty_dict() { return op('}'); }
  pickle_builder& empty_list() { return op(']'); }
  pickle_builder& empty_tuple() { return op(')'); }
  pickle_builder& setitems() { return op('u'); }
  pickle_builder& setitem() { return op('s'); }
  pickle_builder& append() { return op('a'); }
  pickle_builder& binput(std::uint8_t slot) { return op('q').raw({slot}); }
  pickle_builder& binget(std::uint8_t slot) { return op('h').raw({slot}); }
  pickle_builder& boolean(bool v) { return op(v ? 0x88 : 0x89); }

  /// ('storage', torch.<type>, key, 'cpu', numel) as a persistent id.
  pickle_builder& storage(std::string_view type, std::string_view key, std::int32_t numel) {
    mark().str("storage").global("torch", type).str(key).str("cpu").integer(numel).tuple();
    return op('Q');
  }
  /// _rebuild_tensor_v2(storage, offset, shape, strides, False, OrderedDict()).
  pickle_builder& tensor(std::string_view type, std::string_view key, std::int32_t numel, std::int32_t offset,
                         const std::vector<std::int32_t>& shape, const std::vector<std::int32_t>& strides) {
    return rebuild_args("_rebuild_tensor_v2", type, key, numel, offset, shape, strides).tuple().reduce();
  }
  /// _rebuild_tensor_v3(UntypedStorage of `nbytes`, offset, shape, strides,
  /// False, OrderedDict(), torch.<dtype>), as torch >= 2.1 writes uint16/32/64
  /// and float8.
  pickle_builder& tensor_v3(std::string_view dtype, std::string_view key, std::int32_t nbytes, std::int32_t offset,
                            const std::vector<std::int32_t>& shape, const std::vector<std::int32_t>& strides,
                            std::string_view storage_type = "UntypedStorage") {
    rebuild_args("_rebuild_tensor_v3", storage_type, key, nbytes, offset, shape, strides);
    return global("torch", dtype).tuple().reduce();
  }

  [[nodiscard]] const std::vector<std::byte>& bytes() const { return out_; }

 private:
  // torch._utils.<fn>, MARK, then the arguments both rebuilds start with.
  pickle_builder& rebuild_args(std::string_view fn, std::string_view type, std::string_view key, std::int32_t numel,
                               std::int32_t offset, const std::vector<std::int32_t>& shape,
                               const std::vector<std::int32_t>& strides) {
    global("torch._utils", fn).mark();
    storage(type, key, numel).integer(offset);
    mark();
    for (auto s : shape) integer(s);
    tuple().mark();
    for (auto s : strides) integer(s);
    return tuple().boolean(false).global("collections", "OrderedDict").empty_tuple().reduce();
  }

  std::vector<std::byte> out_;
};

/// A zip as torch.save writes it, with switches for hostile variants.
class zip_builder {
 public:
  struct record {
    std::string name;
    std::vector<std::byte> data;
    std::uint16_t method = 0;
    std::uint16_t flags = 0x08;       ///< bit 3: sizes and CRC in a descriptor, as torch
    std::string local_name;           ///< if set, the local header's name (disagreeing)
    std::uint64_t claimed_size = 0;   ///< if set, the directory's (uncompressed) size: a lie
    std::int64_t header_at = -1;      ///< if >= 0, the directory's offset of the local header (a lie)
  };
  std::vector<record> records;
  bool zip64 = true;
  bool align = true;
  bool reverse_directory = false;  ///< the central directory lists the records last to first
  std::string trailing;  ///< bytes after the end record

  record& add(std::string name, std::span<const std::byte> data) {
    record r;
    r.name = std::move(name);
    r.data.assign(data.begin(), data.end());
    records.push_back(std::move(r));
    return records.back();
  }
  record& add(std::string name, std::string_view text) {
    return add(std::move(name), std::as_bytes(std::span(text.data(), text.size())));
  }

  [[nodiscard]] std::vector<std::byte> build() const {
    std::vector<std::byte> out;
    std::vector<std::uint64_t> offsets;
    for (const auto& r : records) {
      offsets.push_back(out.size());
      const std::string& lname = r.local_name.empty() ? r.name : r.local_name;
      std::size_t extra = 0;
      if (align) {
        const std::size_t data_at = out.size() + 30 + lname.size() + 4;
        extra = 4 + (64 - data_at % 64) % 64;
      }
      const std::uint32_t crc = r.flags & 0x08 ? 0 : crc32(r.data);
      const auto size = r.flags & 0x08 ? 0u : static_cast<std::uint32_t>(r.data.size());
      put<std::uint32_t>(out, 0x04034b50);
      put<std::uint16_t>(out, 20);
      put<std::uint16_t>(out, r.flags);
      put<std::uint16_t>(out, r.method);
      put<std::uint32_t>(out, 0);
      put<std::uint32_t>(out, crc);
      put<std::uint32_t>(out, size);
      put<std::uint32_t>(out, size);
      put<std::uint16_t>(out, static_cast<std::uint16_t>(lname.size()));
      put<std::uint16_t>(out, static_cast<std::uint16_t>(extra));
      text(out, lname);
      if (extra > 0) {
        put<std::uint16_t>(out, 0x4246);
        put<std::uint16_t>(out, static_cast<std::uint16_t>(extra - 4));
        out.resize(out.size() + extra - 4);
      }
      out.insert(out.end(), r.data.begin(), r.data.end());
      if (r.flags & 0x08) {  // the data descriptor
        put<std::uint32_t>(out, 0x08074b50);
        put<std::uint32_t>(out, crc32(r.data));
        put<std::uint32_t>(out, static_cast<std::uint32_t>(r.data.size()));
        put<std::uint32_t>(out, static_cast<std::uint32_t>(r.data.size()));
      }
    }
    const std::uint64_t dir_offset = out.size();
    for (std::size_t k = 0; k < records.size(); ++k) {
      const std::size_t i = reverse_directory ? records.size() - 1 - k : k;
      const auto& r = records[i];
      const std::uint64_t size = r.claimed_size != 0 ? r.claimed_size : r.data.size();
      const std::uint64_t csize = r.method == 0 ? size : r.data.size();
      const std::uint64_t at = r.header_at >= 0 ? static_cast<std::uint64_t>(r.header_at) : offsets[i];
      const bool wide_size = size >= 0xFFFFFFFF, wide_csize = csize >= 0xFFFFFFFF;
      const std::uint16_t extra = (wide_size || wide_csize) ? static_cast<std::uint16_t>(4 + 8 * (wide_size + wide_csize)) : 0;
      put<std::uint32_t>(out, 0x02014b50);
      put<std::uint16_t>(out, 0x031e);
      put<std::uint16_t>(out, 45);
      put<std::uint16_t>(out, r.flags);
      put<std::uint16_t>(out, r.method);
      put<std::uint32_t>(out, 0);
      put<std::uint32_t>(out, crc32(r.data));
      put<std::uint32_t>(out, wide_csize ? 0xFFFFFFFF : static_cast<std::uint32_t>(csize));
      put<std::uint32_t>(out, wide_size ? 0xFFFFFFFF : static_cast<std::uint32_t>(size));
      put<std::uint16_t>(out, static_cast<std::uint16_t>(r.name.size()));
      put<std::uint16_t>(out, extra);
      put<std::uint16_t>(out, 0);
      put<std::uint16_t>(out, 0);
      put<std::uint16_t>(out, 0);
      put<std::uint32_t>(out, 0);
      put<std::uint32_t>(out, static_cast<std::uint32_t>(at));
      text(out, r.name);
      if (extra > 0) {
        put<std::uint16_t>(out, 1);
        put<std::uint16_t>(out, static_cast<std::uint16_t>(extra - 4));
        if (wide_size) put<std::uint64_t>(out, size);
        if (wide_csize) put<std::uint64_t>(out, csize);
      }
    }
    const std::uint64_t dir_size = out.size() - dir_offset;
    if (zip64) {
      const std::uint64_t record_at = out.size();
      put<std::uint32_t>(out, 0x06064b50);
      put<std::uint64_t>(out, 44);
      put<std::uint16_t>(out, 45);
      put<std::uint16_t>(out, 45);
      put<std::uint32_t>(out, 0);
      put<std::uint32_t>(out, 0);
      put<std::uint64_t>(out, records.size());
      put<std::uint64_t>(out, records.size());
      put<std::uint64_t>(out, dir_size);
      put<std::uint64_t>(out, dir_offset);
      put<std::uint32_t>(out, 0x07064b50);
      put<std::uint32_t>(out, 0);
      put<std::uint64_t>(out, record_at);
      put<std::uint32_t>(out, 1);
    }
    put<std::uint32_t>(out, 0x06054b50);
    put<std::uint16_t>(out, 0);
    put<std::uint16_t>(out, 0);
    // Counts past 16 bits saturate (the ZIP64 record holds them).
    const auto count = static_cast<std::uint16_t>(std::min<std::size_t>(records.size(), 0xFFFF));
    put<std::uint16_t>(out, count);
    put<std::uint16_t>(out, count);
    put<std::uint32_t>(out, zip64 ? 0xFFFFFFFF : static_cast<std::uint32_t>(dir_size));
    put<std::uint32_t>(out, zip64 ? 0xFFFFFFFF : static_cast<std::uint32_t>(dir_offset));
    put<std::uint16_t>(out, 0);
    text(out, trailing);
    return out;
  }

  /// zlib's CRC-32 (bitwise: the tests' reference, independent of zlib).
  static std::uint32_t crc32(std::span<const std::byte> data) {
    std::uint32_t c = 0xFFFFFFFF;
    for (std::byte b : data) {
      c ^= static_cast<std::uint8_t>(b);
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
  }

 private:
  template <class T>
  static void put(std::vector<std::byte>& out, T v) {
    std::byte b[sizeof(T)];
    wire::store<T>(v, b, wire::byte_order::little);
    out.insert(out.end(), b, b + sizeof(T));
  }
  static void text(std::vector<std::byte>& out, std::string_view s) {
    for (char c : s) out.push_back(static_cast<std::byte>(c));
  }
};

/// A .pt holding {"w": f32 [2, 3]} (values 0..5, little-endian) with the
/// given pickle, or the standard one.
inline std::vector<std::byte> f32_data(std::size_t n) {
  std::vector<std::byte> out(n * 4);
  for (std::size_t i = 0; i < n; ++i) wire::store<float>(static_cast<float>(i), out.data() + 4 * i, wire::byte_order::little);
  return out;
}

inline pickle_builder state_dict_pickle() {
  pickle_builder p;
  p.proto().empty_dict().binput(0).mark().str("w").tensor("FloatStorage", "0", 6, 0, {2, 3}, {3, 1}).setitems().stop();
  return p;
}

inline zip_builder pt_zip(const pickle_builder& p, std::string_view prefix = "archive") {
  zip_builder z;
  const std::string pre(prefix);
  z.add(pre + "/data.pkl", p.bytes());
  z.add(pre + "/data/0", f32_data(6));
  z.add(pre + "/version", "3\n");
  return z;
}

}  // namespace ferry::checkpoint::testing
