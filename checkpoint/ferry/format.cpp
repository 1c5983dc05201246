// The .ferry file in the table (detail/formats.h); its parser is read.cpp,
// its writer write.cpp, its byte layout format.h and layout.cpp.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "ferry/checkpoint/detail/formats.h"
#include "ferry/checkpoint/ferry/internal.h"
#include "ferry/checkpoint/set.h"
#include "ferry/checkpoint/writer.h"

namespace ferry::checkpoint::detail {

bool ferry_head(std::span<const std::byte> head, bool index) noexcept {
  if (head.empty() || std::memcmp(head.data(), file_magic, std::min(head.size(), sizeof file_magic)) != 0) return false;
  // Too short to tell: a file's parser says truncated.
  if (head.size() < header_size) return !index;
  return (head[10] == std::byte{set_index_flag}) == index;
}

namespace {

constexpr std::string_view ferry_suffixes[] = {".ferry"};

// The streaming writer, one storage per distinct (pointer, size) of the
// tensors' bytes and element layout (the .pt writer's rule too); empty
// spans are never shared (they may all be one null pointer).
result<void, error> write_ferry(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                          const std::map<std::string, std::string>& metadata, const save_options& opt) {
  write_options wo;
  wo.order = opt.order.value_or(wo.order);
  if (opt.alignment != 0) wo.alignment = opt.alignment;
  wo.sync = opt.sync;
  wo.direct = opt.direct;
  wo.limits = opt.limits;
  FERRY_TRY_ASSIGN(auto w, writer::create(target, wo));
  using key = std::tuple<const std::byte*, std::size_t, std::size_t, std::size_t>;
  std::map<key, std::optional<storage_id>> written;
  for (const tensor_ref& t : tensors) {
    if (t.storage.empty()) {
      std::optional<storage_id> own;
      FERRY_TRY(w.add_shared(t, own));
      continue;
    }
    const key k(t.storage.data(), t.storage.size(), codec::size_of(t.dtype), codec::order_width(t.dtype));
    FERRY_TRY(w.add_shared(t, written[k]));
  }
  for (const auto& [k, v] : metadata) FERRY_TRY(w.set_metadata(k, v));
  return w.commit();
}

}  // namespace

extern const format_ops ferry_format{
    file_format::ferry,
    "ferry",
    false,
    [](const source& s, const read_options&) { return ferry_head(s.head(), false); },
    [](const source& s, const read_options& opt) -> result<parsed_file, error> {
      if (s.head().size() < header_size) return s.fail(errc::truncated);
      return parse_ferry(s.file().fd(), s.size(), s.path(), s.head().first<header_size>(), opt.lim);
    },
    ferry_suffixes,
    write_ferry,
};

}  // namespace ferry::checkpoint::detail
