#include "ferry/schema/schema.h"

#include <unordered_set>

namespace ferry::schema {
namespace {

using wire::byte_order;
using wire::reader;

// Descriptors are single bytes and varints, so their own byte order is moot.
constexpr byte_order desc_order = byte_order::little;

static_assert(static_cast<int>(kind::f16) == static_cast<int>(codec::dtype::f16) &&
                  static_cast<int>(kind::f8_e5m2) == static_cast<int>(codec::dtype::f8_e5m2) &&
                  static_cast<int>(kind::boolean) == static_cast<int>(codec::dtype::boolean),
              "scalar kinds are dtype codes");

// Kinds whose only parameter is one element descriptor.
bool single_element(kind k) noexcept {
  switch (k) {
    case kind::sequence:
    case kind::set:
    case kind::optional:
    case kind::shared:
    case kind::unique:
    case kind::weak:
    case kind::raw: return true;
    default: return false;
  }
}

// The last scalar kind of a descriptor version: version 1 ended at f64 (0x0B).
std::uint8_t last_scalar(std::uint8_t version) noexcept {
  return version == descriptor_version_1 ? 0x0B : static_cast<std::uint8_t>(kind::f8_e5m2);
}

result<void> check_descriptor(reader& in, std::size_t type_count, std::size_t depth_left, std::uint8_t last) {
  if (depth_left == 0) return errc::depth_exceeded;
  FERRY_TRY_ASSIGN(const auto k, in.read<std::uint8_t>(desc_order));
  if ((k >= 1 && k <= last) || k == static_cast<std::uint8_t>(kind::string)) return {};
  if (single_element(static_cast<kind>(k))) return check_descriptor(in, type_count, depth_left - 1, last);
  switch (static_cast<kind>(k)) {
    case kind::array: {
      FERRY_TRY(in.read_varint());  // the length
      return check_descriptor(in, type_count, depth_left - 1, last);
    }
    case kind::map: {
      FERRY_TRY(check_descriptor(in, type_count, depth_left - 1, last));
      return check_descriptor(in, type_count, depth_left - 1, last);
    }
    case kind::variant:
    case kind::tuple: {
      FERRY_TRY_ASSIGN(const auto n, in.read_varint());
      if (n == 0 && static_cast<kind>(k) == kind::variant) return schema_errc::bad_descriptor;
      // Each element takes at least one byte, so the input bounds the loop.
      if (n > in.remaining()) return errc::truncated;
      for (std::uint64_t i = 0; i < n; ++i) {
        FERRY_TRY(check_descriptor(in, type_count, depth_left - 1, last));
      }
      return {};
    }
    case kind::structure: {
      FERRY_TRY_ASSIGN(const auto index, in.read_varint());
      if (index >= type_count) return schema_errc::bad_type_index;
      return {};
    }
    default:
      return schema_errc::bad_descriptor;
  }
}

std::string bytes_to_string(std::span<const std::byte> b) {
  std::string s(b.size(), '\0');
  for (std::size_t i = 0; i < b.size(); ++i) s[i] = static_cast<char>(b[i]);
  return s;
}

result<std::string> read_name(reader& in, const limits& lim) {
  FERRY_TRY_ASSIGN(const auto b, in.read_length_prefixed(lim.max_name_bytes));
  if (b.empty()) return errc::bad_value;
  return bytes_to_string(b);
}

void write_name(wire::vector_writer& out, std::string_view name) {
  out.write_length_prefixed(std::as_bytes(std::span(name.data(), name.size())));
}

struct walker {
  const schema& s;
  byte_order order;
  const value_visitor& v;
  const limits& lim;
  std::size_t& values;

  result<void> count_value() {
    if (++values > lim.max_values) return errc::limit_exceeded;
    return {};
  }

  result<std::uint64_t> read_count(reader& in) {
    FERRY_TRY_ASSIGN(const auto n, in.read_varint());
    if (n > lim.max_count) return errc::limit_exceeded;
    return n;
  }

