// The reader's view of a GGUF file (gguf.h's WHAT THE READER HANDS OUT):
// tensors and storages for checkpoint::open(), metadata as text, and
// dequantization on request. The parser is parse.cpp.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "ferry/base/require.h"
#include "ferry/checkpoint/gguf/internal.h"
#include "ferry/checkpoint/detail/mapped_file.h"
#include "ferry/checkpoint/gguf.h"

namespace ferry::checkpoint {
namespace {

// JSON text of one string (gguf.h: render_gguf_value).
void json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    // The length of a valid UTF-8 sequence starting here, or 0.
    std::size_t len = 0;
    if (c >= 0x80) {
      len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
      if (len != 0 && (i + len > s.size() || !valid_utf8(s.substr(i, len)))) len = 0;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && len == 0)) {
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else if (len != 0) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  out += '"';
}

template <class T>
void number(std::string& out, T v, bool in_json) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) {
      const char* text = std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
      if (in_json) out += '"';
      out += text;
      if (in_json) out += '"';
      return;
    }
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// Appends v's text; false once `out` passes max_bytes (the caller then
// summarises).
bool render(std::string& out, const gguf_value& v, bool in_json, std::size_t max_bytes);

bool render_array(std::string& out, const gguf_array& a, std::size_t max_bytes) {
  out += '[';
  bool first = true;
  const auto sep = [&] {
    if (!first) out += ", ";
    first = false;
  };
  const bool ok = std::visit(
      [&](const auto& elems) {
        for (const auto& e : elems) {
          sep();
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, std::string>) json_string(out, e);
          else if constexpr (std::is_same_v<E, gguf_array>) {
            if (!render_array(out, e, max_bytes)) return false;
          } else if constexpr (std::is_same_v<E, bool>) out += e ? "true" : "false";
          else number(out, e, true);
          if (out.size() > max_bytes) return false;
        }
        return true;
      },
      a.values);
  out += ']';
  return ok && out.size() <= max_bytes;
}

bool render(std::string& out, const gguf_value& v, bool in_json, std::size_t max_bytes) {
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::string>) {
          if (in_json) json_string(out, x);
          else out += x;
        } else if constexpr (std::is_same_v<X, gguf_array>) {
          (void)render_array(out, x, max_bytes);
        } else if constexpr (std::is_same_v<X, bool>) out += x ? "true" : "false";
        else number(out, x, in_json);
      },
      v);
  return out.size() <= max_bytes;
}

// A storage of f32 values (get_dequantized()).
class float_storage final : public storage_buffer {
 public:
  explicit float_storage(std::vector<float> v) noexcept : values_(std::move(v)) {
    bytes_ = std::as_bytes(std::span(values_));
  }

 private:
  std::vector<float> values_;
};

}  // namespace

std::string render_gguf_value(const gguf_value& v, std::size_t max_bytes) {
  std::string out;
  if (render(out, v, false, max_bytes)) return out;
  if (const auto* a = std::get_if<gguf_array>(&v)) {
    return context("<array of ", a->size(), " ", name(a->type()), ": over ", max_bytes, " bytes as JSON>");
  }
  return context("<", name(type_of(v)), " of ", out.size(), " bytes: over ", max_bytes, " bytes>");
}

std::optional<codec::dtype> dtype_of(ggml_type t) noexcept {
  switch (t) {
    case ggml_type::f32: return codec::dtype::f32;
    case ggml_type::f16: return codec::dtype::f16;
    case ggml_type::bf16: return codec::dtype::bf16;
    case ggml_type::f64: return codec::dtype::f64;
    case ggml_type::i8: return codec::dtype::i8;
    case ggml_type::i16: return codec::dtype::i16;
    case ggml_type::i32: return codec::dtype::i32;
    case ggml_type::i64: return codec::dtype::i64;
    default: return std::nullopt;
  }
}

std::optional<ggml_type> ggml_type_of(codec::dtype d) noexcept {
  switch (d) {
    case codec::dtype::f32: return ggml_type::f32;
    case codec::dtype::f16: return ggml_type::f16;
    case codec::dtype::bf16: return ggml_type::bf16;
    case codec::dtype::f64: return ggml_type::f64;
    case codec::dtype::i8: return ggml_type::i8;
    case codec::dtype::i16: return ggml_type::i16;
    case codec::dtype::i32: return ggml_type::i32;
    case codec::dtype::i64: return ggml_type::i64;
    default: return std::nullopt;
  }
}

