// safetensors headers parsed and checked (safetensors.h states the
// grammar): nlohmann-json's SAX parser with ferry's grammar on top. The
// writer is write.cpp.
#include "ferry/checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <set>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "ferry/base/file.h"
#include "ferry/base/require.h"
#include "ferry/checkpoint/safetensors/internal.h"
#include "ferry/checkpoint/format.h"
#include "ferry/wire/bulk.h"

namespace ferry::checkpoint {
namespace {

struct dtype_name {
  codec::dtype type;
  std::string_view name;
};
constexpr dtype_name dtype_names[] = {
    {codec::dtype::boolean, "BOOL"}, {codec::dtype::u8, "U8"},     {codec::dtype::i8, "I8"},
    {codec::dtype::u16, "U16"},      {codec::dtype::i16, "I16"},   {codec::dtype::u32, "U32"},
    {codec::dtype::i32, "I32"},      {codec::dtype::u64, "U64"},   {codec::dtype::i64, "I64"},
    {codec::dtype::f16, "F16"},      {codec::dtype::bf16, "BF16"}, {codec::dtype::f32, "F32"},
    {codec::dtype::f64, "F64"},      {codec::dtype::f8_e4m3, "F8_E4M3"}, {codec::dtype::f8_e5m2, "F8_E5M2"},
    {codec::dtype::c64, "C64"},
};

using detail::tensor_what;

// One tensor entry as the header states it.
struct entry {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0;
};

// The SAX handler that holds ferry's grammar (safetensors.h). nlohmann's
// parser supplies tokens, JSON syntax and string unescaping; every
// structural rule is here, and the first broken one stops the parse.
class header_grammar final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit header_grammar(const limits& lim) : lim_(lim) {}

  std::vector<entry> entries;
  std::map<std::string, std::string> metadata;
  std::optional<error> failure;

  bool null() override { return unexpected(); }
  bool boolean(bool) override { return unexpected(); }
  bool number_integer(number_integer_t) override { return unexpected(); }
  bool number_float(number_float_t, const string_t&) override { return unexpected(); }
  bool binary(binary_t&) override { return unexpected(); }

  bool number_unsigned(number_unsigned_t v) override {
    if (state_ == in::shape) {
      if (cur_.shape.size() >= lim_.max_dims) return fail(errc::limit_exceeded, tensor_what(cur_.name));
      cur_.shape.push_back(v);
      return true;
    }
    if (state_ == in::offsets) {
      if (offsets_seen_ == 2) return fail(checkpoint_errc::bad_json, tensor_what(cur_.name));
      (offsets_seen_++ == 0 ? cur_.begin : cur_.end) = v;
      return true;
    }
    return unexpected();
  }

  bool string(string_t& s) override {
    if (state_ == in::metadata && expect_value_) {
      expect_value_ = false;
      metadata.emplace(std::move(pending_key_), std::move(s));
      return true;
    }
    if (state_ == in::tensor && field_ == field::dtype) {
      cur_.dtype = std::move(s);
      field_ = field::none;
      return true;
    }
    return unexpected();
  }

  bool start_object(std::size_t) override {
    switch (state_) {
      case in::start:
        state_ = in::top;
        return true;
      case in::top:
        if (!expect_value_) return fail(checkpoint_errc::bad_json);
        expect_value_ = false;
        if (pending_key_ == "__metadata__") {
          state_ = in::metadata;
        } else {
          state_ = in::tensor;
          cur_ = entry{std::move(pending_key_), {}, {}, 0, 0};
          fields_seen_ = 0;
          field_ = field::none;
        }
        return true;
      case in::metadata:
        return fail(checkpoint_errc::bad_metadata);
      default:
        return fail(checkpoint_errc::bad_json);
    }
  }

