// safetensors: the reference implementation's sample files decode exactly on
// every architecture; ferry's files have the reference layout; every
// malformed header gets its own typed error; shared storage is refused,
// copied or aliased as asked.
#include <gtest/gtest.h>

#include "ferry/checkpoint/safetensors.h"
#include "ferry/codec/half.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

const fs::path fixtures = fs::path(FERRY_TEST_DATA_DIR) / "safetensors";

class Safetensors : public scratch_dir {
 protected:
  // A file of an 8-byte length, `header` and `data`.
  fs::path make(std::string_view header, std::size_t data_bytes, std::uint64_t length_field = UINT64_MAX) {
    const auto p = dir_ / "t.safetensors";
    std::vector<std::byte> f(8);
    wire::store<std::uint64_t>(length_field == UINT64_MAX ? header.size() : length_field, f.data(),
                               wire::byte_order::little);
    const auto h = std::as_bytes(std::span(header));
    f.insert(f.end(), h.begin(), h.end());
    f.resize(f.size() + data_bytes, std::byte{0});
    spit(p, f);
    return p;
  }
  error_code open_error(std::string_view header, std::size_t data_bytes, const limits& lim = {}) {
    const auto r = open(make(header, data_bytes), lim);
    return r ? error_code() : r.error().code();
  }
};

template <class T>
std::vector<double> values(const tensor& t) {
  std::vector<T> v(t.bytes().size() / sizeof(T));
  std::memcpy(v.data(), t.bytes().data(), t.bytes().size());
  std::vector<double> out;
  for (const auto x : v) {
    if constexpr (std::is_same_v<T, f16>) out.push_back(codec::to_float(x));
    else out.push_back(static_cast<double>(x));
  }
  return out;
}

TEST_F(Safetensors, ReferenceSamplesDecodeExactly) {
  const std::vector<double> signed_values{-3, -2, -1, 0, 1, 2};
  const auto wrap = [](double bits) {
    std::vector<double> v;
    for (int i = -3; i < 3; ++i) v.push_back(i < 0 ? bits + i : i);
    return v;
  };
  struct sample_file {
    const char* name;
    codec::dtype dtype;
    std::vector<double> expect;
  };
  for (const auto& s : {sample_file{"B", codec::dtype::u8, wrap(256.0)}, sample_file{"H", codec::dtype::u16, wrap(65536.0)},
                        sample_file{"I", codec::dtype::u32, wrap(4294967296.0)},
                        sample_file{"b", codec::dtype::i8, signed_values}, sample_file{"d", codec::dtype::f64, signed_values},
                        sample_file{"e", codec::dtype::f16, signed_values},
                        sample_file{"f", codec::dtype::f32, signed_values}}) {
    auto r = open(fixtures / (std::string(s.name) + ".safetensors"));
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->format(), file_format::safetensors);
    EXPECT_EQ(r->order(), wire::byte_order::little);
    EXPECT_EQ(r->metadata(), (std::map<std::string, std::string>{{"test", "a"}}));
    ASSERT_EQ(r->tensors().size(), 1u);
    auto t = r->get(s.name);
    ASSERT_TRUE(t) << t.error();
    EXPECT_EQ(t->dtype(), s.dtype);
    EXPECT_TRUE(std::ranges::equal(t->shape(), std::vector<std::uint64_t>{6}));
    std::vector<double> got;
    switch (s.dtype) {
      case codec::dtype::u8: got = values<std::uint8_t>(*t); break;
      case codec::dtype::u16: got = values<std::uint16_t>(*t); break;
      case codec::dtype::u32: got = values<std::uint32_t>(*t); break;
      case codec::dtype::i8: got = values<std::int8_t>(*t); break;
      case codec::dtype::f64: got = values<double>(*t); break;
      case codec::dtype::f16: got = values<f16>(*t); break;
      default: got = values<float>(*t); break;
    }
    EXPECT_EQ(got, s.expect) << s.name;
    EXPECT_TRUE(r->verify());
  }
}

TEST_F(Safetensors, WrittenFilesHaveTheReferenceLayout) {
  sample s;
  auto refs = s.refs();
  const auto p = dir_ / "out.safetensors";
  safetensors_options opt;
  opt.shared = safetensors_options::shared_policy::copy;
  opt.sync = false;
  ASSERT_TRUE(save_safetensors(p, refs, sample::metadata(), opt));
  const auto f = slurp(p);
  const auto n = wire::load<std::uint64_t>(f.data(), wire::byte_order::little);
  EXPECT_EQ((8 + n) % 64, 0u);  // data 64-byte aligned (the reference needs 8)
  EXPECT_EQ(static_cast<char>(f[8]), '{');
  auto r = open(p);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->metadata(), sample::metadata());
  for (const auto& ref : refs) {
    auto t = r->get(ref.name);
    ASSERT_TRUE(t) << ref.name;
    EXPECT_EQ(t->contiguous_copy(), gather(ref)) << ref.name;
    EXPECT_TRUE(t->info().is_contiguous());
  }
  // Copies: nothing shared any more.
  EXPECT_NE(r->get("encoder.embed.weight")->storage(), r->get("decoder.out.weight")->storage());
}