  result<void> walk(reader& in, reader& desc, std::size_t depth) {
    if (depth >= lim.max_depth) return errc::depth_exceeded;
    FERRY_TRY(count_value());
    auto kb = desc.read<std::uint8_t>(desc_order);
    if (!kb) return schema_errc::bad_descriptor;
    const auto k = static_cast<kind>(*kb);
    if (const std::size_t size = scalar_size(k); size != 0) {
      FERRY_TRY_ASSIGN(const auto bytes, in.read_bytes(size));
      if (k == kind::boolean && std::to_integer<unsigned>((bytes)[0]) > 1) return errc::bad_value;
      if (v.scalar) v.scalar(k, bytes, order);
      return {};
    }
    switch (k) {
      case kind::string: {
        FERRY_TRY_ASSIGN(const auto n, read_count(in));
        FERRY_TRY_ASSIGN(const auto bytes, in.read_bytes(static_cast<std::size_t>(n)));
        if (v.string) v.string(std::string_view(bytes_to_string(bytes)));
        return {};
      }
      case kind::sequence:
      case kind::set: {
        FERRY_TRY_ASSIGN(const auto n, read_count(in));
        return elements(in, desc, k, n, 1, depth);
      }
      case kind::map: {
        FERRY_TRY_ASSIGN(const auto n, read_count(in));
        return elements(in, desc, k, n, 2, depth);
      }
      case kind::array: {
        auto n = desc.read_varint();
        if (!n) return schema_errc::bad_descriptor;
        if (*n > lim.max_count) return errc::limit_exceeded;
        return elements(in, desc, k, *n, 1, depth);
      }
      case kind::optional: {
        FERRY_TRY_ASSIGN(const auto flag, in.read<std::uint8_t>(order));
        if (flag > 1) return errc::bad_value;
        if (v.tag) v.tag(k, flag);
        if (flag == 1) return walk(in, desc, depth + 1);
        return skip_descriptor(desc);
      }
      case kind::variant: {
        auto n = desc.read_varint();
        if (!n) return schema_errc::bad_descriptor;
        FERRY_TRY_ASSIGN(const auto index, in.read_varint());
        if (index >= *n) return errc::bad_value;
        if (v.tag) v.tag(k, index);
        for (std::uint64_t i = 0; i < *n; ++i) {
          if (i == index) {
            FERRY_TRY(walk(in, desc, depth + 1));
          } else if (auto r = skip_descriptor(desc); !r) {
            return r;
          }
        }
        if (v.end) v.end(k);
        return {};
      }
      case kind::tuple: {
        auto n = desc.read_varint();
        if (!n) return schema_errc::bad_descriptor;
        if (v.begin) v.begin(k, *n);
        for (std::uint64_t i = 0; i < *n; ++i) {
          FERRY_TRY(walk(in, desc, depth + 1));
        }
        if (v.end) v.end(k);
        return {};
      }
      case kind::structure: {
        auto index = desc.read_varint();
        if (!index || *index >= s.types.size()) return schema_errc::bad_type_index;
        const type_def& t = s.types[static_cast<std::size_t>(*index)];
        if (v.begin) v.begin(k, *index);
        for (const field_def& f : t.fields) {
          if (v.field) v.field(f);
          reader fd(f.type);
          FERRY_TRY(walk(in, fd, depth + 1));
        }
        if (v.end) v.end(k);
        return {};
      }
      case kind::shared:
      case kind::unique:
      case kind::weak: {
        FERRY_TRY_ASSIGN(const auto id, in.read_varint());
        if (v.reference) v.reference(k, id);
        return skip_descriptor(desc);
      }
      case kind::raw: {
        FERRY_TRY_ASSIGN(const auto ref, in.read<std::uint32_t>(order));
        if (v.reference) v.reference(k, ref);
        return skip_descriptor(desc);
      }
      default:
        return schema_errc::bad_descriptor;
    }
  }

  // Walks `count` elements (pairs when `arity` is 2) that share the element
  // descriptor(s) at the front of `desc`, then leaves `desc` past them.
  result<void> elements(reader& in, reader& desc, kind k, std::uint64_t count, int arity, std::size_t depth) {
    if (v.begin) v.begin(k, count);
    const std::size_t elem_start = desc.position();
    for (std::uint64_t i = 0; i < count; ++i) {
      FERRY_TRY(desc.seek(elem_start));
      if (arity == 2 && v.begin) v.begin(kind::tuple, 2);  // a map entry
      for (int a = 0; a < arity; ++a) {
        FERRY_TRY(walk(in, desc, depth + 1));
      }
      if (arity == 2 && v.end) v.end(kind::tuple);
    }
    if (count == 0) {
      for (int a = 0; a < arity; ++a) {
        FERRY_TRY(skip_descriptor(desc));
      }
    }
    if (v.end) v.end(k);
    return {};
  }

