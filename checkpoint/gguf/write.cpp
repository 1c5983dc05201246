// GGUF written (save_gguf) and converted between byte orders
// (convert_gguf_order); the layout is gguf.h's, the parser parse.cpp.
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "ferry/base/file.h"
#include "ferry/base/require.h"
#include "ferry/checkpoint/gguf/internal.h"
#include "ferry/checkpoint/detail/mapped_file.h"
#include "ferry/checkpoint/gguf.h"
#include "ferry/wire/cursor.h"

namespace ferry::checkpoint {
namespace {

// Tensor data moves in pieces of at most this many bytes (a whole number
// of blocks): large enough that the swap runs at memory speed between
// system calls, small enough to stay out of the way of the page cache.
constexpr std::size_t piece_bytes = std::size_t{8} << 20;

// The encoder of metadata values (gguf.h's value layouts), in `order`.
class value_writer {
 public:
  value_writer(wire::vector_writer& w, wire::byte_order order, std::size_t max_depth) noexcept
      : w_(w), order_(order), max_depth_(max_depth) {}

  void string(std::string_view s) {
    w_.write<std::uint64_t>(s.size(), order_);
    w_.write_bytes(std::as_bytes(std::span(s)));
  }

  // The value without its type field.
  result<void, error> value(const gguf_value& v, const std::string& key) {
    return std::visit(
        [&](const auto& x) -> result<void, error> {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, std::string>) string(x);
          else if constexpr (std::is_same_v<X, gguf_array>) return array(x, key, 1);
          else if constexpr (std::is_same_v<X, bool>) w_.write<std::uint8_t>(x ? 1 : 0, order_);
          else w_.write<X>(x, order_);
          return {};
        },
        v);
  }

 private:
  result<void, error> array(const gguf_array& a, const std::string& key, std::size_t depth) {
    FERRY_REQUIRE(depth <= max_depth_, errc::depth_exceeded, "gguf key ", quote(key), ": arrays nested deeper than ",
                  max_depth_);
    w_.write<std::uint32_t>(static_cast<std::uint32_t>(a.type()), order_);
    w_.write<std::uint64_t>(a.size(), order_);
    return std::visit(
        [&](const auto& elems) -> result<void, error> {
          using E = typename std::decay_t<decltype(elems)>::value_type;
          if constexpr (std::is_same_v<E, std::string>) {
            for (const auto& s : elems) string(s);
          } else if constexpr (std::is_same_v<E, gguf_array>) {
            for (const auto& inner : elems) FERRY_TRY(array(inner, key, depth + 1));
          } else if constexpr (std::is_same_v<E, bool>) {
            for (const bool b : elems) w_.write<std::uint8_t>(b ? 1 : 0, order_);
          } else {
            w_.write_array<E>(std::span<const E>(elems), order_);
          }
          return {};
        },
        a.values);
  }

