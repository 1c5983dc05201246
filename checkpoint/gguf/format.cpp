// GGUF in the table (detail/formats.h): llama.cpp's file, its header
// parsed by parse.cpp, served as tensors by read.cpp, written by write.cpp.
#include <cstring>

#include "ferry/checkpoint/detail/formats.h"
#include "ferry/checkpoint/gguf/internal.h"

namespace ferry::checkpoint::detail {

namespace {

// Written by save_gguf() (typed tensors and metadata), not save_as().
constexpr std::string_view gguf_suffixes[] = {".gguf"};

}  // namespace

// "GGUF", or gguf-py's old big-endian "FUGG".
extern const format_ops gguf_format{
    file_format::gguf,
    "gguf",
    false,
    [](const source& s, const read_options&) {
      const auto head = s.head();
      return head.size() >= 4 && (std::memcmp(head.data(), "GGUF", 4) == 0 || std::memcmp(head.data(), "FUGG", 4) == 0);
    },
    [](const source& s, const read_options& opt) {
      return in_file(s.path(), parse_gguf(s.size(), s.read_at(), opt));
    },
    gguf_suffixes,
    nullptr,
    nullptr,
};

}  // namespace ferry::checkpoint::detail
