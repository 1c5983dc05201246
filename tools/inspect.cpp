// ferry inspect FILE [--json]: a checkpoint's tensors, metadata, byte order
// and alignment, in time and memory linear in the file (names of tensors
// sharing a storage are listed up to a count; --json streams). GGUF files add their version, where the data starts, each
// tensor's ggml type and extents, and their metadata typed (in the table,
// long arrays and strings shortened; --json gives every value in full, up
// to max_metadata_bytes of JSON in all).
// .npz records that differ in byte order, and views that are not row-major
// (a .npy in Fortran order), say so in the table.
#include <algorithm>
#include <array>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "cli.h"

namespace ferry::tools {
namespace {

using json = nlohmann::ordered_json;

// Invalid UTF-8 in a name or value (GGUF strings are not checked) becomes
// U+FFFD in --json output rather than an exception.
constexpr auto json_errors = json::error_handler_t::replace;

// A metadata value's type as gguf-py's dump writes it: "u32", "str",
// "arr[str,32000]" (nested: "arr[arr,2]").
std::string type_text(const ckpt::gguf_value& v) {
  const auto* a = std::get_if<ckpt::gguf_array>(&v);
  if (a == nullptr) return std::string(ckpt::name(ckpt::type_of(v)));
  return "arr[" + std::string(ckpt::name(a->type())) + "," + std::to_string(a->size()) + "]";
}

// A value for a person: at most `show` elements of an array (then ", ...")
// and `max_chars` characters (then "..."), escaped by printable().
std::string short_value(const ckpt::gguf_value& v, std::size_t show = 8, std::size_t max_chars = 160) {
  constexpr std::size_t budget = std::size_t{1} << 16;  // rendered before cutting: a long first element still shows
  std::string text;
  if (const auto* str = std::get_if<std::string>(&v)) {
    if (str->size() <= max_chars) return ferry::printable(*str);
    return ferry::printable(str->substr(0, max_chars)) + "... (" + std::to_string(str->size()) + " bytes)";
  }
  if (const auto* a = std::get_if<ckpt::gguf_array>(&v); a != nullptr && a->size() > show) {
    ckpt::gguf_array head;
    std::visit(
        [&](const auto& elems) {
          using V = std::decay_t<decltype(elems)>;
          head.values = V(elems.begin(), elems.begin() + static_cast<std::ptrdiff_t>(show));
        },
        a->values);
    text = ckpt::render_gguf_value(ckpt::gguf_value(std::move(head)), budget);
    if (text.ends_with("]")) text.insert(text.size() - 1, ", ...");
  } else {
    text = ckpt::render_gguf_value(v, budget);
  }
  if (text.size() > max_chars) text = text.substr(0, max_chars) + "...";
  return ferry::printable(std::move(text));
}

// --json, streamed: each tensor, storage and metadata value is serialized
// and written on its own, and arrays element by element, so the output
// costs the memory of one entry, not of the document (a DOM of a header of
// 5.6M GGUF arrays took 772 MB, 2.4 times the parsed file). Each value is
// written once: a GGUF file's metadata typed, under "gguf", not again as
// text. Escaping makes the output at most 6 bytes per byte of a name or
// value (\u0001); metadata values count that size against
// limits::max_metadata_bytes, and a value past it is written as
// "value_omitted" with its type and size (docs/limits.md).
class json_writer {
 public:
  explicit json_writer(std::ostream& os) : out_(nlohmann::detail::output_adapter<char>(os)), ser_(out_, ' ', json_errors) {}

  void raw(std::string_view text) { out_->write_characters(text.data(), text.size()); }
  void value(const json& j) { ser_.dump(j, false, false, 0); }
  /// "key": value
  void field(std::string_view key, const json& j) {
    value(json(key));
    raw(": ");
    value(j);
  }