  // Descriptors were validated when the schema was read, so skipping one
  // cannot fail for depth; errors here mean a descriptor outside a schema.
  result<void> skip_descriptor(reader& desc) {
    if (auto r = check_descriptor(desc, s.types.size(), lim.max_depth, last_scalar(descriptor_version)); !r) return schema_errc::bad_descriptor;
    return {};
  }
};

}  // namespace

std::string to_string(std::span<const std::byte> desc, const schema& s) {
  reader d(desc);
  std::string out;
  auto one = [&](auto& self) -> void {
    auto k = d.read<std::uint8_t>(desc_order);
    if (!k) return;
    auto param = [&]() { return d.read_varint().value_or(0); };
    switch (static_cast<kind>(*k)) {
      case kind::boolean: out += "bool"; return;
      case kind::u8: out += "u8"; return;
      case kind::i8: out += "i8"; return;
      case kind::u16: out += "u16"; return;
      case kind::i16: out += "i16"; return;
      case kind::u32: out += "u32"; return;
      case kind::i32: out += "i32"; return;
      case kind::u64: out += "u64"; return;
      case kind::i64: out += "i64"; return;
      case kind::f16: out += "f16"; return;
      case kind::bf16: out += "bf16"; return;
      case kind::f32: out += "f32"; return;
      case kind::f64: out += "f64"; return;
      case kind::f8_e4m3: out += "f8_e4m3"; return;
      case kind::f8_e5m2: out += "f8_e5m2"; return;
      case kind::string: out += "string"; return;
      case kind::structure: {
        const auto i = param();
        out += "struct<" + (i < s.types.size() ? s.types[static_cast<std::size_t>(i)].name : "?") + ">";
        return;
      }
      case kind::array: out += "array<" + std::to_string(param()) + ", "; break;
      case kind::variant:
      case kind::tuple: {
        const auto n = param();
        out += static_cast<kind>(*k) == kind::variant ? "variant<" : "tuple<";
        for (std::uint64_t i = 0; i < n; ++i) {
          if (i != 0) out += ", ";
          self(self);
        }
        out += ">";
        return;
      }
      case kind::map: out += "map<"; self(self); out += ", "; break;
      case kind::sequence: out += "sequence<"; break;
      case kind::set: out += "set<"; break;
      case kind::optional: out += "optional<"; break;
      case kind::shared: out += "shared<"; break;
      case kind::unique: out += "unique<"; break;
      case kind::weak: out += "weak<"; break;
      case kind::raw: out += "raw<"; break;
      default: out += "?"; return;
    }
    self(self);
    out += ">";
  };
  one(one);
  return out;
}

std::optional<codec::dtype> scalar_dtype(kind k) noexcept {
  const auto code = static_cast<std::uint8_t>(k);
  if (code < 1 || code > static_cast<std::uint8_t>(kind::f8_e5m2)) return std::nullopt;
  return static_cast<codec::dtype>(code);
}

std::size_t scalar_size(kind k) noexcept {
  const auto t = scalar_dtype(k);
  return t ? codec::size_of(*t) : 0;
}

std::ptrdiff_t schema::find(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < types.size(); ++i) {
    if (types[i].name == name) return static_cast<std::ptrdiff_t>(i);
  }
  return -1;
}

void encode(const schema& s, wire::vector_writer& out) {
  out.write_varint(s.types.size());
  for (const type_def& t : s.types) {
    write_name(out, t.name);
    out.write_varint(t.version);
    out.write<std::uint8_t>(t.abstract ? 1 : 0, desc_order);
    out.write_varint(t.fields.size());
    for (const field_def& f : t.fields) {
      out.write_varint(f.tag);
      write_name(out, f.name);
      out.write_bytes(f.type);
    }
  }
}