// C64 is safetensors' complex64: little-endian parts, each swapped alone.
// Types safetensors lacks (C32, C128, the fnuz FP8s) are refused naming
// the tensor and the dtype, and nothing is written.
TEST_F(Safetensors, ComplexRoundTripsAndTypesSafetensorsLacksAreRefused) {
  const float parts[] = {1.0f, -2.5f, -0.0f, std::numeric_limits<float>::infinity()};
  const auto bytes = std::as_bytes(std::span(parts));
  const std::uint64_t shape[] = {2};
  const tensor_ref z{"z", codec::dtype::c64, shape, {}, 0, bytes};
  const auto p = dir_ / "c.safetensors";
  ASSERT_TRUE(save_safetensors(p, std::span(&z, 1), {}));
  const auto f = slurp(p);
  const auto n = wire::load<std::uint64_t>(f.data(), wire::byte_order::little);
  const std::string header(reinterpret_cast<const char*>(f.data() + 8), static_cast<std::size_t>(n));
  EXPECT_NE(header.find(R"("dtype":"C64")"), std::string::npos) << header;
  // Each part little-endian on its own, the real part first.
  EXPECT_EQ(wire::load<std::uint32_t>(f.data() + 8 + n + 4, wire::byte_order::little),
            std::bit_cast<std::uint32_t>(-2.5f));
  auto r = open(p);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->tensors()[0].dtype, codec::dtype::c64);
  EXPECT_EQ(r->get("z")->contiguous_copy(), std::vector<std::byte>(bytes.begin(), bytes.end()));
  for (const codec::dtype t : {codec::dtype::c32, codec::dtype::c128, codec::dtype::f8_e4m3fnuz}) {
    const std::uint64_t one[] = {1};
    const tensor_ref x{"x", t, one, {}, 0, bytes.first(codec::size_of(t))};
    const auto out = dir_ / "refused.safetensors";
    const auto w = save_safetensors(out, std::span(&x, 1), {});
    ASSERT_FALSE(w) << codec::name(t);
    EXPECT_EQ(w.error().code(), codec_errc::unknown_dtype);
    EXPECT_NE(w.error().what().find("tensor 'x': safetensors has no dtype " + std::string(codec::name(t))),
              std::string::npos)
        << w.error().what();
    EXPECT_FALSE(fs::exists(out));
  }
}

TEST_F(Safetensors, SharedStorageIsRefusedByDefaultNamingTheTiedTensors) {
  sample s;
  const auto refs = s.refs();
  const auto r = save_safetensors(dir_ / "x.safetensors", refs, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), checkpoint_errc::shared_storage);
  EXPECT_NE(r.error().context().find("encoder.embed.weight, decoder.out.weight, encoder.embed.column1"),
            std::string::npos)
      << r.error().context();
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors"));
}

TEST_F(Safetensors, AliasesRoundTripAsSharedStorage) {
  sample s;
  auto refs = s.refs();
  refs.erase(refs.begin() + 2);  // the strided view cannot be an alias
  const auto p = dir_ / "alias.safetensors";
  safetensors_options opt;
  opt.shared = safetensors_options::shared_policy::alias;
  opt.sync = false;
  ASSERT_TRUE(save_safetensors(p, refs, sample::metadata(), opt));
  auto r = open(p);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->metadata(), sample::metadata());  // the alias entry became a tensor
  const auto a = r->get("encoder.embed.weight");
  const auto b = r->get("decoder.out.weight");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->storage(), b->storage());
  EXPECT_EQ(b->contiguous_copy(), gather(refs[1]));

  // A view that differs from its base cannot be an alias.
  const auto all = s.refs();
  const auto e = save_safetensors(dir_ / "views.safetensors", all, {}, opt);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code(), checkpoint_errc::shared_storage);
}