  // A GGUF metadata value, arrays element by element.
  void gguf(const ckpt::gguf_value& v) {
    const auto* a = std::get_if<ckpt::gguf_array>(&v);
    if (a == nullptr) {
      std::visit(
          [&](const auto& x) {
            if constexpr (!std::is_same_v<std::decay_t<decltype(x)>, ckpt::gguf_array>) value(json(x));
          },
          v);
      return;
    }
    raw("[");
    std::visit(
        [&](const auto& elems) {
          bool first = true;
          for (const auto& e : elems) {
            if (!first) raw(", ");
            first = false;
            using E = std::decay_t<decltype(e)>;
            if constexpr (std::is_same_v<E, ckpt::gguf_array>) gguf(ckpt::gguf_value(e));
            else value(json(static_cast<E>(e)));  // vector<bool>'s proxy to bool
          }
        },
        a->values);
    raw("]");
  }

 private:
  nlohmann::detail::output_adapter_t<char> out_;
  nlohmann::detail::serializer<json> ser_;
};

// At most the bytes of `s` as JSON text: 6 for a control byte (\u0001), 3
// for a byte of invalid UTF-8 (its U+FFFD), 2 for '"' and '\\'.
std::uint64_t json_size(std::string_view s) {
  std::uint64_t n = 2;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    n += c < 0x20 ? 6 : c == '"' || c == '\\' ? 2 : c >= 0x80 ? 3 : 1;
  }
  return n;
}

// An upper bound of `v`'s JSON text, stopping once past `limit`.
std::uint64_t json_size(const ckpt::gguf_value& v, std::uint64_t limit) {
  if (const auto* str = std::get_if<std::string>(&v)) return json_size(*str);
  const auto* a = std::get_if<ckpt::gguf_array>(&v);
  if (a == nullptr) return 32;  // a number (at most 25 characters) or a bool
  std::uint64_t n = 2;
  std::visit(
      [&](const auto& elems) {
        for (const auto& e : elems) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, ckpt::gguf_array>) n += json_size(ckpt::gguf_value(e), limit) + 2;
          else if constexpr (std::is_same_v<E, std::string>) n += json_size(e) + 2;
          else if constexpr (std::is_floating_point_v<E>) n += std::numeric_limits<E>::max_digits10 + 10;
          else n += std::numeric_limits<E>::digits10 + 4;  // sign, digits, ", "; bool: "false, "
          if (n > limit) return;
        }
      },
      a->values);
  return n;
}

// The GGUF header's fields and metadata, typed.
void gguf_json(json_writer& w, const ckpt::gguf_header& h) {
  w.raw("{");
  w.field("version", h.version);
  w.raw(", ");
  w.field("fugg_magic", h.fugg_magic);
  w.raw(", ");
  w.field("alignment", h.alignment);
  w.raw(", ");
  w.field("data_offset", h.data_offset);
  w.raw(",\n    \"metadata\": [");
  std::uint64_t budget = ckpt::limits{}.max_metadata_bytes;
  bool first = true;
  for (const auto& kv : h.metadata) {
    w.raw(first ? "\n      {" : ",\n      {");
    first = false;
    w.field("key", kv.key);
    w.raw(", ");
    w.field("type", ckpt::name(ckpt::type_of(kv.value)));
    if (const auto* a = std::get_if<ckpt::gguf_array>(&kv.value)) {
      w.raw(", ");
      w.field("element_type", ckpt::name(a->type()));
      w.raw(", ");
      w.field("count", a->size());
    }
    w.raw(", ");
    const std::uint64_t size = json_size(kv.value, budget);
    if (size <= budget) {
      budget -= size;
      w.raw("\"value\": ");
      w.gguf(kv.value);
    } else {
      w.field("value_omitted", "over the " + std::to_string(ckpt::limits{}.max_metadata_bytes) +
                                   " bytes of JSON that metadata values may take");
    }
    w.raw("}");
  }
  w.raw(first ? "]}" : "\n    ]}");
}

// The storage's own byte order when it differs from the file's (.npz).
std::string order_note(const ckpt::reader& r, const ckpt::tensor_info& t) {
  const auto& s = r.storages()[t.storage];
  if (!s.order || *s.order == r.order()) return {};
  return " (" + std::string(wire::name(*s.order)) + "-endian)";
}

// Names listed of the tensors that share a storage, in the table and per
// tensor in --json: a storage viewed by a million tensors would otherwise
// print a million squared names. --json lists each storage's tensors whole.
constexpr std::size_t shared_names_shown = 16;