result<tensor, error> get_dequantized(const reader& r, std::string_view tensor_name) {
  const gguf_header* h = r.gguf();
  if (h == nullptr) {
    return make_error(errc::bad_value, r.path().string(), ": not a GGUF file (", format_name(r.format()), ")");
  }
  const tensor_info* t = r.find(tensor_name);
  if (t == nullptr) return make_error(checkpoint_errc::tensor_not_found, r.path().string(), ": tensor ", quote(tensor_name));
  const gguf_tensor& g = h->tensors[t->storage];
  const std::uint64_t numel = g.numel();
  if (numel > SIZE_MAX / sizeof(float)) {
    return make_error(checkpoint_errc::storage_too_large, r.path().string(), ": tensor ", quote(tensor_name));
  }
  FERRY_TRY_ASSIGN(const tensor blocks, r.get(*t));  // host order
  std::vector<float> values(static_cast<std::size_t>(numel));
  if (auto d = dequantize(g.type, blocks.bytes(), wire::host_order, values); !d) {
    return make_error(d.error(), r.path().string(), ": tensor ", quote(tensor_name));
  }
  tensor_info out;
  out.name = t->name;
  out.dtype = codec::dtype::f32;
  out.shape.assign(g.ne.rbegin(), g.ne.rend());
  out.strides = contiguous_strides(out.shape);
  out.storage = t->storage;
  return tensor(std::move(out), std::make_shared<float_storage>(std::move(values)));
}

result<gguf_header, error> read_gguf_header(const std::filesystem::path& path, const read_options& opt) {
  FERRY_TRY_ASSIGN(auto file, detail::mapped_file::open(path));
  const auto read = [&file](std::uint64_t offset, std::span<std::byte> out) -> result<void, error> {
    int sys_errno = 0;
    if (auto r = file.read(offset, out, sys_errno); !r) return error(r.error(), {}, sys_errno);
    return {};
  };
  auto h = detail::read_gguf_header(file.size(), read, opt);
  if (!h) return h.error().wrap(path.string());
  return h;
}

namespace detail {

result<parsed_file, error> parse_gguf(std::uint64_t size, const zip_read_at& read, const read_options& opt) {
  FERRY_TRY_ASSIGN(gguf_header h, read_gguf_header(size, read, opt));
  parsed_file out;
  out.format = file_format::gguf;
  out.order = h.order;
  out.alignment = h.alignment;
  out.data_end = size;
  out.tensors.reserve(h.tensors.size());
  out.storages.reserve(h.tensors.size());
  for (std::size_t i = 0; i < h.tensors.size(); ++i) {
    const gguf_tensor& g = h.tensors[i];
    tensor_info t;
    t.name = g.name;
    t.shape.assign(g.ne.rbegin(), g.ne.rend());
    const auto dtype = dtype_of(g.type);
    t.dtype = dtype.value_or(codec::dtype::u8);
    if (!dtype && !t.shape.empty()) {  // raw blocks: the fastest extent counted in bytes
      const ggml_type_info& ti = info(g.type);
      t.shape.back() = t.shape.back() / ti.block_elements * ti.block_bytes;
    }
    t.strides = contiguous_strides(t.shape);
    t.storage = static_cast<std::uint32_t>(i);
    storage_info st;
    st.offset = h.data_offset + g.offset;
    st.nbytes = g.nbytes;
    st.dtype = t.dtype;
    out.tensors.push_back(std::move(t));
    out.storages.push_back(st);
  }
  // Metadata as text (render_gguf_value), bounded in total.
  std::uint64_t budget = opt.lim.max_metadata_bytes;
  for (const auto& kv : h.metadata) {
    std::string text = render_gguf_value(kv.value, static_cast<std::size_t>(std::min<std::uint64_t>(budget, SIZE_MAX)));
    budget -= std::min<std::uint64_t>(budget, text.size());
    out.metadata.emplace(kv.key, std::move(text));
  }
  out.source = std::make_shared<const gguf_storages>(std::move(h));
  return out;
}

std::size_t gguf_storages::block_bytes(std::uint32_t i) const noexcept {
  const ggml_type_info& t = info(header.tensors[i].type);
  return t.quantized ? t.block_bytes : 0;
}

void gguf_storages::blocks_to_host(std::uint32_t i, std::span<std::byte> blocks, wire::byte_order from) const noexcept {
  swap_blocks_in_place(header.tensors[i].type, blocks, from, wire::host_order);
}

}  // namespace detail

const gguf_header* reader::gguf() const noexcept {
  const auto* s = dynamic_cast<const detail::gguf_storages*>(detail::parsed_of(*this).source.get());
  return s != nullptr ? &s->header : nullptr;
}

}  // namespace ferry::checkpoint