  wire::vector_writer& w_;
  wire::byte_order order_;
  std::size_t max_depth_;
};

// general.alignment of `metadata` (gguf.h), or 32.
result<std::uint32_t, error> alignment_of(std::span<const gguf_kv> metadata) {
  const auto it = std::find_if(metadata.begin(), metadata.end(),
                               [](const gguf_kv& kv) { return kv.key == "general.alignment"; });
  return detail::gguf_alignment(it == metadata.end() ? nullptr : &it->value);
}

// A tensor's byte count from its type and extents, checked as the parser
// checks them (and at most 4 extents, which the parser checks as it reads).
result<std::uint64_t, error> tensor_bytes(std::string_view tensor_name, ggml_type type,
                                          std::span<const std::uint64_t> ne) {
  const std::string who = "gguf tensor " + quote(tensor_name);
  FERRY_REQUIRE(ne.size() <= 4, errc::limit_exceeded, who, ": ", ne.size(), " dimensions (ggml has at most 4)");
  return detail::gguf_tensor_bytes(type, ne, who);
}

// The header bytes (magic to the last tensor info, without the padding
// before the data: header_padding()), every rule of gguf.h checked on the
// way: what save_gguf() and convert_gguf_order() write.
result<std::vector<std::byte>, error> encode(std::uint32_t version, std::span<const gguf_kv> metadata,
                                             std::span<const gguf_tensor> tensors, wire::byte_order order,
                                             bool nested_arrays, const limits& lim) {
  FERRY_REQUIRE(version == 2 || version == 3, errc::unsupported_version, "gguf version ", version);
  FERRY_REQUIRE(tensors.size() <= lim.max_tensors, errc::limit_exceeded, tensors.size(), " tensors (limit ",
                lim.max_tensors, ")");
  FERRY_TRY_ASSIGN(const std::uint32_t align, alignment_of(metadata));
  std::vector<std::byte> out;
  {
    wire::vector_writer w(out);
    value_writer vw(w, order, lim.max_gguf_depth);
    w.write_bytes(detail::gguf_magic);
    w.write<std::uint32_t>(version, order);
    w.write<std::uint64_t>(tensors.size(), order);
    w.write<std::uint64_t>(metadata.size(), order);
    std::unordered_set<std::string_view> keys;
    for (const auto& kv : metadata) {
      FERRY_REQUIRE(valid_name(kv.key, lim.max_name_bytes), checkpoint_errc::bad_name, "gguf key ", quote(kv.key),
                    " (1 to ", lim.max_name_bytes, " bytes of UTF-8)");
      FERRY_REQUIRE(keys.insert(kv.key).second, errc::duplicate_key, "gguf key ", quote(kv.key), " twice");
      const auto* a = std::get_if<gguf_array>(&kv.value);
      FERRY_REQUIRE(nested_arrays || a == nullptr || a->type() != gguf_value_type::array, errc::bad_value, "gguf key ",
                    quote(kv.key), ": an array of arrays, which ggml cannot read (written only when asked: "
                    "gguf_write_options::nested_arrays)");
      vw.string(kv.key);
      w.write<std::uint32_t>(static_cast<std::uint32_t>(type_of(kv.value)), order);
      FERRY_TRY(vw.value(kv.value, kv.key));
    }
    std::unordered_set<std::string_view> names;
    std::uint64_t expected = 0;
    for (const auto& t : tensors) {
      FERRY_REQUIRE(valid_name(t.name, lim.max_name_bytes), checkpoint_errc::bad_name, "gguf tensor ", quote(t.name),
                    " (1 to ", lim.max_name_bytes, " bytes of UTF-8)");
      FERRY_REQUIRE(names.insert(t.name).second, errc::duplicate_key, "gguf tensor ", quote(t.name), " twice");
      FERRY_TRY_ASSIGN(const std::uint64_t nbytes, tensor_bytes(t.name, t.type, t.ne));
      FERRY_REQUIRE(nbytes == t.nbytes, checkpoint_errc::shape_size_mismatch, "gguf tensor ", quote(t.name), ": ",
                    t.nbytes, " bytes for ", nbytes);
      FERRY_REQUIRE(t.offset == expected, checkpoint_errc::bad_layout, "gguf tensor ", quote(t.name), ": offset ",
                    t.offset, ", expected ", expected);
      FERRY_REQUIRE(nbytes <= UINT64_MAX - align - t.offset, checkpoint_errc::shape_overflow, "gguf tensor ",
                    quote(t.name), ": data passes 2^64");
      expected = detail::gguf_pad(t.offset + nbytes, align);
      vw.string(t.name);
      w.write<std::uint32_t>(static_cast<std::uint32_t>(t.ne.size()), order);
      for (const auto e : t.ne) w.write<std::uint64_t>(e, order);
      w.write<std::uint32_t>(static_cast<std::uint32_t>(t.type), order);
      w.write<std::uint64_t>(t.offset, order);
    }
  }
  return out;
}

// The zeros between the header and the data section: up to the alignment
// when the file has tensors (ferry's reader wants every tensor's data
// offset within the file, empty ones too), none when it has none, where
// ggml pads all the same (ggml and ferry read the file without them).
// Padding then costs at most what the input's own data section spans: a
// file with tensors holds its padding, and a 57-byte file of
// general.alignment 2^30 and no tensors does not become a GiB.
std::uint64_t header_padding(std::uint64_t header_bytes, std::uint32_t align, std::span<const gguf_tensor> tensors) {
  return tensors.empty() ? 0 : detail::gguf_pad(header_bytes, align) - header_bytes;
}

// Writes `n` zero bytes.
result<void, error> write_zeros(base::atomic_file& out, std::uint64_t n) {
  static constexpr std::byte zeros[4096] = {};
  while (n > 0) {
    const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(n, sizeof zeros));
    FERRY_TRY(out.write(std::span(zeros, k)));
    n -= k;
  }
  return {};
}

