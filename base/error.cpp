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
  e.context_ = context_.empty() ? std::string(outer) : std::string(outer) + ": " + context_;
  return e;
}

std::ostream& operator<<(std::ostream& os, const error& e) { return os << e.what() << " [" << e.code() << "]"; }

namespace detail {
void throw_error(const error& e) { throw exception(e); }
void throw_error(error_code e) { throw exception(error(e)); }
}  // namespace detail

}  // namespace ferry