result<std::span<const std::byte>> read_descriptor(reader& in, std::size_t type_count, std::size_t max_depth,
                                                   std::uint8_t version) {
  reader probe(in.rest());
  FERRY_TRY(check_descriptor(probe, type_count, max_depth, last_scalar(version)));
  return in.read_bytes(probe.position());  // within rest() by construction
}

namespace {

// Copies one validated version-1 descriptor from `in` to `out`, renumbering
// its scalars. Validation bounded the depth.
void upgrade(reader& in, descriptor& out) {
  const auto k = *in.read<std::uint8_t>(desc_order);
  if (k == 0x0A || k == 0x0B) {  // version 1's f32 and f64
    out.push_back(static_cast<std::byte>(k == 0x0A ? kind::f32 : kind::f64));
    return;
  }
  out.push_back(static_cast<std::byte>(k));
  auto copy_varint = [&] {
    const auto v = *in.read_varint();
    std::byte buf[10];
    out.insert(out.end(), buf, buf + wire::encode_varint(v, buf));
    return v;
  };
  if (single_element(static_cast<kind>(k))) {
    upgrade(in, out);
    return;
  }
  switch (static_cast<kind>(k)) {
    case kind::array:
      copy_varint();
      upgrade(in, out);
      return;
    case kind::map:
      upgrade(in, out);
      upgrade(in, out);
      return;
    case kind::variant:
    case kind::tuple:
      for (auto n = copy_varint(); n > 0; --n) upgrade(in, out);
      return;
    case kind::structure: copy_varint(); return;
    default: return;  // the other scalars and string
  }
}

}  // namespace

descriptor upgrade_descriptor(std::span<const std::byte> v1) {
  descriptor out;
  out.reserve(v1.size());
  reader in(v1);
  upgrade(in, out);
  return out;
}

result<schema> decode(reader& in, const limits& lim, std::uint8_t desc_version) {
  // Smallest type: name length + 1 name byte + version + flags + field count.
  FERRY_TRY_ASSIGN(const auto count, in.read_count(5, lim.max_types));
  schema s;
  s.types.resize(count);
  std::unordered_set<std::string> type_names;
  for (type_def& t : s.types) {
    FERRY_TRY_ASSIGN(const auto name, read_name(in, lim));
    t.name = std::move(name);
    if (!type_names.insert(t.name).second) return errc::duplicate_key;
    FERRY_TRY_ASSIGN(const auto version, in.read_varint<std::uint32_t>());
    t.version = version;
    FERRY_TRY_ASSIGN(const auto flags, in.read<std::uint8_t>(desc_order));
    if (flags > 1) return errc::bad_value;
    t.abstract = flags == 1;
    // Smallest field: tag + name length + 1 name byte + 1 descriptor byte.
    FERRY_TRY_ASSIGN(const auto fields, in.read_count(4, lim.max_fields));
    if (t.abstract && fields != 0) return errc::bad_value;
    t.fields.resize(fields);
    std::unordered_set<std::uint32_t> tags;
    std::unordered_set<std::string> names;
    for (field_def& f : t.fields) {
      FERRY_TRY_ASSIGN(const auto tag, in.read_varint<std::uint32_t>());
      if (tag == 0) return errc::bad_value;
      f.tag = tag;
      FERRY_TRY_ASSIGN(const auto fname, read_name(in, lim));
      f.name = std::move(fname);
      if (!tags.insert(f.tag).second || !names.insert(f.name).second) return schema_errc::duplicate_field;
      FERRY_TRY_ASSIGN(const auto d, read_descriptor(in, s.types.size(), lim.max_depth, desc_version));
      if (desc_version == descriptor_version_1) {
        f.type = upgrade_descriptor(d);
      } else {
        f.type.assign(d.begin(), d.end());
      }
    }
  }
  return s;
}

result<void> walk_value(reader& in, std::span<const std::byte> desc, const schema& s, byte_order order,
                        const value_visitor& v, const limits& lim, std::size_t& values, std::size_t depth) {
  reader d(desc);
  walker w{s, order, v, lim, values};
  return w.walk(in, d, depth);
}

}  // namespace ferry::schema
