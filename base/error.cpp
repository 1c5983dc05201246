#include "ferry/base/error.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <ostream>

namespace ferry {
namespace {

// Registered tables. Filled during static initialisation (one per module
// error header), read afterwards; the count is atomic so a late registration
// from a dynamically loaded library is safe too.
constexpr std::size_t max_tables = 32;
constinit std::array<std::span<const error_info>, max_tables> tables{};
constinit std::atomic<std::size_t> table_count{0};


const error_info* find(error_code e) noexcept {
  const std::size_t n = table_count.load(std::memory_order_acquire);
  for (std::size_t t = 0; t < n; ++t) {
    for (const error_info& i : tables[t]) {
      if (i.value == e.value()) return &i;
    }
  }
  return nullptr;
}

}  // namespace

bool register_errors(std::span<const error_info> table) noexcept {
  for ([[maybe_unused]] const error_info& i : table) {
    assert(find(error_code::from_value(i.value)) == nullptr);  // claimed by another module
    assert(std::count_if(table.begin(), table.end(), [&](const error_info& j) { return j.value == i.value; }) == 1);
  }
  const std::size_t slot = table_count.load(std::memory_order_relaxed);
  assert(slot < max_tables);
  if (slot >= max_tables) return false;
  tables[slot] = table;
  table_count.store(slot + 1, std::memory_order_release);
  return true;
}

std::string_view message(error_code e) noexcept {
  const error_info* i = find(e);
  return i != nullptr ? i->message : "unknown error";
}

std::string_view name(error_code e) noexcept {
  const error_info* i = find(e);
  return i != nullptr ? i->name : "unknown";
}

std::ostream& operator<<(std::ostream& os, error_code e) { return os << name(e) << " (" << e.value() << ")"; }

namespace {

// The length of the UTF-8 sequence starting at s[i] (1..4), or 0 if the
// bytes there are not one (overlong, surrogate, beyond U+10FFFF, cut).
std::size_t utf8_length(std::string_view s, std::size_t i, char32_t& cp) noexcept {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t n = 0;
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    return 0;
  }
  return n;
}

// Unicode's bidirectional controls (embeddings, overrides, isolates,
// marks), which reorder what a terminal shows.
bool direction_control(char32_t cp) noexcept {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F ||
         cp == 0x061C;
}

// Appends s[i..] escaped up to `limit` input bytes; returns the bytes taken.
// `quoted`: inside quote()'s quotes, where ' and \ are escaped too, so the
// quoted text ends where its quote does and "\n" is never a name's own.
std::size_t append_escaped(std::string& out, std::string_view s, std::size_t limit, bool quoted) {
  static constexpr char hex[] = "0123456789abcdef";
  std::size_t i = 0;
  while (i < s.size() && i < limit) {
    char32_t cp = 0;
    const std::size_t n = utf8_length(s, i, cp);
    if (n == 0) {  // not UTF-8: the byte itself
      const auto u = static_cast<unsigned char>(s[i]);
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
      i += 1;
    } else if (cp < 0x20 || cp == 0x7F) {
      switch (cp) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case 0: out += "\\0"; break;
        default:
          out += "\\x";
          out += hex[cp >> 4];
          out += hex[cp & 15];
      }
      i += 1;
    } else if ((cp >= 0x80 && cp <= 0x9F) || direction_control(cp)) {
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += hex[(cp >> shift) & 15];
      i += n;
    } else if (quoted && (cp == '\'' || cp == '\\')) {
      out += '\\';
      out += static_cast<char>(cp);
      i += 1;
    } else {
      if (i + n > limit) break;  // never half a character
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return i;
}

bool needs_escape(std::string_view s) noexcept {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7F) return true;  // control or non-ASCII: look closer
  }
  return false;
}

}  // namespace

std::string quote(std::string_view text, std::size_t max_bytes) {
  std::string out = "'";
  const std::size_t taken = append_escaped(out, text, max_bytes, true);
  out += '\'';
  if (taken < text.size()) {
    out.insert(out.size() - 1, "...");
    out += " (" + std::to_string(text.size()) + " bytes)";
  }
  return out;
}

std::string printable(std::string text) {
  if (!needs_escape(text)) return text;
  // Non-ASCII UTF-8 stays as it is; only what quote() escapes changes.
  std::string out;
  out.reserve(text.size());
  append_escaped(out, text, text.size(), false);
  return out;
}

std::string error::clean(std::string context) {
  context = printable(std::move(context));
  if (context.size() > max_context_bytes) {
    std::size_t cut = max_context_bytes - 3;
    while (cut > 0 && (static_cast<unsigned char>(context[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
    context.resize(cut);
    context += "...";
  }
  return context;
}

std::string error::what() const {
  std::string out = context_;
  if (!out.empty()) out += ": ";
  if (sys_errno_ != 0) {
    out += std::strerror(sys_errno_);
  } else {
    out += message(code_);
  }
  return out;
}

error error::wrap(std::string_view outer) const& {
  error e = *this;
  e.context_ = clean(context_.empty() ? std::string(outer) : std::string(outer) + ": " + context_);
  return e;
}

std::ostream& operator<<(std::ostream& os, const error& e) { return os << e.what() << " [" << e.code() << "]"; }

namespace detail {
void throw_error(const error& e) { throw exception(e); }
void throw_error(error_code e) { throw exception(error(e)); }
}  // namespace detail

}  // namespace ferry
