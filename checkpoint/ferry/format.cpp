// The .ferry file in the table (detail/formats.h); its parser is read.cpp,
// its writer write.cpp, its byte layout format.h and layout.cpp.
#include <algorithm>
#include <cstring>

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

// save() (writer.h): equal spans are one storage.
result<void, error> write_ferry(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                                const std::map<std::string, std::string>& metadata, const save_options& opt) {
  auto wo = writer_options<write_options>(opt);
  wo.order = opt.order.value_or(wo.order);
  if (opt.alignment != 0) wo.alignment = opt.alignment;
  return save(target, tensors, metadata, wo);
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
    nullptr,
};

}  // namespace ferry::checkpoint::detail
