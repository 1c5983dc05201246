// GGUF headers parsed and checked (gguf.h). The reader's view of a GGUF
// file and metadata as text are read.cpp; the writer and the
// converter write.cpp.
#include "ferry/checkpoint/gguf.h"

#include <algorithm>
#include <cassert>

#include "ferry/base/require.h"
#include "ferry/checkpoint/gguf/internal.h"
#include "ferry/wire/cursor.h"

namespace ferry::checkpoint {
namespace {

// The least bytes a value of type `t` takes in the file (without its type
// field, as inside an array): what bounds an array's count.
std::uint64_t least_bytes(gguf_value_type t) noexcept {
  switch (t) {
    case gguf_value_type::u8:
    case gguf_value_type::i8:
    case gguf_value_type::boolean: return 1;
    case gguf_value_type::u16:
    case gguf_value_type::i16: return 2;
    case gguf_value_type::u32:
    case gguf_value_type::i32:
    case gguf_value_type::f32: return 4;
    case gguf_value_type::u64:
    case gguf_value_type::i64:
    case gguf_value_type::f64:
    case gguf_value_type::string: return 8;  // its length
    case gguf_value_type::array: return 12;  // element type and count
  }
  return 1;
}

// The least bytes of one key/value pair (a 1-byte key, a u8 value) and of
// one tensor info (a 1-byte name, no extents).
constexpr std::uint64_t least_kv_bytes = 8 + 1 + 4 + 1;
constexpr std::uint64_t least_tensor_info_bytes = 8 + 1 + 4 + 4 + 8;
constexpr std::uint32_t max_dims = 4;  // GGML_MAX_DIMS
constexpr std::uint64_t max_int64 = std::uint64_t{INT64_MAX};

std::string_view as_text(std::span<const std::byte> b) noexcept {
  return {reinterpret_cast<const char*>(b.data()), b.size()};  // char view of the bytes
}

// A name that two of `items` share (the first in sorted order), or
// nullptr. Sorting views costs 16 bytes a name, where a hash set would cost
// a node each: the parse's memory stays a small multiple of the header's.
template <class T>
const std::string* duplicate(const std::vector<T>& items, std::string T::*field) {
  std::vector<const std::string*> names;
  names.reserve(items.size());
  for (const auto& item : items) names.push_back(&(item.*field));
  std::sort(names.begin(), names.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  const auto twice = std::adjacent_find(names.begin(), names.end(),
                                        [](const std::string* a, const std::string* b) { return *a == *b; });
  return twice == names.end() ? nullptr : *twice;
}

// One parse of a header prefix. Every read is preceded by need(), which
// tells a header cut by the end of the file (truncated) from one cut by
// the end of the prefix (truncated, and needs_more).
class parser {
 public:
  parser(std::span<const std::byte> bytes, std::uint64_t file_size, const limits& lim, bool* needs_more)
      : in_(bytes, wire::reader_options{.max_depth = lim.max_gguf_depth}), file_size_(file_size), lim_(lim),
        needs_more_(needs_more) {}

  template <class... V>
  [[nodiscard]] error fail(error_code code, const V&... what) const {
    return make_error(code, "gguf byte ", in_.offset(), ": ", what...);
  }

  // Whether n more bytes exist: in the file (else truncated) and in the
  // prefix (else truncated with needs_more).
  template <class... V>
  result<void, error> need(std::uint64_t n, const V&... what) {
    const std::uint64_t in_file = file_size_ - in_.offset();
    if (n > in_file) return fail(errc::truncated, what..., ": ", n, " bytes announced, ", in_file, " left in the file");
    if (n > in_.remaining()) {
      if (needs_more_ != nullptr) *needs_more_ = true;
      return fail(errc::truncated, "the header continues past the ", in_.size(), " bytes read");
    }
    return {};
  }
  // Whether `count` items of at least `least` bytes each can exist.
  template <class... V>
  result<void, error> need_items(std::uint64_t count, std::uint64_t least, const V&... what) {
    const std::uint64_t in_file = file_size_ - in_.offset();
    if (count > in_file / least) {
      return fail(errc::truncated, what..., ": ", count, " announced, the ", in_file, " bytes left hold at most ",
                  in_file / least);
    }
    return need(count * least, what...);
  }

  template <wire::scalar T, class... V>
  result<T, error> scalar(const V&... what) {
    FERRY_TRY(need(sizeof(T), what...));
    return *in_.read<T>(order_);
  }

  template <class... V>
  result<std::string, error> string(const V&... what) {
    FERRY_TRY_ASSIGN(const std::uint64_t n, scalar<std::uint64_t>(what..., " length"));
    FERRY_TRY(need(n, what...));
    return std::string(as_text(*in_.read_bytes(static_cast<std::size_t>(n))));
  }

  result<gguf_header, error> parse(std::optional<wire::byte_order> forced) {
    gguf_header h;
    FERRY_TRY(need(8, "magic and version"));
    const auto magic = *in_.read_bytes(4);
    h.fugg_magic = std::equal(magic.begin(), magic.end(), detail::gguf_magic_reversed);
    FERRY_REQUIRE(h.fugg_magic || std::equal(magic.begin(), magic.end(), detail::gguf_magic), errc::bad_magic,
                  "gguf magic");
    // The version field in both orders: for 1..0xFFFF only one order
    // gives a small number (gguf.h's BYTE ORDER).
    const std::uint32_t le = *in_.read_le_at<std::uint32_t>(4), be = *in_.read_be_at<std::uint32_t>(4);
    if (forced) order_ = *forced;
    else if (h.fugg_magic) order_ = wire::byte_order::big;
    else if (le >= 1 && le <= 0xFFFF) order_ = wire::byte_order::little;
    else if (be >= 1 && be <= 0xFFFF) order_ = wire::byte_order::big;
    else return fail(errc::unsupported_version, "gguf version field ", le, " (little-endian) or ", be,
                     " (big-endian): neither order gives a version");
    h.order = order_;
    h.version = *in_.read<std::uint32_t>(order_);
    FERRY_REQUIRE(h.version != 1, errc::unsupported_version, "gguf version 1 (u32 counts; ggml no longer reads it)");
    FERRY_REQUIRE(h.version == 2 || h.version == 3, errc::unsupported_version, "gguf version ", h.version,
                  " (ferry reads 2 and 3)");
    FERRY_TRY_ASSIGN(const std::uint64_t n_tensors, scalar<std::uint64_t>("tensor count"));
    FERRY_TRY_ASSIGN(const std::uint64_t n_kv, scalar<std::uint64_t>("key/value count"));
    if (n_tensors > lim_.max_tensors) {
      return fail(errc::limit_exceeded, n_tensors, " tensors (limit ", lim_.max_tensors, ")");
    }
    FERRY_TRY(need_items(n_kv, least_kv_bytes, "key/value pairs"));
    h.metadata.reserve(static_cast<std::size_t>(n_kv));
    for (std::uint64_t i = 0; i < n_kv; ++i) {
      FERRY_TRY_ASSIGN(std::string key, string("key ", i));
      if (!valid_name(key, lim_.max_name_bytes)) {
        return fail(checkpoint_errc::bad_name, "key ", quote(key), " (1 to ", lim_.max_name_bytes, " bytes of UTF-8)");
      }
      FERRY_TRY_ASSIGN(const std::uint32_t t, scalar<std::uint32_t>("key ", quote(key), ": type"));
      FERRY_TRY_ASSIGN(gguf_value v, value(t, key));
      h.metadata.push_back({std::move(key), std::move(v)});
    }
    if (const std::string* twice = duplicate(h.metadata, &gguf_kv::key)) {
      return make_error(errc::duplicate_key, "gguf key ", quote(*twice), " twice");
    }
    FERRY_TRY(alignment(h));
    FERRY_TRY(need_items(n_tensors, least_tensor_info_bytes, "tensor infos"));
    h.tensors.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
      FERRY_TRY_ASSIGN(gguf_tensor t, tensor_info(i));
      h.tensors.push_back(std::move(t));
    }
    if (const std::string* twice = duplicate(h.tensors, &gguf_tensor::name)) {
      return make_error(errc::duplicate_key, "gguf tensor ", quote(*twice), " twice");
    }
    h.header_bytes = in_.offset();
    return h;
  }

 private:
  template <class T>
  result<std::vector<T>, error> elements(std::uint64_t n) {
    std::vector<T> v(static_cast<std::size_t>(n));  // need_items() checked n against the bytes
    (void)in_.read_array(std::span(v), order_);     // ... and that they are in the prefix
    return v;
  }

  result<gguf_array, error> array(const std::string& key) {
    FERRY_TRY_ASSIGN(const std::uint32_t et, scalar<std::uint32_t>("key ", quote(key), ": array element type"));
    FERRY_REQUIRE(et < gguf_value_type_count, checkpoint_errc::bad_gguf_value_type, "gguf byte ", in_.offset() - 4,
                  ": key ", quote(key), ": array element type ", et);
    const auto type = static_cast<gguf_value_type>(et);
    FERRY_TRY_ASSIGN(const std::uint64_t n, scalar<std::uint64_t>("key ", quote(key), ": array count"));
    FERRY_TRY(need_items(n, least_bytes(type), "key ", quote(key), ": array of ", name(type)));
    if (!in_.enter()) {
      return fail(errc::depth_exceeded, "key ", quote(key), ": arrays nested deeper than ", lim_.max_gguf_depth);
    }
    gguf_array a;
    auto r = fill(a, type, n, key);
    in_.leave();
    if (!r) return std::move(r).error();
    return a;
  }

  result<void, error> fill(gguf_array& a, gguf_value_type type, std::uint64_t n, const std::string& key) {
    const auto count = static_cast<std::size_t>(n);
    switch (type) {
      case gguf_value_type::u8: a.values = *elements<std::uint8_t>(n); return {};
      case gguf_value_type::i8: a.values = *elements<std::int8_t>(n); return {};
      case gguf_value_type::u16: a.values = *elements<std::uint16_t>(n); return {};
      case gguf_value_type::i16: a.values = *elements<std::int16_t>(n); return {};
      case gguf_value_type::u32: a.values = *elements<std::uint32_t>(n); return {};
      case gguf_value_type::i32: a.values = *elements<std::int32_t>(n); return {};
      case gguf_value_type::f32: a.values = *elements<float>(n); return {};
      case gguf_value_type::u64: a.values = *elements<std::uint64_t>(n); return {};
      case gguf_value_type::i64: a.values = *elements<std::int64_t>(n); return {};
      case gguf_value_type::f64: a.values = *elements<double>(n); return {};
      case gguf_value_type::boolean: {
        std::vector<bool> v(count);
        for (std::size_t k = 0; k < count; ++k) {
          FERRY_TRY_ASSIGN(v[k], boolean(key));
        }
        a.values = std::move(v);
        return {};
      }
      case gguf_value_type::string: {
        std::vector<std::string> v;
        v.reserve(count);
        for (std::size_t k = 0; k < count; ++k) {
          FERRY_TRY_ASSIGN(auto s, string("key ", quote(key), ": string ", k));
          v.push_back(std::move(s));
        }
        a.values = std::move(v);
        return {};
      }
      case gguf_value_type::array: {
        std::vector<gguf_array> v;
        v.reserve(count);
        for (std::size_t k = 0; k < count; ++k) {
          FERRY_TRY_ASSIGN(auto inner, array(key));
          v.push_back(std::move(inner));
        }
        a.values = std::move(v);
        return {};
      }
    }
    return {};  // unreachable: the type was checked
  }

  result<bool, error> boolean(const std::string& key) {
    FERRY_TRY_ASSIGN(const std::uint8_t b, scalar<std::uint8_t>("key ", quote(key), ": bool"));
    FERRY_REQUIRE(b <= 1, errc::bad_value, "gguf byte ", in_.offset() - 1, ": key ", quote(key), ": bool ", b,
                  " (must be 0 or 1)");
    return b == 1;
  }

  result<gguf_value, error> value(std::uint32_t t, const std::string& key) {
    FERRY_REQUIRE(t < gguf_value_type_count, checkpoint_errc::bad_gguf_value_type, "gguf byte ", in_.offset() - 4,
                  ": key ", quote(key), ": value type ", t);
    const auto what = [&] { return "key " + quote(key); };
    switch (static_cast<gguf_value_type>(t)) {
      case gguf_value_type::u8: {
        FERRY_TRY_ASSIGN(const auto v, scalar<std::uint8_t>(what()));
        return gguf_value(std::in_place_index<0>, v);
      }
      case gguf_value_type::i8: {
        FERRY_TRY_ASSIGN(const auto v, scalar<std::int8_t>(what()));
        return gguf_value(std::in_place_index<1>, v);
      }
      case gguf_value_type::u16: {
        FERRY_TRY_ASSIGN(const auto v, scalar<std::uint16_t>(what()));
        return gguf_value(std::in_place_index<2>, v);
      }
      case gguf_value_type::i16: {
        FERRY_TRY_ASSIGN(const auto v, scalar<std::int16_t>(what()));
        return gguf_value(std::in_place_index<3>, v);
      }
      case gguf_value_type::u32: {
        FERRY_TRY_ASSIGN(const auto v, scalar<std::uint32_t>(what()));
        return gguf_value(std::in_place_index<4>, v);
      }
      case gguf_value_type::i32: {
        FERRY_TRY_ASSIGN(const auto v, scalar<std::int32_t>(what()));
        return gguf_value(std::in_place_index<5>, v);
      }
      case gguf_value_type::f32: {
        FERRY_TRY_ASSIGN(const auto v, scalar<float>(what()));
        return gguf_value(std::in_place_index<6>, v);
      }
      case gguf_value_type::boolean: {
        FERRY_TRY_ASSIGN(const bool v, boolean(key));
        return gguf_value(std::in_place_index<7>, v);
      }
      case gguf_value_type::string: {
        FERRY_TRY_ASSIGN(auto v, string(what()));
        return gguf_value(std::in_place_index<8>, std::move(v));
      }
      case gguf_value_type::array: {
        FERRY_TRY_ASSIGN(auto v, array(key));
        return gguf_value(std::in_place_index<9>, std::move(v));
      }
      case gguf_value_type::u64: {
        FERRY_TRY_ASSIGN(const auto v, scalar<std::uint64_t>(what()));
        return gguf_value(std::in_place_index<10>, v);
      }
      case gguf_value_type::i64: {
        FERRY_TRY_ASSIGN(const auto v, scalar<std::int64_t>(what()));
        return gguf_value(std::in_place_index<11>, v);
      }
      case gguf_value_type::f64: {
        FERRY_TRY_ASSIGN(const auto v, scalar<double>(what()));
        return gguf_value(std::in_place_index<12>, v);
      }
    }
    return fail(checkpoint_errc::bad_gguf_value_type, "key ", quote(key), ": value type ", t);  // unreachable
  }

  result<void, error> alignment(gguf_header& h) const {
    FERRY_TRY_ASSIGN(h.alignment, detail::gguf_alignment(h.find("general.alignment")));
    return {};
  }

  result<gguf_tensor, error> tensor_info(std::uint64_t i) {
    gguf_tensor t;
    FERRY_TRY_ASSIGN(t.name, string("tensor ", i, " name"));
    if (!valid_name(t.name, lim_.max_name_bytes)) {
      return fail(checkpoint_errc::bad_name, "tensor ", i, " name ", quote(t.name), " (1 to ", lim_.max_name_bytes,
                  " bytes of UTF-8)");
    }
    const std::string who = "tensor " + quote(t.name);
    FERRY_TRY_ASSIGN(const std::uint32_t n_dims, scalar<std::uint32_t>(who, ": n_dims"));
    if (n_dims > max_dims) return fail(errc::limit_exceeded, who, ": ", n_dims, " dimensions (ggml has at most 4)");
    FERRY_TRY(need(std::uint64_t{n_dims} * 8, who, ": extents"));
    t.ne.resize(n_dims);
    for (auto& e : t.ne) e = *in_.read<std::uint64_t>(order_);
    FERRY_TRY_ASSIGN(const std::uint32_t type_number, scalar<std::uint32_t>(who, ": type"));
    auto type = to_ggml_type(type_number);
    if (!type) {
      const ggml_type_info* known = find_ggml_type(type_number);
      if (known == nullptr) {
        return fail(checkpoint_errc::unknown_ggml_type, who, ": type ", type_number, ", which ggml does not define");
      }
      return fail(checkpoint_errc::unknown_ggml_type, who, ": type ", type_number, " (", known->name, "): ",
                  known->note);
    }
    t.type = *type;
    auto bytes = detail::gguf_tensor_bytes(t.type, t.ne, who);
    if (!bytes) return fail(bytes.error().code(), bytes.error().context());
    t.nbytes = *bytes;
    FERRY_TRY_ASSIGN(t.offset, scalar<std::uint64_t>(who, ": offset"));
    return t;
  }

  wire::reader in_;
  std::uint64_t file_size_;
  const limits& lim_;
  bool* needs_more_;
  wire::byte_order order_ = wire::byte_order::little;
};

// The data's place: gguf.h's ONE LAYOUT, against the file's size.
result<void, error> check_layout(gguf_header& h, std::uint64_t file_size) {
  const std::uint64_t align = h.alignment;
  FERRY_REQUIRE(h.header_bytes <= UINT64_MAX - align, errc::truncated, "gguf header");  // file sizes never come close
  h.data_offset = detail::gguf_pad(h.header_bytes, align);
  const auto who = [&](std::size_t i) { return "gguf tensor " + quote(h.tensors[i].name); };
  for (std::size_t i = 0; i < h.tensors.size(); ++i) {
    FERRY_REQUIRE(h.tensors[i].offset % align == 0, checkpoint_errc::misaligned_tensor, who(i), ": offset ",
                  h.tensors[i].offset, " is not a multiple of the alignment ", align);
  }
  if (h.tensors.empty()) {  // the file may end anywhere in the header's padding
    FERRY_REQUIRE(file_size >= h.header_bytes, errc::truncated, "gguf header");
    FERRY_REQUIRE(file_size <= h.data_offset, errc::trailing_bytes, "gguf: ", file_size - h.data_offset,
                  " bytes after the header's padding (at ", h.data_offset, ")");
    return {};
  }
  // Offsets count from the data area's start; the last tensor's padding
  // may be left out.
  FERRY_REQUIRE(h.data_offset <= file_size, errc::truncated, "gguf header");
  detail::tiling area;
  area.end = file_size - h.data_offset;
  area.align = align;
  area.padded_end = false;
  area.area = "gguf data";
  return detail::check_tiling(
      h.tensors.size(), [&](std::size_t i) { return std::pair(h.tensors[i].offset, h.tensors[i].nbytes); }, who, area);
}

}  // namespace

std::string_view name(gguf_value_type t) noexcept {
  switch (t) {
    case gguf_value_type::u8: return "u8";
    case gguf_value_type::i8: return "i8";
    case gguf_value_type::u16: return "u16";
    case gguf_value_type::i16: return "i16";
    case gguf_value_type::u32: return "u32";
    case gguf_value_type::i32: return "i32";
    case gguf_value_type::f32: return "f32";
    case gguf_value_type::boolean: return "bool";
    case gguf_value_type::string: return "str";
    case gguf_value_type::array: return "arr";
    case gguf_value_type::u64: return "u64";
    case gguf_value_type::i64: return "i64";
    case gguf_value_type::f64: return "f64";
  }
  return "unknown";
}

std::size_t gguf_array::size() const noexcept {
  return std::visit([](const auto& v) { return v.size(); }, values);
}

std::uint64_t gguf_tensor::numel() const noexcept {
  std::uint64_t n = 1;
  for (const auto e : ne) n *= e;  // checked when parsed (or written)
  return n;
}

const gguf_value* gguf_header::find(std::string_view key) const noexcept {
  const auto it = std::find_if(metadata.begin(), metadata.end(), [&](const gguf_kv& kv) { return kv.key == key; });
  return it == metadata.end() ? nullptr : &it->value;
}

const gguf_tensor* gguf_header::find_tensor(std::string_view tensor_name) const noexcept {
  const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const gguf_tensor& t) { return t.name == tensor_name; });
  return it == tensors.end() ? nullptr : &*it;
}

