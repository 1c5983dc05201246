// NumPy .npy headers read and written (npy.h), the .npy file decoder, and
// save_npy(). The .npz container is npz.cpp.
#include "ferry/checkpoint/npy.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>

#include "ferry/base/file.h"
#include "ferry/base/require.h"
#include "ferry/checkpoint/numpy/internal.h"
#include "ferry/wire/bulk.h"
#include "ferry/wire/cursor.h"

namespace ferry::checkpoint {
namespace {

constexpr std::array<std::byte, 6> npy_magic{std::byte{0x93}, std::byte{'N'}, std::byte{'U'},
                                             std::byte{'M'},  std::byte{'P'}, std::byte{'Y'}};
// Bytes of a quoted string in the header: the longest legal one is
// 'fortran_order' (13); 64 leaves room and bounds what a context quotes.
constexpr std::size_t max_string_bytes = 64;
// numpy.save's room for growth: the digits of 8 * 2^64 - 1.
constexpr std::size_t growth_digits = 21;
constexpr std::uint64_t array_align = 64;  // NumPy's ARRAY_ALIGN

// Column-major (Fortran order) strides: the first extent varies fastest.
// Zero extents count as one, as in contiguous_strides(). Requires: the
// product of the extents fits 64 bits.
std::vector<std::uint64_t> column_major_strides(std::span<const std::uint64_t> shape) {
  std::vector<std::uint64_t> out(shape.size());
  std::uint64_t step = 1;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    out[k] = step;
    step *= shape[k] == 0 ? 1 : shape[k];
  }
  return out;
}

constexpr bool is_ws(int c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// The dict text of a header, scanned byte by byte through a wire::reader,
// so every position in an error is an offset in the file.
class header_scanner {
 public:
  header_scanner(wire::reader in, std::uint8_t major) noexcept : in_(in), major_(major) {}

  // The next byte, or -1 at the end.
  [[nodiscard]] int peek() const noexcept {
    const auto b = in_.read_le_at<std::uint8_t>(in_.position());
    return b ? *b : -1;
  }
  void take() noexcept { (void)in_.skip(1); }
  void ws() noexcept {
    while (is_ws(peek())) take();
  }
  bool eat(char c) noexcept {
    if (peek() != static_cast<unsigned char>(c)) return false;
    take();
    return true;
  }
  [[nodiscard]] bool at_end() const noexcept { return in_.at_end(); }

  template <class... V>
  [[nodiscard]] error fail(error_code code, const V&... what) const {
    return make_error(code, "npy header byte ", in_.offset(), ": ", what...);
  }
  [[nodiscard]] error bad(std::string_view what) const { return fail(checkpoint_errc::bad_npy_header, what); }

  result<void, error> expect(char c) {
    if (!eat(c)) return bad(std::string("expected '") + c + "'");
    return {};
  }

  // A quoted string, without prefixes or escapes.
  result<std::string_view, error> string() {
    const int q = peek();
    if (q != '\'' && q != '"') return bad("expected a quoted string");
    take();
    const std::size_t start = in_.position();
    for (;;) {
      const int c = peek();
      if (c < 0 || c == '\\' || c == '\n') return bad("string with an escape, a newline or no closing quote");
      if (c == q) break;
      take();
      if (in_.position() - start > max_string_bytes) return bad("string longer than 64 bytes");
    }
    const auto bytes = *in_.bytes_at(start, in_.position() - start);  // within the input: just scanned
    take();                                                             // the closing quote
    return std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());  // char view of the bytes
  }

  // A bare word: True, False (or anything else, to be refused by name).
  std::string_view word() {
    const std::size_t start = in_.position();
    for (int c = peek(); (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); c = peek()) take();
    const auto bytes = *in_.bytes_at(start, in_.position() - start);
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};  // char view of the bytes
  }

  // A non-negative decimal integer without leading zeros, below 2^64;
  // versions 1 and 2 may follow it by Python 2's 'L'.
  result<std::uint64_t, error> integer() {
    int c = peek();
    if (c < '0' || c > '9') return bad("expected an integer extent");
    std::uint64_t v = 0;
    const bool zero = c == '0';
    for (; c >= '0' && c <= '9'; c = peek()) {
      if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, static_cast<unsigned>(c - '0'), &v)) {
        return fail(checkpoint_errc::shape_overflow, "extent of 2^64 or more");
      }
      take();
      if (zero && peek() >= '0' && peek() <= '9') return bad("integer with a leading zero");
    }
    if (major_ < 3 && peek() == 'L') take();
    return v;
  }

 private:
  wire::reader in_;
  std::uint8_t major_;
};

