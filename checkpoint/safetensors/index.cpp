// Hugging Face sharded safetensors (safetensors.h, SHARDED FILES): the
// index's grammar, opening it as a set, and writing one.
#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "ferry/base/file.h"
#include "ferry/base/require.h"
#include "ferry/checkpoint/safetensors/internal.h"
#include "ferry/checkpoint/set/internal.h"
#include "ferry/checkpoint/safetensors.h"

namespace ferry::checkpoint {
namespace detail {
namespace {

// The index's grammar: one object; "weight_map" an object of strings (tensor
// name -> shard file); "metadata" an object whose scalar values are kept as
// text (nested values are skipped); other members skipped.
class index_grammar final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit index_grammar(const limits& lim) : lim_(lim) {}

  hf_index out;
  std::optional<error> failure;

  bool null() override { return scalar("null"); }
  bool boolean(bool v) override { return scalar(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override { return scalar(std::to_string(v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(std::to_string(v)); }
  bool number_float(number_float_t, const string_t& raw) override { return scalar(raw); }
  bool binary(binary_t&) override { return fail(checkpoint_errc::bad_json); }

  bool string(string_t& v) override {
    if (skip_ > 0 || state_ == in::top) return after_value();
    if (state_ == in::metadata) return scalar(v);
    if (state_ != in::weights) return fail(checkpoint_errc::bad_json);
    // A tensor and its shard.
    if (!valid_shard_file(v, lim_.max_name_bytes)) return fail(checkpoint_errc::bad_index, "weight_map: " + quote(v) + " is not a file name");
    const auto [it, fresh] = file_of_.emplace(v, static_cast<std::uint32_t>(out.files.size()));
    if (fresh) {
      if (out.files.size() >= lim_.max_shards) return fail(errc::limit_exceeded, "shards");
      out.files.push_back(v);
    }
    out.weights.emplace_back(std::move(key_), it->second);
    return true;
  }

  bool start_object(std::size_t) override {
    if (skip_ > 0) return ++skip_, true;
    switch (state_) {
      case in::start: state_ = in::top; return true;
      case in::top:
        if (key_ == "weight_map") state_ = in::weights;
        else if (key_ == "metadata") state_ = in::metadata;
        else skip_ = 1;
        return true;
      default:
        if (state_ == in::metadata) return skip_ = 1, true;
        return fail(checkpoint_errc::bad_json, "weight_map: a value that is not a file name");
    }
  }
  bool end_object() override {
    if (skip_ > 0) return --skip_, true;
    if (state_ == in::top) {
      if (!seen_weights_) return fail(checkpoint_errc::bad_json, "no weight_map");
      state_ = in::done;
    } else {
      state_ = in::top;
    }
    return true;
  }
  bool start_array(std::size_t) override {
    if (skip_ > 0 || state_ == in::top || state_ == in::metadata) return ++skip_, true;
    return fail(checkpoint_errc::bad_json);
  }
  bool end_array() override { return --skip_, true; }

  bool key(string_t& k) override {
    if (skip_ > 0) return true;
    if (state_ == in::top) {
      if (!top_keys_.insert(k).second) return fail(errc::duplicate_key, quote(k));
      if (k == "weight_map") seen_weights_ = true;
    } else if (state_ == in::weights) {
      if (!valid_name(k, lim_.max_name_bytes)) return fail(checkpoint_errc::bad_name, "weight_map");
      if (!names_.insert(k).second) return fail(errc::duplicate_key, "tensor " + quote(k));
      if (out.weights.size() >= lim_.max_tensors) return fail(errc::limit_exceeded, "tensors");
    } else if (state_ == in::metadata) {
      if (!valid_name(k, lim_.max_name_bytes) || out.metadata.contains(k)) return fail(checkpoint_errc::bad_metadata, "metadata");
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    return fail(checkpoint_errc::bad_json, ferry::context("byte ", position));
  }

  [[nodiscard]] bool complete() const noexcept { return state_ == in::done; }

 private:
  enum class in : std::uint8_t { start, top, weights, metadata, done };

  bool scalar(std::string v) {
    if (skip_ > 0 || state_ == in::top) return after_value();
    if (state_ != in::metadata) return fail(checkpoint_errc::bad_json, "weight_map: a value that is not a file name");
    out.metadata.emplace(std::move(key_), std::move(v));
    return true;
  }
  static bool after_value() { return true; }
  bool fail(error_code c, std::string what = {}) {
    if (!failure) failure = error(c, std::move(what));
    return false;
  }

  const limits& lim_;
  in state_ = in::start;
  std::size_t skip_ = 0;  // depth inside a value that is skipped
  bool seen_weights_ = false;
  std::string key_;
  std::unordered_set<std::string> top_keys_, names_;
  std::unordered_map<std::string, std::uint32_t> file_of_;
};

}  // namespace

result<hf_index, error> parse_hf_index(std::string_view json, const limits& lim) {
  if (!valid_utf8(json)) return error(checkpoint_errc::bad_utf8, "index");
  index_grammar g(lim);
  const bool ok = nlohmann::json::sax_parse(json.begin(), json.end(), &g, nlohmann::json::input_format_t::json, true);
  if (g.failure) return g.failure->wrap("index");
  if (!ok || !g.complete()) return error(checkpoint_errc::bad_json, "index");
  if (g.out.files.empty()) return error(checkpoint_errc::bad_json, "index: an empty weight_map");
  return std::move(g.out);
}

result<std::unique_ptr<shard_set>, error> open_hf_set(const std::filesystem::path& path, std::string_view json,
                                                      const read_options& opt, parsed_file& out) {
  auto index = parse_hf_index(json, opt.lim);
  if (!index) return index.error().wrap(path.string());
  std::vector<set_tensor_record> tensors;
  tensors.reserve(index->weights.size());
  for (auto& [name, file] : index->weights) tensors.push_back({std::move(name), 0, {}, {{file, 0, 0}}, true});
  const shard_check check = [](std::size_t, const reader& r) -> result<void, error> {
    if (r.format() != file_format::safetensors) return error(checkpoint_errc::bad_shard, "not a safetensors file");
    return {};
  };
  FERRY_TRY_ASSIGN(auto set, build_set(path, index->files, std::move(tensors), opt, check, out));
  set->total_bytes += json.size();
  out.format = file_format::safetensors_sharded;
  out.metadata = std::move(index->metadata);
  return set;
}

}  // namespace detail

namespace {

// "model" of "model.safetensors.index.json" (and of "model.json").
std::string hf_stem(const std::filesystem::path& index) {
  std::string name = index.filename().string();
  for (const std::string_view suffix : {".json", ".index", ".safetensors"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) name.resize(name.size() - suffix.size());
  }
  return name;
}

bool is_hf_shard_name(std::string_view name, std::string_view stem) {
  if (!name.starts_with(stem) || !name.ends_with(".safetensors")) return false;
  name.remove_prefix(stem.size());
  name.remove_suffix(12);
  // -NNNNN-of-NNNNN
  if (name.size() != 15 || name[0] != '-' || name.substr(6, 4) != "-of-") return false;
  const auto digits = [](std::string_view d) { return std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; }); };
  return digits(name.substr(1, 5)) && digits(name.substr(10, 5));
}

// Tensors in file order, a new shard whenever the next would take this one
// past max_shard_bytes (a larger tensor has a shard of its own); tensors
// over one storage stay together, so sharing can be kept (or refused) as
// in one file.
std::vector<std::vector<std::size_t>> plan_safetensors_shards(std::span<const tensor_ref> tensors,
                                                              std::uint64_t max_shard_bytes) {
  std::vector<std::vector<std::size_t>> plan;
  std::map<std::pair<const std::byte*, std::size_t>, std::size_t> shard_of_storage;
  std::uint64_t filled = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const auto key = std::make_pair(t.storage.data(), t.storage.size());
    if (const auto it = t.storage.empty() ? shard_of_storage.end() : shard_of_storage.find(key);
        it != shard_of_storage.end()) {
      plan[it->second].push_back(i);  // beside the tensors over its storage
      continue;
    }
    std::uint64_t bytes = codec::size_of(t.dtype);
    for (const auto e : t.shape) bytes *= e;
    if (plan.empty() || (filled > 0 && filled + bytes > max_shard_bytes)) {
      plan.emplace_back();
      filled = 0;
    }
    plan.back().push_back(i);
    filled += bytes;
    if (!t.storage.empty()) shard_of_storage.emplace(key, plan.size() - 1);
  }
  if (plan.empty()) plan.emplace_back();
  return plan;
}

}  // namespace

result<std::vector<std::filesystem::path>, error> save_safetensors_sharded(
    const std::filesystem::path& index, std::span<const tensor_ref> tensors, std::uint64_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata, const safetensors_options& opt) {
  const auto plan = plan_safetensors_shards(tensors, max_shard_bytes);
  const std::string stem = hf_stem(index);
  const std::filesystem::path folder = detail::folder_of(index);
  std::vector<base::atomic_file> staged;
  std::vector<std::filesystem::path> files;
  nlohmann::ordered_json weights = nlohmann::ordered_json::object();
  std::uint64_t total = 0;
  std::vector<std::size_t> file_of(tensors.size());
  for (std::size_t k = 0; k < plan.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "-%05zu-of-%05zu.safetensors", k + 1, plan.size());
    const auto path = folder / (stem + name);
    std::vector<tensor_ref> refs;
    std::set<std::pair<const std::byte*, std::size_t>> storages;
    for (const std::size_t i : plan[k]) {
      const auto& t = tensors[i];
      refs.push_back(t);
      file_of[i] = k;
      if (opt.shared == safetensors_options::shared_policy::copy || t.storage.empty() ||
          storages.emplace(t.storage.data(), t.storage.size()).second) {
        std::uint64_t bytes = codec::size_of(t.dtype);
        for (const auto e : t.shape) bytes *= e;
        total += bytes;
      }
    }
    // transformers refuses shards whose __metadata__ lacks a known format.
    FERRY_TRY_ASSIGN(auto file, detail::stage_safetensors(path, refs, {{"format", "pt"}}, opt));
    staged.push_back(std::move(file));
    files.push_back(path);
  }
  // Every shard is written before any is published: a failure leaves the
  // previous shards; a crash in the renames below can mix them (the
  // format has no save id: for crash-proof sets, use a .ferry set).
  for (auto& f : staged) FERRY_TRY(f.commit());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    weights[std::string(tensors[i].name)] = files[file_of[i]].filename().string();
  }
  nlohmann::ordered_json doc;
  doc["metadata"] = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) doc["metadata"][k] = v;
  doc["metadata"]["total_size"] = total;
  doc["weight_map"] = std::move(weights);
  const std::string text = doc.dump(2) + "\n";
  FERRY_TRY(base::write_file_atomic(index, std::as_bytes(std::span(text))));
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (is_hf_shard_name(name, stem) && std::find(files.begin(), files.end(), it->path()) == files.end()) {
      std::filesystem::remove(it->path(), ec);
    }
  }
  return files;
}

}  // namespace ferry::checkpoint