std::uint64_t gguf_header::padded_end() const noexcept {
  std::uint64_t end = data_offset;
  for (const auto& t : tensors) end = data_offset + detail::gguf_pad(t.offset + t.nbytes, alignment);
  return end;
}

result<gguf_header, error> parse_gguf_header(std::span<const std::byte> bytes, std::uint64_t file_size,
                                             const limits& lim, std::optional<wire::byte_order> order,
                                             bool* needs_more) {
  assert(bytes.size() <= file_size);
  if (needs_more != nullptr) *needs_more = false;
  parser p(bytes, file_size, lim, needs_more);
  FERRY_TRY_ASSIGN(gguf_header h, p.parse(order));
  FERRY_TRY(check_layout(h, file_size));
  return h;
}

namespace detail {

result<std::uint32_t, error> gguf_alignment(const gguf_value* general_alignment) {
  if (general_alignment == nullptr) return 32;
  const gguf_value& a = *general_alignment;
  FERRY_REQUIRE(type_of(a) == gguf_value_type::u32, checkpoint_errc::bad_alignment, "gguf general.alignment is ",
                name(type_of(a)), " (must be u32)");
  const std::uint32_t v = std::get<std::uint32_t>(a);
  FERRY_REQUIRE(v != 0 && (v & (v - 1)) == 0 && v <= max_gguf_alignment, checkpoint_errc::bad_alignment,
                "gguf general.alignment ", v, " (a power of two from 1 to 2^30)");
  return v;
}

result<std::uint64_t, error> gguf_tensor_bytes(ggml_type type, std::span<const std::uint64_t> ne, std::string_view who) {
  for (const std::uint64_t e : ne) {
    FERRY_REQUIRE(e <= max_int64, checkpoint_errc::shape_overflow, who, ": extent ", e, " (negative in ggml's int64)");
  }
  const ggml_type_info& ti = info(type);
  const std::uint64_t row = ne.empty() ? 1 : ne[0];
  FERRY_REQUIRE(row % ti.block_elements == 0, checkpoint_errc::shape_size_mismatch, who, ": ne[0] ", row,
                " is not a multiple of ", ti.name, "'s block of ", ti.block_elements);
  // The one shape rule (tensor.h), in blocks: the non-zero extents' blocks
  // fit in 2^63 bytes.
  const auto bytes = shape_bytes(ne, ti.block_bytes, ti.block_elements);
  FERRY_REQUIRE(bytes, checkpoint_errc::shape_overflow, who, ": the non-zero extents' bytes pass 2^63");
  return *bytes;
}

result<gguf_header, error> read_gguf_header(std::uint64_t size, const zip_read_at& read, const read_options& opt) {
  std::uint64_t want = std::min<std::uint64_t>({size, std::uint64_t{1} << 20, opt.lim.max_gguf_header_bytes});
  std::vector<std::byte> head;
  for (;;) {
    head.resize(static_cast<std::size_t>(want));
    FERRY_TRY(read(0, head));
    bool more = false;
    auto h = parse_gguf_header(head, size, opt.lim, opt.gguf_order, &more);
    if (h || !more) return h;
    if (want >= opt.lim.max_gguf_header_bytes) {
      return make_error(errc::limit_exceeded, "gguf header longer than ", opt.lim.max_gguf_header_bytes,
                        " bytes (limits::max_gguf_header_bytes)");
    }
    want = std::min({size, want * 4, opt.lim.max_gguf_header_bytes});
  }
}

}  // namespace detail
}  // namespace ferry::checkpoint