// ORDER KIND SIZE (npy.h's descr rule) into h's order_char, kind and
// item_size.
result<void, error> parse_descr(std::string_view d, npy_header& h, const header_scanner& at) {
  const auto unsupported = [&](std::string_view why) {
    return at.fail(checkpoint_errc::unsupported_npy_dtype, "descr ", quote(d), ": ", why);
  };
  if (d.find('O') != std::string_view::npos) return unsupported("an object array is a pickle: ferry never loads one");
  if (d.size() < 3 || std::string_view("<>|=").find(d[0]) == std::string_view::npos) {
    return unsupported("not of the form ORDER KIND SIZE (such as '<f4')");
  }
  unsigned size = 0;
  const char* first = d.data() + 2;
  const char* last = d.data() + d.size();
  const auto [end, ec] = std::from_chars(first, last, size);
  if (ec != std::errc() || end != last || *first == '0' || last - first > 2) {
    return unsupported("not of the form ORDER KIND SIZE (such as '<f4')");
  }
  const char kind = d[1];
  bool ok = false;
  switch (kind) {
    case 'b': ok = size == 1; break;
    case 'i':
    case 'u': ok = size == 1 || size == 2 || size == 4 || size == 8; break;
    case 'f': ok = size == 2 || size == 4 || size == 8; break;
    case 'c': ok = size == 8 || size == 16; break;
    default: break;
  }
  if (!ok) return unsupported("not bool, an integer, f2, f4, f8, c8 or c16");
  h.order_char = d[0];
  h.kind = kind;
  h.item_size = static_cast<std::uint8_t>(size);
  return {};
}

enum key : std::uint8_t { descr_key, fortran_key, shape_key };

// The dict, from '{' to the end of the header text.
result<void, error> parse_dict(header_scanner& s, npy_header& h, const limits& lim) {
  bool seen[3] = {false, false, false};
  s.ws();
  FERRY_TRY(s.expect('{'));
  s.ws();
  while (s.peek() != '}') {
    FERRY_TRY_ASSIGN(const std::string_view k, s.string());
    key which{};
    if (k == "descr") which = descr_key;
    else if (k == "fortran_order") which = fortran_key;
    else if (k == "shape") which = shape_key;
    else return s.bad("key " + quote(k) + " (only 'descr', 'fortran_order' and 'shape')");
    if (seen[which]) return s.fail(errc::duplicate_key, "key ", quote(k), " twice");
    seen[which] = true;
    s.ws();
    FERRY_TRY(s.expect(':'));
    s.ws();
    switch (which) {
      case descr_key: {
        if (s.peek() == '[') return s.fail(checkpoint_errc::unsupported_npy_dtype, "a structured dtype (a list descr)");
        if (s.peek() == '(') return s.fail(checkpoint_errc::unsupported_npy_dtype, "a subarray dtype (a tuple descr)");
        const header_scanner at = s;  // errors point at the descr
        FERRY_TRY_ASSIGN(const std::string_view d, s.string());
        FERRY_TRY(parse_descr(d, h, at));
        break;
      }
      case fortran_key: {
        const std::string_view w = s.word();
        if (w != "True" && w != "False") return s.bad("fortran_order is neither True nor False");
        h.fortran_order = w == "True";
        break;
      }
      case shape_key: {
        FERRY_TRY(s.expect('('));
        s.ws();
        if (s.eat(')')) break;  // ()
        for (;;) {
          if (h.shape.size() >= lim.max_dims) return s.fail(errc::limit_exceeded, "more than ", lim.max_dims, " extents");
          FERRY_TRY_ASSIGN(const std::uint64_t n, s.integer());
          h.shape.push_back(n);
          s.ws();
          if (s.eat(',')) {
            s.ws();
            if (s.eat(')')) break;
            continue;
          }
          if (h.shape.size() == 1) return s.bad("shape (n) is an integer, not a tuple: write (n,)");
          FERRY_TRY(s.expect(')'));
          break;
        }
        break;
      }
    }
    s.ws();
    if (!s.eat(',')) break;
    s.ws();
  }
  FERRY_TRY(s.expect('}'));
  s.ws();
  if (!s.at_end()) return s.bad("text after the dict");
  if (!seen[descr_key]) return s.bad("no 'descr' key");
  if (!seen[fortran_key]) return s.bad("no 'fortran_order' key");
  if (!seen[shape_key]) return s.bad("no 'shape' key");
  return {};
}

