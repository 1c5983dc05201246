// ferry inspect FILE [--json]: a checkpoint's tensors, metadata, byte order
// and alignment. GGUF files add their version, where the data starts, each
// tensor's ggml type and extents, and their metadata typed (in the table,
// long arrays and strings shortened; --json gives every value in full).
// .npz records that differ in byte order, and views that are not row-major
// (a .npy in Fortran order), say so in the table.
#include <algorithm>
#include <array>
#include <iostream>
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

// A metadata value as typed JSON, in full.
json value_json(const ckpt::gguf_value& v);

json array_json(const ckpt::gguf_array& a) {
  return std::visit(
      [](const auto& elems) {
        json out = json::array();
        for (const auto& e : elems) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, ckpt::gguf_array>) out.push_back(array_json(e));
          else out.push_back(static_cast<E>(e));  // vector<bool>'s proxy to bool
        }
        return out;
      },
      a.values);
}

json value_json(const ckpt::gguf_value& v) {
  return std::visit(
      [](const auto& x) -> json {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, ckpt::gguf_array>) return array_json(x);
        else return x;
      },
      v);
}

json gguf_json(const ckpt::gguf_header& h) {
  json g{{"version", h.version},
         {"fugg_magic", h.fugg_magic},
         {"alignment", h.alignment},
         {"data_offset", h.data_offset},
         {"metadata", json::array()}};
  for (const auto& kv : h.metadata) {
    json e{{"key", kv.key}, {"type", ckpt::name(ckpt::type_of(kv.value))}};
    if (const auto* a = std::get_if<ckpt::gguf_array>(&kv.value)) {
      e["element_type"] = ckpt::name(a->type());
      e["count"] = a->size();
    }
    e["value"] = value_json(kv.value);
    g["metadata"].push_back(std::move(e));
  }
  return g;
}

// The storage's own byte order when it differs from the file's (.npz).
std::string order_note(const ckpt::reader& r, const ckpt::tensor_info& t) {
  const auto& s = r.storages()[t.storage];
  if (!s.order || *s.order == r.order()) return {};
  return " (" + std::string(wire::name(*s.order)) + "-endian)";
}

int inspect_json(const std::string& path, const ckpt::reader& r) {
  json j;
  j["file"] = path;
  j["format"] = ckpt::format_name(r.format());
  j["byte_order"] = wire::name(r.order());
  j["alignment"] = r.alignment();
  j["file_size"] = r.file_size();
  j["tensors"] = json::array();
  for (const auto& t : r.tensors()) {
    json e{{"name", t.name},
           {"dtype", ferry::codec::name(t.dtype)},
           {"shape", t.shape},
           {"strides", t.strides},
           {"offset", t.offset},
           {"bytes", t.nbytes()},
           {"storage", t.storage},
           {"shared_with", r.shared_with(t)}};
    if (const ckpt::gguf_tensor* g = gguf_tensor_of(r, t)) {
      e["ggml_type"] = ckpt::info(g->type).name;
      e["ne"] = g->ne;  // GGUF's order, fastest extent first
    }
    j["tensors"].push_back(std::move(e));
  }
  j["storages"] = json::array();
  for (const auto& s : r.storages()) {
    json e = {{"offset", s.offset}, {"bytes", s.nbytes}, {"dtype", ferry::codec::name(s.dtype)}};
    if (s.crc32c) e["crc32c"] = *s.crc32c;
    if (s.order) e["byte_order"] = wire::name(*s.order);
    j["storages"].push_back(std::move(e));
  }
  j["metadata"] = r.metadata();
  if (const ckpt::gguf_header* h = r.gguf()) j["gguf"] = gguf_json(*h);
  if (!r.shards().empty()) {
    j["shards"] = json::array();
    for (const auto& sh : r.shards()) {
      json e{{"file", sh.path().filename().string()},
             {"byte_order", wire::name(sh.order())},
             {"file_size", sh.file_size()},
             {"tensors", sh.tensors().size()}};
      if (const auto id = sh.metadata().find("ferry.set.save_id"); id != sh.metadata().end()) e["save_id"] = id->second;
      j["shards"].push_back(std::move(e));
    }
  }
  std::cout << j.dump(2, ' ', false, json_errors) << '\n';
  return flush_stdout();
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
  // split a row or drive the terminal (--json escapes them as JSON).
  std::vector<std::array<std::string, 5>> rows{
      {"NAME", gguf != nullptr ? "TYPE" : "DTYPE", "SHAPE", "BYTES", "SHARED WITH"}};
  for (const auto& t : r.tensors()) {
    std::string shared;
    for (const auto& n : r.shared_with(t)) shared += (shared.empty() ? "" : ", ") + ferry::printable(n);
    std::string type(ferry::codec::name(t.dtype));
    std::string shape = shape_text(t.shape);
    if (const ckpt::gguf_tensor* g = gguf_tensor_of(r, t)) {
      type = ckpt::info(g->type).name;  // q4_K, not the u8 of its blocks
      shape = shape_text(std::vector<std::uint64_t>(g->ne.rbegin(), g->ne.rend()));
    } else if (!t.is_contiguous()) {
      shape += " strides " + shape_text(t.strides);  // a .npy in Fortran order, a column of a matrix
    }
    rows.push_back({ferry::printable(t.name), type + order_note(r, t), shape, std::to_string(t.nbytes()),
                    shared.empty() ? "-" : shared});
  }
  std::array<std::size_t, 5> width{};
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < 5; ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < 5; ++c) {
      std::string cell = row[c];
      if (c == 3 && &row != &rows.front()) cell.insert(0, width[c] - cell.size(), ' ');  // numbers right-aligned
      else if (c < 4) cell.resize(width[c], ' ');
      line += cell + (c < 4 ? "  " : "");
    }
    std::cout << line << '\n';
  }
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
