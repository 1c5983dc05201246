#include "ferry/graph/dump.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <vector>

#include "ferry/codec/half.h"
#include "ferry/graph/detail/state.h"

namespace ferry::graph {
namespace {

using schema::kind;

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlongs,
// no surrogates, nothing above U+10FFFF), or 0.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = at(i);
  std::size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  }
  return n;
}

void write_escaped(std::ostream& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out << '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      // Valid UTF-8 passes through; any other byte is shown as \u00XX.
      if (const std::size_t n = utf8_length(s, i); n != 0) {
        out.write(s.data() + i, static_cast<std::streamsize>(n));
        i += n - 1;
      } else {
        out << "\\u00" << hex[c >> 4] << hex[c & 15];
      }
      continue;
    }
    switch (c) {
      case '"': out << "\\\""; break;
      case '\\': out << "\\\\"; break;
      case '\n': out << "\\n"; break;
      case '\r': out << "\\r"; break;
      case '\t': out << "\\t"; break;
      default:
        if (c < 0x20) {
          out << "\\u00" << hex[c >> 4] << hex[c & 15];
        } else {
          out << static_cast<char>(c);
        }
    }
  }
  out << '"';
}

// An OCP FP8 pattern as a float (exact: every FP8 value is a float).
// E4M3 (exponent bits 4, bias 7) has no infinities and one NaN pattern per
// sign (all ones); E5M2 (5, bias 15) is IEEE-like, the top byte of an f16.
float fp8_to_float(std::uint8_t b, int exponent_bits) {
  if (exponent_bits == 5) return codec::to_float(f16{static_cast<std::uint16_t>(b << 8)});
  const bool negative = (b & 0x80) != 0;
  const int e = (b >> 3) & 0xF;
  const int m = b & 0x7;
  float v = 0;
  if (e == 0xF && m == 0x7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -9);  // subnormal: m * 2^-6 / 8
  } else {
    v = std::ldexp(static_cast<float>(8 + m), e - 10);  // (1 + m/8) * 2^(e-7)
  }
  return negative ? -v : v;
}

template <class F>
void write_float(std::ostream& out, F v) {
  if (std::isnan(v)) {
    out << "\"NaN\"";
  } else if (std::isinf(v)) {
    out << (v < 0 ? "\"-Infinity\"" : "\"Infinity\"");
  } else {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.write(buf, r.ptr - buf);
  }
}

/// Emits JSON for schema::walk_value's callbacks, placing commas.
class json_emitter {
 public:
  json_emitter(std::ostream& out, const schema::schema& s) : out_(out), s_(s) {}

  schema::value_visitor visitor() {
    schema::value_visitor v;
    v.scalar = [this](kind k, std::span<const std::byte> b, wire::byte_order order) { scalar(k, b, order); };
    v.string = [this](std::string_view text) {
      comma();
      write_escaped(out_, text);
    };
    v.begin = [this](kind k, std::uint64_t n) {
      comma();
      if (k == kind::structure) {
        out_ << "{\"$type\": ";
        write_escaped(out_, s_.types[static_cast<std::size_t>(n)].name);
        open_.push_back(false);
      } else {
        out_ << '[';
        open_.push_back(true);
      }
    };
    v.end = [this](kind k) {
      open_.pop_back();
      out_ << (k == kind::structure || k == kind::variant ? '}' : ']');
    };
    v.field = [this](const schema::field_def& f) {
      out_ << ", ";
      write_escaped(out_, f.name);
      out_ << ": ";
      after_key_ = true;
    };
    v.tag = [this](kind k, std::uint64_t t) {
      if (k == kind::optional) {
        if (t == 0) null();
        return;
      }
      comma();
      out_ << "{\"$variant\": " << t << ", \"value\": ";
      open_.push_back(true);
      after_key_ = true;
    };
    v.reference = [this](kind k, std::uint64_t id) {
      if (id == 0) return null();
      comma();
      const char* key = k == kind::shared ? "$ref" : k == kind::unique ? "$unique" : k == kind::weak ? "$weak" : "$raw";
      out_ << "{\"" << key << "\": " << id << '}';
    };
    return v;
  }

  // Call before a value at top level, so its first element needs no comma.
  void reset() {
    open_.clear();
    after_key_ = false;
  }