// Up to `show` names of the other tensors over t's storage, and how many
// there are in all.
std::pair<std::vector<std::string_view>, std::size_t> shared_names(const ckpt::reader& r, const ckpt::tensor_info& t,
                                                                   std::size_t show) {
  const auto over = r.tensors_over(t.storage);
  std::vector<std::string_view> names;
  for (const std::uint32_t k : over) {
    if (names.size() == show) break;
    const auto& other = r.tensors()[k];
    if (&other != &t) names.push_back(other.name);
  }
  return {std::move(names), over.size() - 1};
}

int inspect_json(const std::string& path, const ckpt::reader& r) {
  json_writer w(std::cout);
  w.raw("{\n  ");
  w.field("file", path);
  w.raw(",\n  ");
  w.field("format", ckpt::format_name(r.format()));
  w.raw(",\n  ");
  w.field("byte_order", wire::name(r.order()));
  w.raw(",\n  ");
  w.field("alignment", r.alignment());
  w.raw(",\n  ");
  w.field("file_size", r.file_size());
  w.raw(",\n  \"tensors\": [");
  bool first = true;
  for (const auto& t : r.tensors()) {
    const auto [shared, shared_count] = shared_names(r, t, shared_names_shown);
    json e{{"name", t.name},
           {"dtype", ferry::codec::name(t.dtype)},
           {"shape", t.shape},
           {"strides", t.strides},
           {"offset", t.offset},
           {"bytes", t.nbytes()},
           {"storage", t.storage},
           {"shared_with", shared},
           {"shared_with_count", shared_count}};
    if (const ckpt::gguf_tensor* g = gguf_tensor_of(r, t)) {
      e["ggml_type"] = ckpt::info(g->type).name;
      e["ne"] = g->ne;  // GGUF's order, fastest extent first
    }
    w.raw(first ? "\n    " : ",\n    ");
    first = false;
    w.value(e);
  }
  w.raw(first ? "],\n  \"storages\": [" : "\n  ],\n  \"storages\": [");
  first = true;
  for (std::uint32_t i = 0; i < r.storages().size(); ++i) {
    const auto& s = r.storages()[i];
    json e = {{"offset", s.offset}, {"bytes", s.nbytes}, {"dtype", ferry::codec::name(s.dtype)}};
    if (s.crc32c) e["crc32c"] = *s.crc32c;
    if (s.order) e["byte_order"] = wire::name(*s.order);
    const auto over = r.tensors_over(i);
    e["tensors"] = std::vector<std::uint32_t>(over.begin(), over.end());
    w.raw(first ? "\n    " : ",\n    ");
    first = false;
    w.value(e);
  }
  w.raw(first ? "]" : "\n  ]");
  if (const ckpt::gguf_header* h = r.gguf()) {
    w.raw(",\n  \"gguf\": ");
    gguf_json(w, *h);
  } else {
    w.raw(",\n  \"metadata\": {");
    first = true;
    for (const auto& [k, v] : r.metadata()) {
      w.raw(first ? "\n    " : ",\n    ");
      first = false;
      w.field(k, v);
    }
    w.raw(first ? "}" : "\n  }");
  }
  if (!r.shards().empty()) {
    w.raw(",\n  \"shards\": [");
    first = true;
    for (const auto& sh : r.shards()) {
      json e{{"file", sh.path().filename().string()},
             {"byte_order", wire::name(sh.order())},
             {"file_size", sh.file_size()},
             {"tensors", sh.tensors().size()}};
      if (const auto id = sh.metadata().find("ferry.set.save_id"); id != sh.metadata().end()) e["save_id"] = id->second;
      w.raw(first ? "\n    " : ",\n    ");
      first = false;
      w.value(e);
    }
    w.raw("\n  ]");
  }
  w.raw("\n}\n");
  return flush_stdout();
}