// The extents as Python's repr of a tuple writes them: (), (3,), (3, 4).
std::string shape_repr(std::span<const std::uint64_t> shape) {
  std::string out = "(";
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (k > 0) out += ", ";
    out += std::to_string(shape[k]);
  }
  if (shape.size() == 1) out += ',';
  return out + ")";
}

// numpy's dtype.str of a ferry dtype in `order`.
result<std::string, error> npy_descr(codec::dtype t, wire::byte_order order) {
  const char o = order == wire::byte_order::little ? '<' : '>';
  switch (t) {
    case codec::dtype::boolean: return std::string("|b1");
    case codec::dtype::u8: return std::string("|u1");
    case codec::dtype::i8: return std::string("|i1");
    case codec::dtype::u16: return std::string{o, 'u', '2'};
    case codec::dtype::i16: return std::string{o, 'i', '2'};
    case codec::dtype::u32: return std::string{o, 'u', '4'};
    case codec::dtype::i32: return std::string{o, 'i', '4'};
    case codec::dtype::u64: return std::string{o, 'u', '8'};
    case codec::dtype::i64: return std::string{o, 'i', '8'};
    case codec::dtype::f16: return std::string{o, 'f', '2'};
    case codec::dtype::f32: return std::string{o, 'f', '4'};
    case codec::dtype::f64: return std::string{o, 'f', '8'};
    case codec::dtype::c64: return std::string{o, 'c', '8'};
    case codec::dtype::c128: return std::string{o, 'c', '1', '6'};
    case codec::dtype::bf16:
    case codec::dtype::f8_e4m3:
    case codec::dtype::f8_e5m2:
    case codec::dtype::f8_e4m3fnuz:
    case codec::dtype::f8_e5m2fnuz:
    case codec::dtype::c32: break;
  }
  return make_error(checkpoint_errc::unsupported_npy_dtype, codec::name(t), ": NumPy has no such dtype");
}

}  // namespace

result<npy_header, error> parse_npy_header(std::span<const std::byte> bytes, const limits& lim) {
  wire::reader in(bytes);
  const auto magic = in.read_bytes(npy_magic.size());
  FERRY_REQUIRE(magic, errc::truncated, "npy magic");
  FERRY_REQUIRE(std::equal(magic->begin(), magic->end(), npy_magic.begin()), errc::bad_magic, "npy magic");
  npy_header h;
  std::uint8_t minor = 0;
  FERRY_REQUIRE(in.read_le(h.major, minor), errc::truncated, "npy version");
  FERRY_REQUIRE(h.major >= 1 && h.major <= 3 && minor == 0, errc::unsupported_version, "npy version ", h.major, ".",
                minor);
  std::uint32_t length = 0;
  if (h.major == 1) {
    const auto n = in.read_le<std::uint16_t>();
    FERRY_REQUIRE(n, errc::truncated, "npy header length");
    length = *n;
  } else {
    const auto n = in.read_le<std::uint32_t>();
    FERRY_REQUIRE(n, errc::truncated, "npy header length");
    length = *n;
  }
  FERRY_REQUIRE(length <= lim.max_npy_header_bytes, errc::limit_exceeded, "npy header of ", length, " bytes (limit ",
                lim.max_npy_header_bytes, ")");
  auto text = in.sub(length);
  FERRY_REQUIRE(text, errc::truncated, "npy header of ", length, " bytes");
  h.data_offset = in.position();
  const auto body = text->bytes();
  if (h.major == 3) {
    const std::string_view s(reinterpret_cast<const char*>(body.data()), body.size());  // char view of the bytes
    FERRY_REQUIRE(valid_utf8(s), checkpoint_errc::bad_utf8, "npy header (version 3 is UTF-8)");
  }
  FERRY_REQUIRE(!body.empty() && body.back() == std::byte{'\n'}, checkpoint_errc::bad_npy_header,
                "npy header does not end in a newline");
  header_scanner s(*text, h.major);
  FERRY_TRY(parse_dict(s, h, lim));

  // The one shape rule (tensor.h): the strides of an empty array must not
  // wrap either.
  const auto data_bytes = shape_bytes(h.shape, h.item_size);
  FERRY_REQUIRE(data_bytes, checkpoint_errc::shape_overflow, "npy shape ", shape_repr(h.shape));
  h.data_bytes = *data_bytes;
  return h;
}