 private:
  void comma() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!open_.empty()) {
      if (!open_.back()) out_ << ", ";
      open_.back() = false;
    }
  }
  void null() {
    comma();
    out_ << "null";
  }
  void scalar(kind k, std::span<const std::byte> b, wire::byte_order order) {
    comma();
    switch (k) {
      case kind::boolean: out_ << (b[0] == std::byte{1} ? "true" : "false"); return;
      case kind::u8: out_ << +wire::load<std::uint8_t>(b.data(), order); return;
      case kind::i8: out_ << +wire::load<std::int8_t>(b.data(), order); return;
      case kind::u16: out_ << wire::load<std::uint16_t>(b.data(), order); return;
      case kind::i16: out_ << wire::load<std::int16_t>(b.data(), order); return;
      case kind::u32: out_ << wire::load<std::uint32_t>(b.data(), order); return;
      case kind::i32: out_ << wire::load<std::int32_t>(b.data(), order); return;
      case kind::u64: out_ << wire::load<std::uint64_t>(b.data(), order); return;
      case kind::i64: out_ << wire::load<std::int64_t>(b.data(), order); return;
      case kind::f16: write_float(out_, codec::to_float(wire::load<f16>(b.data(), order))); return;
      case kind::bf16: write_float(out_, codec::to_float(wire::load<bf16>(b.data(), order))); return;
      case kind::f32: write_float(out_, wire::load<float>(b.data(), order)); return;
      case kind::f64: write_float(out_, wire::load<double>(b.data(), order)); return;
      case kind::f8_e4m3: write_float(out_, fp8_to_float(std::to_integer<std::uint8_t>(b[0]), 4)); return;
      case kind::f8_e5m2: write_float(out_, fp8_to_float(std::to_integer<std::uint8_t>(b[0]), 5)); return;
      default: out_ << "null"; return;
    }
  }

  std::ostream& out_;
  const schema::schema& s_;
  std::vector<bool> open_;  // per open container: is the next element its first
  bool after_key_ = false;
};

}  // namespace

result<void> dump_json(std::span<const std::byte> archive, std::ostream& out, const options& opt) {
  FERRY_TRY_ASSIGN(const auto p, detail::read_prelude(archive, opt));
  wire::reader in(p.body);

  out << "{\"format\": \"ferry graph archive\", \"version\": " << +p.version << ", \"byte_order\": \""
      << wire::name(p.order) << "\",\n \"schema\": [";
  for (std::size_t i = 0; i < p.schema.types.size(); ++i) {
    const schema::type_def& t = p.schema.types[i];
    out << (i == 0 ? "\n  " : ",\n  ") << "{\"name\": ";
    write_escaped(out, t.name);
    out << ", \"version\": " << t.version << ", \"abstract\": " << (t.abstract ? "true" : "false")
        << ", \"fields\": [";
    for (std::size_t f = 0; f < t.fields.size(); ++f) {
      out << (f == 0 ? "" : ", ") << "{\"tag\": " << t.fields[f].tag << ", \"name\": ";
      write_escaped(out, t.fields[f].name);
      out << ", \"type\": ";
      write_escaped(out, schema::to_string(t.fields[f].type, p.schema));
      out << '}';
    }
    out << "]}";
  }
  out << "],\n \"root\": ";

  json_emitter json(out, p.schema);
  const schema::value_visitor v = json.visitor();
  std::size_t values = 0;
  FERRY_TRY(schema::walk_value(in, p.root, p.schema, p.order, v, opt.limits, values));
  out << ",\n \"objects\": [";
  for (std::size_t i = 0; i < p.objects.size(); ++i) {
    out << (i == 0 ? "\n  " : ",\n  ") << "{\"id\": " << i + 1 << ", \"ownership\": \""
        << (p.objects[i].ownership == 1 ? "shared" : "unique") << "\", \"type\": ";
    write_escaped(out, schema::to_string(p.objects[i].type, p.schema));
    out << ", \"value\": ";
    json.reset();
    FERRY_TRY(schema::walk_value(in, p.objects[i].type, p.schema, p.order, v, opt.limits, values));
    out << '}';
  }
  out << "]}\n";
  if (!in.at_end()) return errc::trailing_bytes;
  return {};
}

}  // namespace ferry::graph
