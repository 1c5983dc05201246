#include "ferry/codec/dtype.h"

#include <cassert>
#include <iterator>

namespace ferry::codec {
namespace {

struct dtype_info {
  dtype type;
  std::uint8_t size;
  bool floating;
  std::string_view name;
};

// Indexed by code - 1.
constexpr dtype_info table[] = {
    {dtype::boolean, 1, false, "BOOL"}, {dtype::u8, 1, false, "U8"},
    {dtype::i8, 1, false, "I8"},        {dtype::u16, 2, false, "U16"},
    {dtype::i16, 2, false, "I16"},      {dtype::u32, 4, false, "U32"},
    {dtype::i32, 4, false, "I32"},      {dtype::u64, 8, false, "U64"},
    {dtype::i64, 8, false, "I64"},      {dtype::f16, 2, true, "F16"},
    {dtype::bf16, 2, true, "BF16"},     {dtype::f32, 4, true, "F32"},
    {dtype::f64, 8, true, "F64"},       {dtype::f8_e4m3, 1, true, "F8_E4M3"},
    {dtype::f8_e5m2, 1, true, "F8_E5M2"},
    {dtype::f8_e4m3fnuz, 1, true, "F8_E4M3FNUZ"},
    {dtype::f8_e5m2fnuz, 1, true, "F8_E5M2FNUZ"},
    {dtype::c32, 4, false, "C32"},
    {dtype::c64, 8, false, "C64"},
    {dtype::c128, 16, false, "C128"},
};

constexpr bool table_is_in_code_order() {
  for (std::size_t i = 0; i < std::size(table); ++i) {
    if (code(table[i].type) != i + 1 || table[i].type != all_dtypes[i]) return false;
  }
  return std::size(table) == std::size(all_dtypes);
}
static_assert(table_is_in_code_order());

// Requires: t is one of all_dtypes (values from outside come through
// dtype_from_code or dtype_from_name, which check).
const dtype_info& info(dtype t) noexcept {
  assert(code(t) >= 1 && code(t) <= std::size(table));
  return table[code(t) - 1];
}

}  // namespace

std::size_t size_of(dtype t) noexcept { return info(t).size; }
std::size_t order_width(dtype t) noexcept {
  const std::size_t size = info(t).size;
  return is_complex(t) ? size / 2 : size;
}
std::string_view name(dtype t) noexcept { return info(t).name; }
bool is_floating_point(dtype t) noexcept { return info(t).floating; }

result<dtype> dtype_from_name(std::string_view n) noexcept {
  for (const auto& i : table) {
    if (i.name == n) return i.type;
  }
  return codec_errc::unknown_dtype;
}

result<dtype> dtype_from_code(std::uint8_t c) noexcept {
  if (c == 0 || c > std::size(table)) return codec_errc::unknown_dtype;
  return static_cast<dtype>(c);
}

}  // namespace ferry::codec
