// PyTorch .pt files: the zip's records, the pickle's value flattened into
// tensors and metadata (pytorch.h states the rules).
#include "ferry/checkpoint/pytorch.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "ferry/checkpoint/pytorch/internal.h"
#include "ferry/checkpoint/pytorch/pickle.h"

namespace ferry::checkpoint::detail {
namespace {

using pickle::kind;
using pickle::value;

// Whether `rest` (a whole record name) is segments that are neither empty,
// "." nor "..", without '\' or NUL: no leading '/', no "./", no "../".
bool clean_name(std::string_view rest) {
  if (rest.find('\\') != std::string_view::npos || rest.find('\0') != std::string_view::npos) return false;
  while (true) {
    const std::size_t slash = rest.find('/');
    const std::string_view seg = rest.substr(0, slash);
    if (seg.empty() || seg == "." || seg == "..") return false;
    if (slash == std::string_view::npos) return true;
    rest.remove_prefix(slash + 1);
  }
}

// JSON text of a value (pytorch.h: numbers, bool, None, str, and
// containers without tensors).
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char u[8];
          std::snprintf(u, sizeof u, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += u;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// Bytes append_json_string() writes for `s`.
std::uint64_t json_string_size(std::string_view s) {
  std::uint64_t n = 2;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    n += (c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f') ? 2 : u < 0x20 ? 6 : 1;
  }
  return n;
}

std::string number_text(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", f);
  return buf;
}

// Saturating addition for costs.
std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

// Walks the pickle's value into parsed_file::tensors and metadata.
class flattener {
 public:
  flattener(parsed_file& out, const limits& lim, std::string_view prefix, const zip_records& zip)
      : out_(out), lim_(lim), prefix_(prefix), zip_(zip), used_records_(zip.records.size(), false) {}

  result<void, error> run(const value* root, std::size_t values) {
    // What writing the value out would cost, computed per distinct node
    // first, so shared references cannot make the walk below long.
    costs_.resize(values);
    FERRY_TRY_ASSIGN(const cost c, cost_of(root, 0));
    if (c.tensors > lim_.max_tensors) return error(errc::limit_exceeded, "tensors");
    if (c.leaves > lim_.max_tensors) return error(errc::limit_exceeded, "metadata entries");
    if (c.json > lim_.max_metadata_bytes) return error(errc::limit_exceeded, "metadata bytes");
    if (c.visits > sat_mul(16, sat_add(lim_.max_tensors, 1))) return error(errc::limit_exceeded, "pickle structure");
    // The names themselves: a million tensors under one 4 KiB prefix are
    // 4 GiB of names; they must fit the manifest a conversion would write.
    // (c counts a '.' before each name's first segment, which the root's
    // names do not have.)
    const bool walked = root->k == kind::dict || c.walked;
    const std::uint64_t names = walked ? c.names - std::min(c.names, sat_add(c.tensors, c.leaves)) : 0;
    if (names > lim_.max_manifest_bytes) return error(errc::limit_exceeded, "bytes of names (limits::max_manifest_bytes)");
    // A root dict is walked into names whatever it holds (an empty state
    // dict gives none); a root list or tuple holding a tensor is walked
    // too; any other root is named "root" (a tensor, or metadata).
    return walked ? walk_items(root, {}, 0) : walk(root, "root", 0);
  }

 private:
  struct cost {
    std::uint64_t tensors = 0;  // tensors below (paths to tensors)
    std::uint64_t leaves = 0;   // metadata entries below
    std::uint64_t json = 0;     // bytes of the metadata text below
    std::uint64_t text = 0;     // bytes of this value written as JSON (when a tensor-free parent is one entry)
    std::uint64_t visits = 0;   // nodes the walk visits
    std::uint64_t names = 0;    // bytes of the names below, each counted from this value
    bool walked = false;        // a container walked into names (holds a tensor, or is a dict)
    bool done = false;          // computed (else in progress, or not met yet)
  };

  result<cost, error> cost_of(const value* v, std::size_t depth) {
    if (depth > lim_.max_pickle_depth) return error(errc::depth_exceeded, "pickle structure");
    cost& known = costs_[v->id];
    if (known.done) return known;
    if (known.visits != 0) return error(checkpoint_errc::pickle_malformed, "a container contains itself");
    known.visits = 1;  // in progress: meeting it again is a cycle
    cost c;
    c.visits = 1;
    switch (v->k) {
      case kind::tensor: c.tensors = 1; break;
      case kind::dict:
      case kind::list:
      case kind::tuple: {
        cost inner;
        std::uint64_t keys = 0;
        // x under a name segment of `segment` bytes.
        const auto add = [&](const value* x, std::uint64_t segment) -> result<void, error> {
          FERRY_TRY_ASSIGN(const cost k, cost_of(x, depth + 1));
          inner.tensors = sat_add(inner.tensors, k.tensors);
          inner.leaves = sat_add(inner.leaves, k.leaves);
          inner.json = sat_add(inner.json, k.json);
          inner.text = sat_add(inner.text, k.text);
          inner.visits = sat_add(inner.visits, k.visits);
          inner.names = sat_add(inner.names, sat_add(k.names, sat_mul(sat_add(k.tensors, k.leaves), segment + 1)));
          return {};
        };
        if (v->k == kind::dict) {
          for (std::size_t k = 0; k < v->items.size(); k += 2) {
            const value* key = v->items[k];
            const bool text = key->k == kind::string;
            FERRY_TRY(add(v->items[k + 1], text ? key->s.size() : std::to_string(key->i).size()));
            // The key as JSON text, from its own memoised cost: a key
            // shared by many entries is measured once.
            FERRY_TRY_ASSIGN(const cost kc, cost_of(key, depth + 1));
            keys = sat_add(keys, 1 + (text ? kc.text : 2 + kc.text));
          }
        } else {
          for (std::size_t i = 0; i < v->items.size(); ++i) FERRY_TRY(add(v->items[i], std::to_string(i).size()));
        }
        // As JSON text: brackets, commas, keys with their colons, and each item's text.
        const std::size_t n = v->k == kind::dict ? v->dict_size() : v->items.size();
        c.text = sat_add(sat_add(2 + (n > 0 ? n - 1 : 0), inner.text), keys);
        c.walked = v->k == kind::dict || inner.tensors > 0;
        if (c.walked && !(v->k == kind::dict && v->items.empty())) {
          c.tensors = inner.tensors;
          c.leaves = inner.leaves;
          c.json = inner.json;
          c.visits = sat_add(1, inner.visits);
          c.names = inner.names;
        } else {  // one metadata entry: the container as JSON text
          c.leaves = 1;
          c.json = c.text;
        }
        break;
      }
      default: {
        c.leaves = 1;
        std::string text;
        if (v->k == kind::string) {
          c.json = json_string_size(v->s);
        } else if (json(v, text, {}, 0)) {  // a scalar: its text is short
          c.json = text.size();
        }
        c.text = c.json;
        break;
      }
    }
    c.done = true;
    costs_[v->id] = c;
    return c;
  }

  static std::string join(const std::string& path, std::string_view seg) {
    return path.empty() ? std::string(seg) : path + "." + std::string(seg);
  }

  result<std::string, error> key_text(const value* key, const std::string& path) {
    if (key->k == kind::string) return std::string(key->s);
    if (key->k == kind::integer) return std::to_string(key->i);
    return error(checkpoint_errc::pickle_malformed,
                 (path.empty() ? std::string("the root") : quote(path)) + ": a key that is neither str nor int");
  }

  result<void, error> claim(const std::string& name) {
    if (!valid_name(name, lim_.max_name_bytes)) return error(checkpoint_errc::bad_name, tensor_what(name));
    if (!names_.insert(name).second) return error(errc::duplicate_key, quote(name));
    return {};
  }

  result<void, error> walk(const value* v, const std::string& path, std::size_t depth) {
    if (depth > lim_.max_pickle_depth) return error(errc::depth_exceeded, "pickle structure");
    const cost& c = costs_[v->id];
    if (v->k == kind::tensor) return add_tensor(v, path);
    if (!c.walked || (v->k == kind::dict && v->items.empty())) return add_metadata(v, path);
    return walk_items(v, path, depth);
  }

  // A container's items (a dict's values), each under its key or index.
  result<void, error> walk_items(const value* v, const std::string& path, std::size_t depth) {
    if (v->k == kind::dict) {
      for (std::size_t k = 0; k < v->items.size(); k += 2) {
        FERRY_TRY_ASSIGN(const std::string key, key_text(v->items[k], path));
        // A name only grows on the way down: one too long here is refused
        // before it is joined (a deep chain of long keys costs no more).
        if ((path.empty() ? 0 : path.size() + 1) + key.size() > lim_.max_name_bytes) {
          return error(checkpoint_errc::bad_name, tensor_what(join(path, key)) + " and the names below it");
        }
        FERRY_TRY(walk(v->items[k + 1], join(path, key), depth + 1));
      }
    } else {
      for (std::size_t i = 0; i < v->items.size(); ++i) FERRY_TRY(walk(v->items[i], join(path, std::to_string(i)), depth + 1));
    }
    return {};
  }

  result<void, error> add_metadata(const value* v, const std::string& path) {
    FERRY_TRY(claim(path));
    std::string text;
    FERRY_TRY(json(v, text, path, 0));
    if (!valid_utf8(text)) return error(checkpoint_errc::bad_utf8, quote(path));
    metadata_bytes_ = sat_add(metadata_bytes_, sat_add(path.size(), text.size()));
    if (metadata_bytes_ > lim_.max_metadata_bytes) return error(errc::limit_exceeded, "metadata bytes");
    out_.metadata.emplace(path, std::move(text));
    return {};
  }

  result<void, error> json(const value* v, std::string& out, const std::string& path, std::size_t depth) {
    if (depth > lim_.max_pickle_depth) return error(errc::depth_exceeded, "pickle structure");
    if (out.size() > lim_.max_metadata_bytes) return error(errc::limit_exceeded, "metadata bytes");  // cost_of's bound, kept
    switch (v->k) {
      case kind::none: out += "null"; return {};
      case kind::boolean: out += v->i != 0 ? "true" : "false"; return {};
      case kind::integer: out += std::to_string(v->i); return {};
      case kind::floating: out += number_text(v->floating()); return {};
      case kind::string: append_json_string(out, v->s); return {};
      case kind::list:
      case kind::tuple:
        out += '[';
        for (std::size_t i = 0; i < v->items.size(); ++i) {
          if (i > 0) out += ',';
          FERRY_TRY(json(v->items[i], out, path, depth + 1));
        }
        out += ']';
        return {};
      case kind::dict:
        out += '{';
        for (std::size_t i = 0; i < v->items.size(); i += 2) {
          if (i > 0) out += ',';
          FERRY_TRY_ASSIGN(const std::string k, key_text(v->items[i], path));
          append_json_string(out, k);
          out += ':';
          FERRY_TRY(json(v->items[i + 1], out, path, depth + 1));
        }
        out += '}';
        return {};
      case kind::global:
      case kind::storage:
      case kind::tensor: break;
    }
    return error(checkpoint_errc::pickle_malformed, quote(path) + ": a " +
                                                        std::string(v->k == kind::global ? "global" : "storage") +
                                                        " outside a tensor");
  }

  result<void, error> add_tensor(const value* t, const std::string& path) {
    FERRY_TRY(claim(path));
    const auto fail = [&](error_code c, std::string_view more = {}) {
      return error(c, tensor_what(path) + (more.empty() ? "" : ": " + std::string(more)));
    };
    const value* s = t->items[0];
    if (!t->dtype) return fail(codec_errc::unknown_dtype, s->storage_type()->s);
    const std::size_t width = codec::size_of(*t->dtype);
    auto [it, fresh] = storage_index_.try_emplace(s, static_cast<std::uint32_t>(out_.storages.size()));
    if (fresh) {
      const std::string record = std::string(prefix_) + "/data/" + std::string(s->s);
      const std::size_t r = zip_.index.find(zip_.records, record);
      if (r == record_index::npos) return fail(checkpoint_errc::record_not_found, "record " + quote(record));
      const zip_record& z = zip_.records[r];
      const auto numel = static_cast<std::uint64_t>(s->i);
      const std::uint64_t nbytes = s->untyped ? numel : sat_mul(numel, width);
      if (nbytes != z.size || z.size % width != 0) {
        return fail(checkpoint_errc::shape_size_mismatch, "record " + quote(record));
      }
      out_.storages.push_back({z.data_offset, z.size, *t->dtype, std::nullopt,
                               z.crc32 != 0 ? std::optional<std::uint32_t>(z.crc32) : std::nullopt, std::nullopt});
      used_records_[r] = true;
    }
    const storage_info& st = out_.storages[it->second];
    if (!codec::same_element_layout(st.dtype, *t->dtype)) return fail(checkpoint_errc::element_size_mismatch);
    std::vector<std::uint64_t> shape, strides;
    for (const value* x : t->items[1]->items) shape.push_back(static_cast<std::uint64_t>(x->i));
    for (const value* x : t->items[2]->items) strides.push_back(static_cast<std::uint64_t>(x->i));
    const auto offset = static_cast<std::uint64_t>(t->i);
    if (auto r = check_view(*t->dtype, shape, strides, offset, st.nbytes, lim_.max_dims); !r) {
      return fail(r.error());
    }
    if (!t->s.empty()) {  // torch.bits16 and the like: the name kept
      raw_dtypes_ += raw_dtypes_.empty() ? "{" : ",";
      append_json_string(raw_dtypes_, path);
      raw_dtypes_ += ':';
      append_json_string(raw_dtypes_, t->s);
    }
    out_.tensors.push_back({path, *t->dtype, std::move(shape), std::move(strides), offset, it->second});
    return {};
  }

 private:
  parsed_file& out_;
  const limits& lim_;
  std::string_view prefix_;
  const zip_records& zip_;
  std::vector<cost> costs_;  // by value id
  std::unordered_map<const value*, std::uint32_t> storage_index_;
  std::unordered_set<std::string> names_;
  std::uint64_t metadata_bytes_ = 0;
  std::string raw_dtypes_;

 public:
  std::vector<bool> used_records_;  // by position in the zip

  /// The JSON object {tensor: "torch.bits16", ...} of the tensors whose
  /// dtype is bits without a meaning, or empty if none.
  [[nodiscard]] std::string raw_dtypes() const { return raw_dtypes_.empty() ? "" : raw_dtypes_ + "}"; }
};

}  // namespace

bool legacy_pytorch(std::span<const std::byte> head) noexcept {
  const auto starts = [&](std::size_t at, std::string_view with) {
    return head.size() >= at && head.size() - at >= with.size() && std::memcmp(head.data() + at, with.data(), with.size()) == 0;
  };
  // Protocols 0 and 1 write the number in decimal; 2 and 3 as LONG1 after
  // PROTO; 4 and 5 put a FRAME (0x95 and 8 bytes of length) between.
  if (starts(0, "L119547037146038801333356L\n")) return true;
  if (head.size() < 2 || head[0] != std::byte{0x80} || head[1] < std::byte{2} || head[1] > std::byte{5}) return false;
  constexpr std::string_view magic("\x8a\x0a\x6c\xfc\x9c\x46", 6);  // LONG1, 10 bytes, the number's first 4
  return starts(2, magic) || (head.size() > 2 && head[2] == std::byte{0x95} && starts(11, magic));
}

result<parsed_file, error> parse_pytorch(std::uint64_t size, const zip_read_at& read, const read_options& opt) {
  FERRY_TRY_ASSIGN(zip_directory dir, read_zip_directory(size, read, opt.lim));
  return parse_pytorch(std::move(dir), read, opt);
}

result<parsed_file, error> parse_pytorch(zip_directory dir, const zip_read_at& read, const read_options& opt) {
  const limits& lim = opt.lim;
  if (dir.entries.empty()) return error(checkpoint_errc::not_a_checkpoint, "an empty zip archive");

  // The prefix: the first record's folder, which must hold data.pkl.
  const std::string first = dir.entries.front().record.name;  // a copy: the records move out below
  const std::size_t slash = first.find('/');
  const std::string prefix = slash == std::string::npos ? std::string() : first.substr(0, slash);
  const std::string folder = prefix + "/", pickle_name = folder + "data.pkl";
  const std::string constants = folder + "constants.pkl", code = folder + "code/";
  bool has_pickle = false, pickle_elsewhere = false;
  for (const auto& e : dir.entries) {
    const std::string& n = e.record.name;
    if (n == pickle_name) has_pickle = true;
    else if (n.ends_with("/data.pkl") && n.find('/') == n.size() - 9) pickle_elsewhere = true;
  }
  if (!has_pickle) {
    if (pickle_elsewhere) return zip_malformed("record " + quote(first) + ": names under two folders");
    return error(checkpoint_errc::not_a_checkpoint, "a zip archive without a data.pkl record");
  }
  // What kind of archive this is comes before how its records are stored:
  // torch.jit.save deflates its code/ records.
  for (const auto& e : dir.entries) {
    const std::string& n = e.record.name;
    if (n == constants || n.starts_with(code)) {
      return error(checkpoint_errc::unsupported_pytorch,
                   "a TorchScript archive (torch.jit.save): load it with torch.jit.load");
    }
  }
  for (const auto& e : dir.entries) {
    const std::string& n = e.record.name;
    if (!n.starts_with(folder) || !clean_name(n)) {
      return zip_malformed("record " + quote(n) + ": not a clean name under " + quote(folder));
    }
  }
  const std::uint64_t dir_offset = dir.offset;
  FERRY_TRY_ASSIGN(zip_records zip, check_zip_records(std::move(dir), read));
  const auto find = [&](const std::string& name) -> const zip_record* {
    const std::size_t at = zip.index.find(zip.records, name);
    return at == record_index::npos ? nullptr : &zip.records[at];
  };

  parsed_file out;
  out.format = file_format::pytorch;
  out.data_end = dir_offset;
  std::string order_source = "absent";
  out.order = opt.pytorch_order.value_or(wire::byte_order::little);
  if (const zip_record* order = find(folder + "byteorder")) {
    const zip_record& r = *order;
    std::string text(static_cast<std::size_t>(std::min<std::uint64_t>(r.size, 8)), '\0');
    if (r.size <= 8) {
      std::vector<std::byte> b(text.size());
      FERRY_TRY(read(r.data_offset, b));
      if (!b.empty()) std::memcpy(text.data(), b.data(), b.size());
    }
    const auto named = wire::byte_order_from_name(text);
    if (r.size > 8 || !named) return error(errc::bad_byte_order, "record " + quote(r.name));
    order_source = text;
    out.order = *named;
  }

  const zip_record* const found = find(pickle_name);
  if (found == nullptr) return error(checkpoint_errc::not_a_checkpoint, "a zip archive without a data.pkl record");  // told above
  const zip_record& pkl = *found;
  if (pkl.size > lim.max_pickle_bytes || pkl.size > SIZE_MAX) return error(errc::limit_exceeded, "data.pkl");
  std::vector<std::byte> bytes(static_cast<std::size_t>(pkl.size));
  FERRY_TRY(read(pkl.data_offset, bytes));
  if (opt.checks == fetch_checks::every_checksum && pkl.crc32 != 0 && zip_crc32(bytes) != pkl.crc32) {
    return error(checkpoint_errc::crc32_mismatch, "record " + quote(pkl.name));
  }
  auto prog = pickle::run(bytes, lim);
  if (!prog) return error(prog.error().code(), "data.pkl " + prog.error().context());

  flattener flat(out, lim, prefix, zip);
  FERRY_TRY(flat.run(prog->root, prog->arena->size()));
  if (out.metadata.contains("pytorch.byteorder")) return error(errc::duplicate_key, "'pytorch.byteorder'");
  out.metadata.emplace("pytorch.byteorder", order_source);
  if (auto raw = flat.raw_dtypes(); !raw.empty()) {
    if (out.metadata.contains("pytorch.raw_dtypes")) return error(errc::duplicate_key, "'pytorch.raw_dtypes'");
    out.metadata.emplace("pytorch.raw_dtypes", std::move(raw));
  }
  out.other_records.reserve(zip.records.size() - out.storages.size());
  for (std::size_t i = 0; i < zip.records.size(); ++i) {
    if (!flat.used_records_[i]) out.other_records.push_back(std::move(zip.records[i]));
  }
  // The alignment every storage starts on (64 from torch.save), as for
  // safetensors: the largest power of two up to 4096 dividing them all.
  out.alignment = 4096;
  for (const auto& st : out.storages) {
    while (st.offset % out.alignment != 0) out.alignment /= 2;
  }
  return out;
}

}  // namespace ferry::checkpoint::detail
