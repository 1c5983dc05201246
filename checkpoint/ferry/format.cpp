// The .ferry file in the table (detail/formats.h); its parser is read.cpp,
// its writer write.cpp, its byte layout format.h and layout.cpp.
#include <algorithm>
#include <cstring>

#include "ferry/checkpoint/detail/formats.h"
#include "ferry/checkpoint/ferry/internal.h"
#include "ferry/checkpoint/set.h"

namespace ferry::checkpoint::detail {

bool ferry_head(std::span<const std::byte> head, bool index) noexcept {
  if (head.empty() || std::memcmp(head.data(), file_magic, std::min(head.size(), sizeof file_magic)) != 0) return false;
  // Too short to tell: a file's parser says truncated.
  if (head.size() < header_size) return !index;
  return (head[10] == std::byte{set_index_flag}) == index;
}

extern const format_ops ferry_format{
    file_format::ferry,
    "ferry",
    false,
    [](const source& s, const read_options&) { return ferry_head(s.head(), false); },
    [](const source& s, const read_options& opt) -> result<parsed_file, error> {
      if (s.head().size() < header_size) return s.fail(errc::truncated);
      return parse_ferry(s.file().fd(), s.size(), s.path(), s.head().first<header_size>(), opt.lim);
    },
};

}  // namespace ferry::checkpoint::detail