// One row of the table.
std::array<std::string, 5> table_row(const ckpt::reader& r, const ckpt::tensor_info& t) {
  constexpr std::size_t show = 4;
  const auto [names, count] = shared_names(r, t, show);
  std::string shared;
  for (const auto n : names) shared += (shared.empty() ? "" : ", ") + ferry::printable(std::string(n));
  if (count > names.size()) shared += " and " + std::to_string(count - names.size()) + " more";
  std::string type(ferry::codec::name(t.dtype));
  std::string shape = shape_text(t.shape);
  if (const ckpt::gguf_tensor* g = gguf_tensor_of(r, t)) {
    type = ckpt::info(g->type).name;  // q4_K, not the u8 of its blocks
    shape = shape_text(std::vector<std::uint64_t>(g->ne.rbegin(), g->ne.rend()));
  } else if (!t.is_contiguous()) {
    shape += " strides " + shape_text(t.strides);  // a .npy in Fortran order, a column of a matrix
  }
  return {ferry::printable(t.name), type + order_note(r, t), shape, std::to_string(t.nbytes()), shared.empty() ? "-" : shared};
}

}  // namespace

int inspect(const std::string& path, bool as_json, const read_flags& flags) {
  auto opened = open_checkpoint(path, flags);
  if (!opened) return fail(opened.error());
  const auto& r = *opened;
  if (as_json) return inspect_json(path, r);

  const ckpt::gguf_header* gguf = r.gguf();
  std::cout << path << ": " << ckpt::format_name(r.format()) << ", " << wire::name(r.order()) << "-endian, alignment "
            << r.alignment() << ", " << human_bytes(r.file_size()) << " (" << r.file_size() << " bytes)\n";
  if (gguf != nullptr) {
    std::cout << "GGUF version " << gguf->version << (gguf->fugg_magic ? " (magic \"FUGG\")" : "") << ", "
              << gguf->metadata.size() << " metadata keys, tensor data from byte " << gguf->data_offset
              << "; shapes slowest extent first (GGUF's ne reversed)\n";
  }
  std::cout << r.tensors().size() << " tensors in " << r.storages().size() << " storages, "
            << human_bytes(total_storage_bytes(r)) << " of data\n";
  for (const auto& sh : r.shards()) {
    // The save that wrote it: an incremental set's chain shows here.
    const auto id = sh.metadata().find("ferry.set.save_id");
    std::cout << "  shard " << sh.path().filename().string() << ": " << wire::name(sh.order()) << "-endian, "
              << human_bytes(sh.file_size()) << ", " << sh.tensors().size() << " tensors"
              << (id == sh.metadata().end() ? std::string() : ", save " + id->second) << '\n';
  }
  std::cout << '\n';
  // Names and metadata come from the file: printable() escapes what could
  // split a row or drive the terminal (--json escapes them as JSON). The
  // rows are made twice, for the widths and to print, not held: a table of
  // 2^20 tensors in memory took several times the file.
  const std::array<std::string, 5> head{"NAME", gguf != nullptr ? "TYPE" : "DTYPE", "SHAPE", "BYTES", "SHARED WITH"};
  std::array<std::size_t, 5> width{};
  const auto widen = [&](const std::array<std::string, 5>& row) {
    for (std::size_t c = 0; c < 5; ++c) width[c] = std::max(width[c], row[c].size());
  };
  widen(head);
  for (const auto& t : r.tensors()) widen(table_row(r, t));
  const auto print = [&](const std::array<std::string, 5>& row, bool numbers) {
    std::string line;
    for (std::size_t c = 0; c < 5; ++c) {
      std::string cell = row[c];
      if (c == 3 && numbers) cell.insert(0, width[c] - cell.size(), ' ');  // numbers right-aligned
      else if (c < 4) cell.resize(width[c], ' ');
      line += cell + (c < 4 ? "  " : "");
    }
    std::cout << line << '\n';
  };
  print(head, false);
  for (const auto& t : r.tensors()) print(table_row(r, t), true);
  if (gguf != nullptr && !gguf->metadata.empty()) {
    // Typed and in file order, as gguf-py's dump shows them.
    std::cout << "\nmetadata:\n";
    for (const auto& kv : gguf->metadata) {
      std::cout << "  " << ferry::printable(kv.key) << ": " << type_text(kv.value) << " = " << short_value(kv.value)
                << '\n';
    }
  } else if (!r.metadata().empty()) {
    std::cout << "\nmetadata:\n";
    for (const auto& [k, v] : r.metadata()) std::cout << "  " << ferry::printable(k) << ": " << ferry::printable(v) << '\n';
  }
  return flush_stdout();
}

}  // namespace ferry::tools