result<codec::dtype, error> npy_dtype(const npy_header& h) {
  using codec::dtype;
  switch (h.kind) {
    case 'b': return dtype::boolean;
    case 'i': return h.item_size == 1 ? dtype::i8 : h.item_size == 2 ? dtype::i16 : h.item_size == 4 ? dtype::i32 : dtype::i64;
    case 'u': return h.item_size == 1 ? dtype::u8 : h.item_size == 2 ? dtype::u16 : h.item_size == 4 ? dtype::u32 : dtype::u64;
    case 'f': return h.item_size == 2 ? dtype::f16 : h.item_size == 4 ? dtype::f32 : dtype::f64;
    case 'c': return h.item_size == 8 ? dtype::c64 : dtype::c128;
    default: break;
  }
  return make_error(checkpoint_errc::unsupported_npy_dtype, "descr '", h.order_char, h.kind,
                    static_cast<unsigned>(h.item_size), "'");
}

result<wire::byte_order, error> npy_order(const npy_header& h, std::optional<wire::byte_order> native) {
  if (h.order_char == '<') return wire::byte_order::little;
  if (h.order_char == '>') return wire::byte_order::big;
  if (h.item_size == 1) return wire::host_order;  // nothing to swap
  if (native) return *native;
  return make_error(errc::bad_byte_order, "descr '", h.order_char, h.kind, static_cast<unsigned>(h.item_size),
                    "' names the writer's native order, which the file does not record (read_options::npy_native_order)");
}

result<std::vector<std::byte>, error> write_npy_header(codec::dtype dtype, wire::byte_order order, bool fortran_order,
                                                       std::span<const std::uint64_t> shape, const limits& lim) {
  FERRY_TRY_ASSIGN(const std::string descr, npy_descr(dtype, order));
  FERRY_REQUIRE(shape.size() <= lim.max_dims, errc::limit_exceeded, "more than ", lim.max_dims, " extents");
  std::string text = "{'descr': '" + descr + "', 'fortran_order': " + (fortran_order ? "True" : "False") +
                     ", 'shape': " + shape_repr(shape) + ", }";
  if (!shape.empty()) {
    const std::size_t digits = std::to_string(fortran_order ? shape.back() : shape.front()).size();  // <= 20
    text.append(growth_digits - digits, ' ');
  }
  const std::uint64_t with_newline = text.size() + 1;
  // Version 1.0 when the padded length fits its u16, else 2.0. The padding
  // is 1..64 bytes: a full 64 when the text already ends on a boundary.
  std::uint8_t major = 1;
  std::uint64_t prefix = 10;
  std::uint64_t pad = array_align - (prefix + with_newline) % array_align;
  if (with_newline + pad > 0xFFFF) {
    major = 2;
    prefix = 12;
    pad = array_align - (prefix + with_newline) % array_align;
  }
  const std::uint64_t length = with_newline + pad;
  std::vector<std::byte> out;
  out.reserve(static_cast<std::size_t>(prefix + length));
  {
    wire::vector_writer w(out);
    w.write_bytes(npy_magic);
    w.write<std::uint8_t>(major, wire::byte_order::little);
    w.write<std::uint8_t>(0, wire::byte_order::little);
    if (major == 1) w.write<std::uint16_t>(static_cast<std::uint16_t>(length), wire::byte_order::little);
    else w.write<std::uint32_t>(static_cast<std::uint32_t>(length), wire::byte_order::little);
    w.write_bytes(std::as_bytes(std::span(text)));
  }
  out.resize(out.size() + static_cast<std::size_t>(pad), std::byte{' '});
  out.push_back(std::byte{'\n'});
  return out;
}