  bool key(string_t& k) override {
    switch (state_) {
      case in::top:
        if (!top_keys_.insert(k).second) return fail(errc::duplicate_key, tensor_what(k));
        if (k != "__metadata__") {
          if (!valid_name(k, lim_.max_name_bytes)) return fail(checkpoint_errc::bad_name);
          if (entries.size() >= lim_.max_tensors) return fail(errc::limit_exceeded, "tensors");
        }
        pending_key_ = std::move(k);
        expect_value_ = true;
        return true;
      case in::metadata:
        if (metadata.contains(k)) return fail(errc::duplicate_key, "metadata " + quote(k));
        if (!valid_name(k, lim_.max_name_bytes)) return fail(checkpoint_errc::bad_metadata);
        pending_key_ = std::move(k);
        expect_value_ = true;
        return true;
      case in::tensor: {
        const auto f = k == "dtype" ? field::dtype : k == "shape" ? field::shape : k == "data_offsets" ? field::offsets
                                                                                                     : field::none;
        if (f == field::none) return fail(checkpoint_errc::bad_json, tensor_what(cur_.name) + ": member " + quote(k));
        const auto bit = 1u << static_cast<unsigned>(f);
        if ((fields_seen_ & bit) != 0) return fail(errc::duplicate_key, tensor_what(cur_.name) + ": member " + quote(k));
        fields_seen_ |= bit;
        field_ = f;
        return true;
      }
      default:
        return fail(checkpoint_errc::bad_json);
    }
  }

  bool end_object() override {
    switch (state_) {
      case in::metadata:
        state_ = in::top;
        return true;
      case in::tensor:
        if (fields_seen_ != 0b1110u || field_ != field::none) {
          return fail(checkpoint_errc::bad_json, tensor_what(cur_.name) + ": needs dtype, shape and data_offsets");
        }
        entries.push_back(std::move(cur_));
        state_ = in::top;
        return true;
      case in::top:
        state_ = in::done;
        return true;
      default:
        return fail(checkpoint_errc::bad_json);
    }
  }

  bool start_array(std::size_t) override {
    if (state_ == in::tensor && field_ == field::shape) {
      state_ = in::shape;
      return true;
    }
    if (state_ == in::tensor && field_ == field::offsets) {
      state_ = in::offsets;
      offsets_seen_ = 0;
      return true;
    }
    return unexpected();
  }

  bool end_array() override {
    if (state_ == in::shape || (state_ == in::offsets && offsets_seen_ == 2)) {
      state_ = in::tensor;
      field_ = field::none;
      return true;
    }
    return fail(checkpoint_errc::bad_json, tensor_what(cur_.name) + ": data_offsets needs two numbers");
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    return fail(checkpoint_errc::bad_json, ferry::context("header byte ", position));
  }

  [[nodiscard]] bool complete() const noexcept { return state_ == in::done; }

 private:
  enum class in : std::uint8_t { start, top, metadata, tensor, shape, offsets, done };
  enum class field : std::uint8_t { none, dtype, shape, offsets };

  // A value where the grammar has none. Metadata (its values, or
  // "__metadata__" itself) must be strings in an object.
  bool unexpected() {
    const bool metadata_value = state_ == in::metadata || (state_ == in::top && pending_key_ == "__metadata__");
    return fail(metadata_value ? error_code(checkpoint_errc::bad_metadata) : error_code(checkpoint_errc::bad_json));
  }

  bool fail(error_code c, std::string what = {}) {
    if (!failure) failure = error(c, std::move(what));
    return false;
  }

  const limits& lim_;
  in state_ = in::start;
  field field_ = field::none;
  unsigned fields_seen_ = 0;
  unsigned offsets_seen_ = 0;
  bool expect_value_ = false;
  std::string pending_key_;
  entry cur_;
  std::unordered_set<std::string> top_keys_;
};

}  // namespace

std::optional<safetensors_options::shared_policy> safetensors_options::policy_from_name(std::string_view name) noexcept {
  if (name == "refuse") return shared_policy::refuse;
  if (name == "copy") return shared_policy::copy;
  if (name == "alias") return shared_policy::alias;
  return std::nullopt;
}

std::string_view safetensors_dtype_name(codec::dtype t) noexcept {
  for (const auto& d : dtype_names) {
    if (d.type == t) return d.name;
  }
  return {};
}

result<codec::dtype> safetensors_dtype(std::string_view name) noexcept {
  for (const auto& d : dtype_names) {
    if (d.name == name) return d.type;
  }
  return codec_errc::unknown_dtype;
}