TEST_F(Safetensors, ShortAliasNamesAsHuggingFaceWritesThem) {
  // save_model's convention, with names short enough to live inside the
  // string object (the reader once kept views of them across a reallocation).
  const auto p = make(R"({"__metadata__":{"format":"pt","lm_head":"wte","b":"wte"},)"
                      R"("wte":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                      8);
  auto r = open(p);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(r->tensors().size(), 3u);
  EXPECT_EQ(r->get("lm_head")->storage(), r->get("wte")->storage());
  EXPECT_EQ(r->get("b")->storage(), r->get("wte")->storage());
}

TEST_F(Safetensors, MalformedHeadersEachGetTheirOwnError) {
  const std::string t = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  EXPECT_EQ(open_error("{" + t + "}", 8), error_code());
  EXPECT_EQ(open_error("{" + t + "}   ", 8), error_code());  // space padding
  EXPECT_EQ(open_error("{}", 0), error_code());
  // The reference's cases.
  EXPECT_EQ(open_error("{" + t + "}", 4), errc::truncated);                   // MetadataIncompleteBuffer
  EXPECT_EQ(open_error("{" + t + "}", 12), errc::trailing_bytes);             // MetadataIncompleteBuffer
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
            checkpoint_errc::shape_size_mismatch);                             // TensorInvalidInfo
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       12),
            checkpoint_errc::bad_layout);                                      // InvalidOffset (overlap)
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
            checkpoint_errc::bad_layout);                                      // InvalidOffset (hole)
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8),
            checkpoint_errc::shape_overflow);                                  // ValidationOverflow
  EXPECT_EQ(open_error(R"({"t":{"dtype":"C128","shape":[1],"data_offsets":[0,16]}})", 16),
            codec_errc::unknown_dtype);
  EXPECT_EQ(open_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}, ", 8),
            checkpoint_errc::bad_json);                                        // InvalidHeaderDeserialization
  EXPECT_EQ(open_error("{\"\xFF\":1}", 0), checkpoint_errc::bad_utf8);        // InvalidHeader (UTF-8)
  EXPECT_EQ(open_error("{" + t + "," + t + "}", 8), errc::duplicate_key);
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
            errc::duplicate_key);
  EXPECT_EQ(open_error(R"({"__metadata__":{"a":"1","a":"2"}})", 0), errc::duplicate_key);
  EXPECT_EQ(open_error(R"({"__metadata__":{"a":1}})", 0), checkpoint_errc::bad_metadata);
  EXPECT_EQ(open_error(R"({"__metadata__":{"a":["x"]}})", 0), checkpoint_errc::bad_metadata);
  EXPECT_EQ(open_error(R"({"__metadata__":"x"})", 0), checkpoint_errc::bad_metadata);
  EXPECT_EQ(open_error(R"({"__metadata__":[]})", 0), checkpoint_errc::bad_metadata);
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[2]}})", 0), checkpoint_errc::bad_json);
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), checkpoint_errc::bad_json);
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8), checkpoint_errc::bad_json);
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", 8), checkpoint_errc::bad_json);
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), checkpoint_errc::bad_layout);
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551616]}})", 8),
            checkpoint_errc::bad_json);
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", 8),
            checkpoint_errc::bad_json);
  EXPECT_EQ(open_error(R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8), checkpoint_errc::bad_name);
  EXPECT_EQ(open_error("{/*c*/}", 0), checkpoint_errc::bad_json);
  limits lim;
  lim.max_dims = 1;
  EXPECT_EQ(open_error(R"({"t":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})", 8, lim), errc::limit_exceeded);
  lim = {};
  lim.max_tensors = 1;
  EXPECT_EQ(open_error("{" + t + R"(,"u":{"dtype":"U8","shape":[0],"data_offsets":[8,8]}})", 8, lim),
            errc::limit_exceeded);
}

TEST_F(Safetensors, HeaderLengthsThatLieAreCaughtBeforeAllocating) {
  const std::string h = "{}";
  EXPECT_EQ(open(make(h, 0, 100'000'001)).error().code(), checkpoint_errc::header_too_large);
  // Wraps a 32-bit size_t: 2^32 + 2 must not become 2 on armhf.
  limits unlimited;
  unlimited.max_header_bytes = UINT64_MAX;
  EXPECT_EQ(open(make(h, 0, (std::uint64_t{1} << 32) + 2), unlimited).error().code(), errc::truncated);
  EXPECT_EQ(open(make(h, 0, (std::uint64_t{1} << 32) + 2)).error().code(), checkpoint_errc::header_too_large);
  EXPECT_EQ(open(make(h, 0, 3)).error().code(), errc::truncated);
  EXPECT_EQ(open(make(h, 0, 0)).error().code(), checkpoint_errc::bad_json);
}

TEST_F(Safetensors, EveryTruncationOfASampleIsTruncated) {
  const auto good = slurp(fixtures / "f.safetensors");
  for (std::size_t len = 0; len < good.size(); ++len) {
    const auto p = dir_ / "cut.safetensors";
    spit(p, std::span(good).first(len));
    const auto r = open(p);
    ASSERT_FALSE(r) << len;
    // Cut inside the JSON, the length field still promises more: truncated.
    ASSERT_EQ(r.error().code(), errc::truncated) << "cut at " << len;
  }
}

TEST_F(Safetensors, FerryAndSafetensorsConvertBothWays) {
  sample s;
  auto refs = s.refs();
  refs.erase(refs.begin() + 1, refs.begin() + 3);  // no sharing
  const auto st = dir_ / "a.safetensors";
  safetensors_options opt;
  opt.sync = false;
  ASSERT_TRUE(save_safetensors(st, refs, sample::metadata(), opt));
  auto r = open(st);
  ASSERT_TRUE(r);
  std::vector<tensor> held;
  std::vector<tensor_ref> back;
  for (const auto& info : r->tensors()) held.push_back(r->get(info).value());
  for (const auto& t : held) back.push_back(t.ref());
  write_options wo;
  wo.order = wire::byte_order::big;
  wo.sync = false;
  ASSERT_TRUE(save(dir_ / "b.ferry", back, r->metadata(), wo));
  auto f = open(dir_ / "b.ferry");
  ASSERT_TRUE(f) << f.error();
  for (const auto& ref : refs) EXPECT_EQ(f->get(ref.name)->contiguous_copy(), gather(ref)) << ref.name;
}

}  // namespace
}  // namespace ferry::checkpoint::testing