namespace detail {

result<tensor_info, error> npy_tensor(const npy_header& h, std::string name, std::uint32_t storage) {
  tensor_info t;
  FERRY_TRY_ASSIGN(t.dtype, npy_dtype(h));
  t.name = std::move(name);
  t.shape = h.shape;
  // parse_npy_header() checked that the product of the extents does not
  // overflow.
  t.strides = h.fortran_order ? column_major_strides(h.shape) : contiguous_strides(h.shape);
  t.storage = storage;
  return t;
}

result<parsed_file, error> parse_npy(std::uint64_t size, const zip_read_at& read, const read_options& opt) {
  // The header lies in the first 12 + max_npy_header_bytes bytes.
  const std::uint64_t most = 12 + opt.lim.max_npy_header_bytes;
  std::vector<std::byte> head(static_cast<std::size_t>(std::min(size, most)));
  FERRY_TRY(read(0, head));
  FERRY_TRY_ASSIGN(const npy_header h, parse_npy_header(head, opt.lim));
  FERRY_TRY_ASSIGN(const wire::byte_order order, npy_order(h, opt.npy_native_order));
  // data_offset <= head.size() <= size.
  const std::uint64_t present = size - h.data_offset;
  FERRY_REQUIRE(h.data_bytes <= present, errc::truncated, "npy data: ", h.data_bytes, " bytes announced, ", present,
                " present");
  FERRY_REQUIRE(h.data_bytes == present, errc::trailing_bytes, "after the npy data: ", present - h.data_bytes, " bytes");

  parsed_file out;
  out.format = file_format::npy;
  out.order = order;
  out.data_end = size;
  out.alignment = 1;  // the largest power of two up to 64 dividing the data offset
  while (out.alignment < array_align && h.data_offset % (out.alignment * 2) == 0) out.alignment *= 2;
  FERRY_TRY_ASSIGN(tensor_info t, npy_tensor(h, "arr_0", 0));
  storage_info st;
  st.offset = h.data_offset;
  st.nbytes = h.data_bytes;
  st.dtype = t.dtype;
  out.tensors.push_back(std::move(t));
  out.storages.push_back(st);
  return out;
}

result<npy_payload, error> prepare_npy(const tensor_ref& t, wire::byte_order order, const limits& lim) {
  npy_payload p;
  const std::size_t size = codec::size_of(t.dtype);
  p.width = codec::order_width(t.dtype);
  p.order = order;
  const std::vector<std::uint64_t> row_major = contiguous_strides(t.shape);
  std::vector<std::uint64_t> strides(t.strides.begin(), t.strides.end());
  if (strides.empty()) strides = row_major;
  FERRY_TRY(check_view(t.dtype, t.shape, strides, t.offset, t.storage.size(), lim.max_dims));
  const std::vector<std::uint64_t> column_major = column_major_strides(t.shape);
  std::uint64_t n = size;
  for (const auto d : t.shape) n *= d;  // check_view() checked the product
  // A 1-d (or 0-d) view is both: row-major wins, fortran_order False, as
  // numpy.save writes it.
  const bool c_order = strides == row_major;
  const bool f_order = !c_order && strides == column_major;
  if (c_order || f_order) {
    p.data = n == 0 ? std::span<const std::byte>{}
                    : t.storage.subspan(static_cast<std::size_t>(t.offset * size), static_cast<std::size_t>(n));
  } else {
    p.gathered = gather(t);
    p.data = p.gathered;
  }
  FERRY_TRY_ASSIGN(p.header, write_npy_header(t.dtype, order, f_order, t.shape, lim));
  return p;
}

}  // namespace detail

result<void, error> detail::npy_payload::emit(
    const std::function<result<void, error>(std::span<const std::byte>)>& sink) const {
  FERRY_TRY(sink(header));
  return emit_in_order(data, width, order, sink);
}

result<void, error> save_npy(const std::filesystem::path& target, const tensor_ref& tensor, const npy_options& opt) {
  const std::string file = target.string();
  auto payload = detail::prepare_npy(tensor, opt.order, opt.limits);
  if (!payload) return payload.error().wrap(file);
  FERRY_TRY_ASSIGN(auto out, base::atomic_file::create(target, opt.sync, opt.sync && opt.direct));
  FERRY_TRY(payload->emit([&](std::span<const std::byte> b) { return out.write(b); }));
  return out.commit();
}

}  // namespace ferry::checkpoint