namespace detail {

result<parsed_file, error> parse_safetensors_header(std::string_view json, std::uint64_t data_offset,
                                                    std::uint64_t data_size, const limits& lim) {
  if (!valid_utf8(json)) return error(checkpoint_errc::bad_utf8, "safetensors header");
  if (json.empty() || json.front() != '{') return error(checkpoint_errc::bad_json, "safetensors header start");
  header_grammar g(lim);
  const bool ok = nlohmann::json::sax_parse(json.begin(), json.end(), &g, nlohmann::json::input_format_t::json,
                                            /*strict=*/true, /*ignore_comments=*/false);
  if (g.failure) return *g.failure;
  if (!ok || !g.complete()) return error(checkpoint_errc::bad_json, "safetensors header");

  parsed_file out;
  out.format = file_format::safetensors;
  out.order = wire::byte_order::little;
  out.alignment = 1u << std::min(std::countr_zero(data_offset | (std::uint64_t{1} << 12)), 12);
  out.data_end = data_offset + data_size;

  // Sorted by (begin, end), the tensors must tile the data area exactly.
  std::vector<std::size_t> order(g.entries.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = g.entries[a];
    const auto& y = g.entries[b];
    return std::tie(x.begin, x.end) < std::tie(y.begin, y.end);
  });
  for (const std::size_t i : order) {
    const entry& e = g.entries[i];
    if (e.end < e.begin) return make_error(checkpoint_errc::bad_layout, tensor_what(e.name), ": ends before it begins");
  }
  detail::tiling area;  // offsets relative to the data area, no padding
  area.end = data_size;
  area.area = "safetensors data";
  const auto range = [&](std::size_t k) {
    const entry& e = g.entries[order[k]];
    return std::pair(e.begin, e.end - e.begin);
  };
  FERRY_TRY(detail::check_tiling(
      order.size(), range, [&](std::size_t k) { return tensor_what(g.entries[order[k]].name); }, area));
  std::vector<std::uint32_t> storage_of(g.entries.size());
  for (const std::size_t i : order) {
    const entry& e = g.entries[i];
    const auto dt = safetensors_dtype(e.dtype);
    if (!dt) return error(dt.error(), tensor_what(e.name) + ": dtype " + quote(e.dtype));
    const codec::dtype dtype = *dt;
    const std::vector<std::uint64_t> strides = contiguous_strides(e.shape);
    const std::uint64_t nbytes = e.end - e.begin;
    if (auto r = check_view(dtype, e.shape, strides, 0, UINT64_MAX, lim.max_dims); !r) {
      return error(r.error(), tensor_what(e.name));
    }
    std::uint64_t numel = 1;
    for (const auto d : e.shape) numel *= d;
    if (numel * codec::size_of(dtype) != nbytes) return error(checkpoint_errc::shape_size_mismatch, tensor_what(e.name));
    storage_of[i] = static_cast<std::uint32_t>(out.storages.size());
    out.storages.push_back({data_offset + e.begin, nbytes, dtype, std::nullopt, std::nullopt, std::nullopt});
  }

  out.tensors.reserve(g.entries.size());
  for (std::size_t i = 0; i < g.entries.size(); ++i) {
    entry& e = g.entries[i];
    tensor_info t;
    t.dtype = out.storages[storage_of[i]].dtype;
    t.strides = contiguous_strides(e.shape);
    t.shape = std::move(e.shape);
    t.name = std::move(e.name);
    t.storage = storage_of[i];
    out.tensors.push_back(std::move(t));
  }
  // Hugging Face's alias convention: "removed": "kept" in __metadata__.
  std::map<std::string, std::size_t, std::less<>> by_name;
  for (std::size_t i = 0; i < out.tensors.size(); ++i) by_name.emplace(out.tensors[i].name, i);
  for (auto& [key, value] : g.metadata) {
    const auto kept = by_name.find(value);
    if (by_name.contains(key) || kept == by_name.end() || out.tensors.size() >= lim.max_tensors) {
      out.metadata.emplace(key, std::move(value));
      continue;
    }
    tensor_info alias = out.tensors[kept->second];
    alias.name = key;
    out.tensors.push_back(std::move(alias));
  }
  return out;
}

result<parsed_file, error> parse_safetensors(int fd, std::uint64_t file_size, std::uint64_t header_length,
                                             const limits& lim) {
  if (header_length > lim.max_header_bytes) return error(checkpoint_errc::header_too_large, "safetensors header");
  if (header_length > file_size - 8) return error(errc::truncated, "safetensors header");
  if (header_length > SIZE_MAX) return error(checkpoint_errc::header_too_large, "safetensors header");
  std::string json(static_cast<std::size_t>(header_length), '\0');
  int sys_errno = 0;
  if (auto r = pread_exact(fd, 8, std::as_writable_bytes(std::span(json)), sys_errno); !r) {
    return error(r.error(), "safetensors header", sys_errno);
  }
  return parse_safetensors_header(json, 8 + header_length, file_size - 8 - header_length, lim);
}

}  // namespace detail

}  // namespace ferry::checkpoint