// The largest whole number of blocks of `t` that fits a piece.
std::size_t piece_for(ggml_type t) noexcept {
  const std::size_t b = info(t).block_bytes;
  return std::max<std::size_t>(piece_bytes / b, 1) * b;
}

}  // namespace

result<std::vector<std::byte>, error> encode_gguf_header(const gguf_header& h, wire::byte_order order,
                                                         const limits& lim) {
  FERRY_TRY_ASSIGN(auto out, encode(h.version, h.metadata, h.tensors, order, true, lim));
  out.resize(static_cast<std::size_t>(detail::gguf_pad(out.size(), h.alignment)));  // zeros to data_offset
  return out;
}

result<gguf_tensor_ref, error> to_gguf_tensor(const tensor_ref& t) {
  const auto type = ggml_type_of(t.dtype);
  FERRY_REQUIRE(type, errc::bad_value, "tensor ", quote(t.name), ": dtype ", codec::name(t.dtype),
                " has no GGUF tensor type");
  FERRY_REQUIRE(t.shape.size() <= 4, errc::limit_exceeded, "tensor ", quote(t.name), ": ", t.shape.size(),
                " dimensions (ggml has at most 4)");
  const auto row_major = contiguous_strides(t.shape);
  FERRY_REQUIRE(t.strides.empty() || std::ranges::equal(t.strides, row_major), errc::bad_value, "tensor ",
                quote(t.name), ": not row-major (gather it first)");
  if (auto r = check_view(t.dtype, t.shape, row_major, t.offset, t.storage.size(), 4); !r) {
    return make_error(r.error(), "tensor ", quote(t.name));
  }
  std::uint64_t n = codec::size_of(t.dtype);
  for (const auto d : t.shape) n *= d;  // check_view() checked the product
  gguf_tensor_ref g;
  g.name = t.name;
  g.type = *type;
  g.ne.assign(t.shape.rbegin(), t.shape.rend());
  g.data = n == 0 ? std::span<const std::byte>{}
                  : t.storage.subspan(static_cast<std::size_t>(t.offset * codec::size_of(t.dtype)),
                                      static_cast<std::size_t>(n));
  return g;
}

