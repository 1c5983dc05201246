#include "ferry/codec/dtype.h"

#include <gtest/gtest.h>

namespace ferry::codec {
namespace {

TEST(Dtype, NamesSizesAndCodesMatchSafetensors) {
  struct row {
    dtype t;
    std::string_view name;
    std::size_t size;
    std::uint8_t code;
    bool floating;
  };
  const row rows[] = {
      {dtype::boolean, "BOOL", 1, 1, false}, {dtype::u8, "U8", 1, 2, false},
      {dtype::i8, "I8", 1, 3, false},        {dtype::u16, "U16", 2, 4, false},
      {dtype::i16, "I16", 2, 5, false},      {dtype::u32, "U32", 4, 6, false},
      {dtype::i32, "I32", 4, 7, false},      {dtype::u64, "U64", 8, 8, false},
      {dtype::i64, "I64", 8, 9, false},      {dtype::f16, "F16", 2, 10, true},
      {dtype::bf16, "BF16", 2, 11, true},    {dtype::f32, "F32", 4, 12, true},
      {dtype::f64, "F64", 8, 13, true},      {dtype::f8_e4m3, "F8_E4M3", 1, 14, true},
      {dtype::f8_e5m2, "F8_E5M2", 1, 15, true},
      {dtype::f8_e4m3fnuz, "F8_E4M3FNUZ", 1, 16, true},
      {dtype::f8_e5m2fnuz, "F8_E5M2FNUZ", 1, 17, true},
      {dtype::c32, "C32", 4, 18, false},     {dtype::c64, "C64", 8, 19, false},
      {dtype::c128, "C128", 16, 20, false},
  };
  ASSERT_EQ(std::size(rows), std::size(all_dtypes));
  for (const auto& r : rows) {
    EXPECT_EQ(name(r.t), r.name);
    EXPECT_EQ(size_of(r.t), r.size);
    EXPECT_EQ(code(r.t), r.code);
    EXPECT_EQ(is_floating_point(r.t), r.floating);
    EXPECT_EQ(order_width(r.t), is_complex(r.t) ? r.size / 2 : r.size);
    EXPECT_EQ(*dtype_from_name(r.name), r.t);
    EXPECT_EQ(*dtype_from_code(r.code), r.t);
  }
}

TEST(Dtype, UnknownNamesAndCodesAreErrors) {
  EXPECT_EQ(dtype_from_name("f32").error(), codec_errc::unknown_dtype);  // case-sensitive
  EXPECT_EQ(dtype_from_name("").error(), codec_errc::unknown_dtype);
  EXPECT_EQ(dtype_from_name("F32 ").error(), codec_errc::unknown_dtype);
  EXPECT_EQ(dtype_from_code(0).error(), codec_errc::unknown_dtype);
  EXPECT_EQ(dtype_from_code(21).error(), codec_errc::unknown_dtype);
  EXPECT_EQ(dtype_from_code(255).error(), codec_errc::unknown_dtype);
}

}  // namespace
}  // namespace ferry::codec
