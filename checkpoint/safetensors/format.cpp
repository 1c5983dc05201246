// safetensors in the table (detail/formats.h): a .safetensors file
// (read.cpp, write.cpp) and a Hugging Face sharded index, JSON naming the
// shards (index.cpp), whose storages are the shards' (shard_set).
#include <algorithm>

#include "ferry/base/require.h"
#include "ferry/checkpoint/detail/formats.h"
#include "ferry/checkpoint/safetensors/internal.h"
#include "ferry/checkpoint/set/internal.h"
#include "ferry/wire/cursor.h"

namespace ferry::checkpoint::detail {

namespace {

// The first 8 bytes as the header's length (little-endian).
std::uint64_t header_length(std::span<const std::byte> head) { return *wire::reader(head).read_le<std::uint64_t>(); }

// (A name ending .index.json is a sharded set's index: save_safetensors_sharded().)
constexpr std::string_view safetensors_suffixes[] = {".safetensors"};

result<void, error> check_safetensors(const std::filesystem::path& target, const save_options& opt) {
  FERRY_TRY(little_endian_only(target, "safetensors", opt));
  if (!safetensors_options::policy_from_name(opt.shared)) {
    return make_error(errc::bad_value, target.string(), ": no shared-storage policy ", quote(opt.shared));
  }
  return {};
}

// Checked by check_safetensors() first (save_as()).
result<void, error> write_safetensors(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                                      const std::map<std::string, std::string>& metadata, const save_options& opt) {
  auto so = writer_options<safetensors_options>(opt);
  if (opt.alignment != 0) so.alignment = opt.alignment;
  so.shared = *safetensors_options::policy_from_name(opt.shared);
  return save_safetensors(target, tensors, metadata, so);
}

}  // namespace

// '{' at byte 8 after a little-endian header length; unless byte 0 is '{'
// too and that length does not fit the file (then it is JSON: an index).
extern const format_ops safetensors_format{
    file_format::safetensors,
    "safetensors",
    false,
    [](const source& s, const read_options&) {
      const auto head = s.head();
      const auto is = [&](std::size_t at, char c) { return head.size() > at && head[at] == static_cast<std::byte>(c); };
      // head.size() > 8, so size() - 8 does not wrap.
      return is(8, '{') && !(is(0, '{') && header_length(head) > s.size() - 8);
    },
    [](const source& s, const read_options& opt) {
      return in_file(s.path(), parse_safetensors(s.file().fd(), s.size(), header_length(s.head()), opt.lim));
    },
    safetensors_suffixes,
    write_safetensors,
    check_safetensors,
};

// JSON: the first byte that is not JSON whitespace is '{'.
extern const format_ops safetensors_index_format{
    file_format::safetensors_sharded,
    "safetensors-sharded",
    true,
    [](const source& s, const read_options&) {
      const auto head = s.head();
      const auto first = std::find_if(head.begin(), head.end(), [](std::byte b) {
        return b != std::byte{' '} && b != std::byte{'\n'} && b != std::byte{'\r'} && b != std::byte{'\t'};
      });
      return first != head.end() && *first == std::byte{'{'};
    },
    [](const source& s, const read_options& opt) -> result<parsed_file, error> {
      // Read whole.
      if (s.size() > opt.lim.max_header_bytes) return s.fail(errc::limit_exceeded, 0, "index");
      std::string json(static_cast<std::size_t>(s.size()), '\0');
      int sys_errno = 0;
      if (auto r = s.file().read(0, std::as_writable_bytes(std::span(json)), sys_errno); !r) {
        return s.fail(r.error(), sys_errno);
      }
      parsed_file index;
      FERRY_TRY_ASSIGN(auto set, open_hf_set(s.path(), json, opt, index));
      index.source = std::move(set);
      return index;
    },
    {},       // written beside its shards: save_safetensors_sharded() (safetensors.h)
    nullptr,
    nullptr,
};

}  // namespace ferry::checkpoint::detail