result<void, error> save_gguf(const std::filesystem::path& target, std::span<const gguf_kv> metadata,
                              std::span<const gguf_tensor_ref> tensors, const gguf_write_options& opt) {
  const std::string file = target.string();
  const auto in_file = [&](const error& e) { return e.wrap(file); };
  auto align = alignment_of(metadata);
  if (!align) return in_file(align.error());
  std::vector<gguf_tensor> infos;
  infos.reserve(tensors.size());
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.size() > detail::max_ggml_name_bytes) {
      return make_error(checkpoint_errc::bad_name, file, ": gguf tensor ", quote(t.name), ": ", t.name.size(),
                        " bytes (ggml reads at most 63)");
    }
    auto nbytes = tensor_bytes(t.name, t.type, t.ne);
    if (!nbytes) return in_file(nbytes.error());
    if (t.data.size() != *nbytes) {
      return make_error(checkpoint_errc::shape_size_mismatch, file, ": gguf tensor ", quote(t.name), ": ",
                        t.data.size(), " bytes of data for ", *nbytes);
    }
    infos.push_back({std::string(t.name), t.type, t.ne, offset, *nbytes});
    if (*nbytes > UINT64_MAX - *align - offset) {
      return make_error(checkpoint_errc::shape_overflow, file, ": gguf data passes 2^64");
    }
    offset = detail::gguf_pad(offset + *nbytes, *align);
  }
  auto header = encode(3, metadata, infos, opt.order, opt.nested_arrays, opt.limits);
  if (!header) return in_file(header.error());
  FERRY_TRY_ASSIGN(auto out, base::atomic_file::create(target, opt.sync, opt.sync && opt.direct));
  FERRY_TRY(out.write(*header));
  FERRY_TRY(write_zeros(out, header_padding(header->size(), *align, infos)));
  std::vector<std::byte> buf;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (opt.order == wire::host_order || t.data.empty()) {
      FERRY_TRY(out.write(t.data));
    } else {
      const std::size_t piece = piece_for(t.type);
      buf.resize(std::min(piece, t.data.size()));
      for (std::size_t at = 0; at < t.data.size(); at += piece) {
        const std::size_t k = std::min(piece, t.data.size() - at);
        swap_blocks(t.type, t.data.subspan(at, k), wire::host_order, std::span(buf).first(k), opt.order);
        FERRY_TRY(out.write(std::span(buf).first(k)));
      }
    }
    FERRY_TRY(write_zeros(out, detail::gguf_pad(infos[i].nbytes, *align) - infos[i].nbytes));
  }
  return out.commit();
}

result<void, error> convert_gguf_order(const std::filesystem::path& in, const std::filesystem::path& out,
                                       wire::byte_order to, const read_options& ropt,
                                       const gguf_write_options& wopt,
                                       const std::function<void(std::uint64_t)>& progress) {
  FERRY_TRY_ASSIGN(auto src, detail::mapped_file::open(in));
  const auto read = [&src](std::uint64_t offset, std::span<std::byte> bytes) -> result<void, error> {
    int sys_errno = 0;
    if (auto r = src.read(offset, bytes, sys_errno); !r) return error(r.error(), {}, sys_errno);
    return {};
  };
  auto h = detail::read_gguf_header(src.size(), read, ropt);
  if (!h) return h.error().wrap(in.string());
  auto header = encode(h->version, h->metadata, h->tensors, to, wopt.nested_arrays, ropt.lim);
  if (!header) return header.error().wrap(in.string());
  FERRY_TRY_ASSIGN(auto dst, base::atomic_file::create(out, wopt.sync, wopt.sync && wopt.direct));
  FERRY_TRY(dst.write(*header));
  FERRY_TRY(write_zeros(dst, header_padding(header->size(), h->alignment, h->tensors)));
  std::vector<std::byte> buf;
  std::uint64_t done = 0;
  for (const gguf_tensor& t : h->tensors) {
    const std::size_t piece = piece_for(t.type);
    buf.resize(static_cast<std::size_t>(std::min<std::uint64_t>(piece, t.nbytes)));
    for (std::uint64_t at = 0; at < t.nbytes; at += piece) {
      const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(piece, t.nbytes - at));
      const auto chunk = std::span(buf).first(k);
      if (auto r = read(h->data_offset + t.offset + at, chunk); !r) {
        return r.error().wrap(in.string() + ": tensor " + quote(t.name));
      }
      swap_blocks_in_place(t.type, chunk, h->order, to);
      FERRY_TRY(dst.write(chunk));
      done += k;
      if (progress) progress(done);
    }
    FERRY_TRY(write_zeros(dst, detail::gguf_pad(t.nbytes, h->alignment) - t.nbytes));
  }
  return dst.commit();
}

}  // namespace ferry::checkpoint
