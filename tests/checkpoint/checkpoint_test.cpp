// The .ferry format: round trips, sharing, laziness, atomic commits and the
// structural errors of hand-made hostile files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <functional>
#include <numeric>
#include <optional>

#include "ferry/checkpoint/ferry/layout.h"
#include "ferry/codec/crc32c.h"
#include "helpers.h"
#include "pt_builder.h"

namespace ferry::checkpoint::testing {
namespace {

using wire::byte_order;

class Checkpoint : public scratch_dir {};

TEST_F(Checkpoint, SampleRoundTripsInBothOrders) {
  for (const auto order : {byte_order::little, byte_order::big}) {
    const auto p = dir_ / "sample.ferry";
    write_sample(p, order);
    auto r = open(p);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->format(), file_format::ferry);
    EXPECT_EQ(r->order(), order);
    EXPECT_EQ(r->alignment(), 64u);
    expect_sample(*r);
    EXPECT_TRUE(r->verify());
  }
}

TEST_F(Checkpoint, EveryDtypeRoundTrips) {
  const auto p = dir_ / "dtypes.ferry";
  std::vector<std::vector<std::byte>> data;
  std::vector<std::string> names;
  std::vector<tensor_ref> refs;
  const std::uint64_t shape[] = {3};
  for (const auto t : codec::all_dtypes) {
    std::vector<std::byte> d(3 * codec::size_of(t));
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<std::byte>(0x11 * (i + 1) + codec::code(t));
    data.push_back(std::move(d));
    names.push_back(std::string(codec::name(t)));
  }
  for (std::size_t i = 0; i < data.size(); ++i) {
    refs.push_back({names[i], codec::all_dtypes[i], shape, {}, 0, data[i]});
  }
  for (const auto order : {byte_order::little, byte_order::big}) {
    write_options opt;
    opt.order = order;
    opt.sync = false;
    ASSERT_TRUE(save(p, refs, {}, opt));
    auto r = open(p);
    ASSERT_TRUE(r) << r.error();
    for (std::size_t i = 0; i < refs.size(); ++i) {
      auto t = r->get(names[i]);
      ASSERT_TRUE(t) << t.error();
      EXPECT_EQ(t->dtype(), codec::all_dtypes[i]);
      const auto b = t->bytes();
      EXPECT_TRUE(std::equal(b.begin(), b.end(), data[i].begin(), data[i].end())) << names[i];
    }
  }
}

TEST_F(Checkpoint, ForeignOrderIsStoredSwappedAndNativeIsZeroCopy) {
  const auto p = dir_ / "order.ferry";
  const std::vector<std::byte> w = bytes_of(std::vector<float>{6.342e-5f});
  const std::uint64_t shape[] = {1};
  const tensor_ref ref{"x", codec::dtype::f32, shape, {}, 0, w};
  for (const auto order : {byte_order::little, byte_order::big}) {
    write_options opt;
    opt.order = order;
    opt.sync = false;
    ASSERT_TRUE(save(p, std::span(&ref, 1), {}, opt));
    const auto file = slurp(p);
    // The worked example: 6.342e-5 is 0x3885005A.
    const auto expect = order == byte_order::little ? std::vector<std::uint8_t>{0x5A, 0x00, 0x85, 0x38}
                                                    : std::vector<std::uint8_t>{0x38, 0x85, 0x00, 0x5A};
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(std::to_integer<std::uint8_t>(file[64 + i]), expect[i]);
    auto r = open(p);
    ASSERT_TRUE(r);
    auto t = r->get("x");
    ASSERT_TRUE(t);
    float back = 0;
    std::memcpy(&back, t->bytes().data(), 4);
    EXPECT_EQ(back, 6.342e-5f);
  }
}

TEST_F(Checkpoint, LargeStoragesMapWholeBlocksButExposeOnlyTheirBytes) {
  // Storages of 2 MiB and more are mapped from 2 MiB boundaries of the file
  // (mapped_file.cpp, mapped_file::map): their neighbours' bytes are in the mapping but
  // never in the storage, copy-on-write or not, in either order.
  const auto p = dir_ / "large.ferry";
  std::vector<std::uint16_t> head(100), big((std::size_t{5} << 19) + 6), tail(50);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint16_t>(i * 40503u);
  for (std::size_t i = 0; i < head.size(); ++i) head[i] = tail[i / 2] = 0xABCD;
  const std::uint64_t hs[] = {head.size()}, bs[] = {big.size()}, ts[] = {tail.size()};
  const tensor_ref refs[] = {{"head", codec::dtype::u16, hs, {}, 0, std::as_bytes(std::span(head))},
                             {"big", codec::dtype::u16, bs, {}, 0, std::as_bytes(std::span(big))},
                             {"tail", codec::dtype::u16, ts, {}, 0, std::as_bytes(std::span(tail))}};
  for (const auto order : {byte_order::little, byte_order::big}) {
    write_options wo;
    wo.order = order;
    ASSERT_TRUE(save(p, refs, {}, wo));
    const auto file = slurp(p);
    for (const bool cow : {false, true}) {
      read_options ro;
      ro.copy_on_write = cow;
      auto r = reader::open(p, ro);
      ASSERT_TRUE(r) << r.error();
      auto all = r->get_all();
      ASSERT_TRUE(all) << all.error();
      const auto b = (*all)[1].storage_bytes();
      ASSERT_EQ(b.size(), big.size() * 2);
      EXPECT_EQ(std::memcmp(b.data(), big.data(), b.size()), 0) << "order " << wire::name(order) << " cow " << cow;
      const auto m = (*all)[1].storage()->mutable_bytes();
      EXPECT_EQ(m.size(), cow ? b.size() : 0u);
      if (cow) std::memset(m.data(), 0x11, m.size());
      for (const std::size_t i : {std::size_t{0}, std::size_t{2}}) {
        const auto& small = i == 0 ? head : tail;
        const auto s = (*all)[i].storage_bytes();
        ASSERT_EQ(s.size(), small.size() * 2);
        EXPECT_EQ(std::memcmp(s.data(), small.data(), s.size()), 0);
      }
      EXPECT_EQ(slurp(p), file);
    }
  }
}

TEST_F(Checkpoint, StoragesAreAlignedAsRecorded) {
  for (const std::uint32_t a : {64u, 4096u, 65536u}) {
    const auto p = dir_ / "aligned.ferry";
    write_sample(p, wire::host_order, a);
    auto r = open(p);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->alignment(), a);
    for (const auto& s : r->storages()) EXPECT_EQ(s.offset % a, 0u);
    auto t = r->get("encoder.embed.weight");
    ASSERT_TRUE(t);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t->bytes().data()) % 64, 0u);
    EXPECT_TRUE(r->verify());
  }
}

TEST_F(Checkpoint, TiedTensorsAreStoredOnce) {
  const auto p = dir_ / "tied.ferry";
  write_sample(p, wire::host_order);
  auto r = open(p);
  ASSERT_TRUE(r);
  // weight, step, empty, half, bytes: the tied twin and the view add none.
  EXPECT_EQ(r->storages().size(), 5u);
  const auto* w = r->find("encoder.embed.weight");
  ASSERT_NE(w, nullptr);
  auto shared = r->shared_with(*w);
  std::sort(shared.begin(), shared.end());
  EXPECT_EQ(shared, (std::vector<std::string>{"decoder.out.weight", "encoder.embed.column1"}));
}

TEST_F(Checkpoint, AReusedBufferIsNotSharing) {
  // Streaming writers fill one staging buffer per tensor: same address,
  // different data. Each add() is its own storage.
  const auto p = dir_ / "staged.ferry";
  std::vector<std::uint32_t> staging(4);
  const std::uint64_t shape[] = {4};
  {
    auto w = writer::create(p);
    ASSERT_TRUE(w);
    for (std::uint32_t i = 0; i < 3; ++i) {
      std::fill(staging.begin(), staging.end(), i);
      const std::string name = "t" + std::to_string(i);
      ASSERT_TRUE(w->add({name, codec::dtype::u32, shape, {}, 0, std::as_bytes(std::span(staging))}));
    }
    ASSERT_TRUE(w->commit());
  }
  auto r = open(p);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->storages().size(), 3u);
  for (std::uint32_t i = 0; i < 3; ++i) {
    auto t = r->get("t" + std::to_string(i));
    ASSERT_TRUE(t);
    std::uint32_t v = 99;
    std::memcpy(&v, t->bytes().data() + 12, 4);
    EXPECT_EQ(v, i);
  }
}

TEST_F(Checkpoint, TenThousandSmallTensors) {
  const auto p = dir_ / "many.ferry";
  constexpr std::size_t n = 10000;
  std::vector<std::uint32_t> values(n);
  std::iota(values.begin(), values.end(), 0u);
  const std::uint64_t shape[] = {1};
  {
    write_options opt;
    opt.sync = false;
    auto w = writer::create(p, opt);
    ASSERT_TRUE(w);
    for (std::size_t i = 0; i < n; ++i) {
      const auto bytes = std::as_bytes(std::span(&values[i], 1));
      const std::string name = "layer." + std::to_string(i) + ".bias";
      ASSERT_TRUE(w->add({name, codec::dtype::u32, shape, {}, 0, bytes}));
    }
    ASSERT_TRUE(w->set_metadata("count", std::to_string(n)));
    ASSERT_TRUE(w->commit());
  }
  auto r = open(p);
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->tensors().size(), n);
  for (std::size_t i = 0; i < n; i += 997) {
    auto t = r->get("layer." + std::to_string(i) + ".bias");
    ASSERT_TRUE(t);
    std::uint32_t v = 0;
    std::memcpy(&v, t->bytes().data(), 4);
    EXPECT_EQ(v, i);
  }
  EXPECT_EQ(r->metadata().at("count"), "10000");
  EXPECT_TRUE(r->verify());
}

TEST_F(Checkpoint, OpenIsLazyAndChecksEachStorageWhenFetched) {
  const auto p = dir_ / "lazy.ferry";
  write_sample(p, wire::host_order);
  // Corrupt the bf16 storage: opening and fetching other tensors still works.
  auto file = slurp(p);
  std::uint64_t half_offset = 0;
  {
    auto r = open(p);
    ASSERT_TRUE(r);
    half_offset = r->storages()[r->find("half")->storage].offset;
  }
  file[half_offset] ^= std::byte{1};
  spit(p, file);
  auto r = open(p);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->bytes_loaded(), 0u);
  ASSERT_TRUE(r->get("step"));
  EXPECT_EQ(r->bytes_loaded(), 8u);
  const auto bad = r->get("half");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), errc::checksum_mismatch);
  EXPECT_EQ(bad.error().what(), p.string() + ": tensor 'half': CRC32C does not match the bytes it covers");
  const auto v = r->verify();
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), errc::checksum_mismatch);
  for (const unsigned threads : {1u, 2u, 8u}) {
    const auto all = open(p)->get_all(threads);
    ASSERT_FALSE(all);
    EXPECT_EQ(all.error().context(), p.string() + ": tensor 'half'");
  }
}

TEST_F(Checkpoint, GetAllLoadsEveryTensorWithSharing) {
  const auto p = dir_ / "all.ferry";
  write_sample(p, byte_order::big);
  for (const unsigned threads : {0u, 1u, 3u}) {
    auto r = open(p);
    ASSERT_TRUE(r);
    auto all = r->get_all(threads);
    ASSERT_TRUE(all) << all.error();
    ASSERT_EQ(all->size(), r->tensors().size());
    sample s;
    const auto refs = s.refs();
    for (std::size_t i = 0; i < refs.size(); ++i) {
      EXPECT_EQ((*all)[i].name(), refs[i].name);
      EXPECT_EQ((*all)[i].contiguous_copy(), gather(refs[i]));
    }
    EXPECT_EQ((*all)[0].storage(), (*all)[1].storage());
    EXPECT_EQ((*all)[0].storage(), r->get("encoder.embed.column1")->storage());
  }
}

TEST_F(Checkpoint, ErrorsNameTheFileTheTensorAndTheOsReason) {
  const auto missing = open(dir_ / "nope.ferry");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().what(), (dir_ / "nope.ferry").string() + ": No such file or directory");

  const auto p = dir_ / "s.ferry";
  write_sample(p, wire::host_order);
  auto r = open(p);
  ASSERT_TRUE(r);
  const auto nf = r->get("no.such");
  ASSERT_FALSE(nf);
  EXPECT_EQ(nf.error().code(), checkpoint_errc::tensor_not_found);
  EXPECT_EQ(nf.error().context(), p.string() + ": tensor 'no.such'");
}

TEST_F(Checkpoint, WriterRejectsBadTensorsAndStaysUsable) {
  const auto p = dir_ / "w.ferry";
  write_options opt;
  opt.sync = false;
  auto w = writer::create(p, opt);
  ASSERT_TRUE(w);
  const std::vector<std::byte> four(16);
  const std::uint64_t shape[] = {4};
  const std::uint64_t too_long[] = {5};
  const std::uint64_t huge[] = {UINT64_MAX / 2, 3};
  const std::uint64_t strides[] = {1, 1};
  const auto code = [&](const tensor_ref& t) { return w->add(t).error().code(); };
  EXPECT_EQ(code({"", codec::dtype::f32, shape, {}, 0, four}), checkpoint_errc::bad_name);
  EXPECT_EQ(code({"bad\xC0\xAF", codec::dtype::f32, shape, {}, 0, four}), checkpoint_errc::bad_name);
  EXPECT_EQ(code({"x", codec::dtype::f32, too_long, {}, 0, four}), checkpoint_errc::view_out_of_bounds);
  EXPECT_EQ(code({"x", codec::dtype::f32, shape, {}, 1, four}), checkpoint_errc::view_out_of_bounds);
  EXPECT_EQ(code({"x", codec::dtype::f32, huge, strides, 0, four}), checkpoint_errc::shape_overflow);
  EXPECT_EQ(code({"x", codec::dtype::f32, shape, strides, 0, four}), errc::bad_value);
  const auto id = w->add({"x", codec::dtype::f32, shape, {}, 0, four});
  ASSERT_TRUE(id);
  EXPECT_EQ(code({"x", codec::dtype::f32, shape, {}, 0, four}), errc::duplicate_key);
  const auto shared = [&](const tensor_ref& t, storage_id s) { return w->add(t, s).error().code(); };
  EXPECT_EQ(shared({"y", codec::dtype::f64, {}, {}, 0, {}}, *id), checkpoint_errc::element_size_mismatch);
  EXPECT_EQ(shared({"y", codec::dtype::f32, {}, {}, 0, {}}, storage_id{7}), checkpoint_errc::bad_storage_reference);
  EXPECT_EQ(shared({"y", codec::dtype::f32, {}, {}, 4, {}}, *id), checkpoint_errc::view_out_of_bounds);
  EXPECT_EQ(w->add({"y", codec::dtype::i32, {}, {}, 3, {}}, *id).value(), *id);  // the last element, as int32
  EXPECT_EQ(w->set_metadata("", "v").error().code(), checkpoint_errc::bad_metadata);
  ASSERT_TRUE(w->commit());
  auto r = open(p);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->tensors().size(), 2u);
  EXPECT_EQ(r->storages().size(), 1u);
}

TEST_F(Checkpoint, BadAlignmentIsRefusedWhenWriting) {
  for (const std::uint32_t a : {0u, 32u, 96u, 1u << 31}) {
    write_options opt;
    opt.alignment = a;
    const auto w = writer::create(dir_ / "a.ferry", opt);
    ASSERT_FALSE(w);
    EXPECT_EQ(w.error().code(), checkpoint_errc::bad_alignment);
  }
}

// --- atomic commit --------------------------------------------------------

TEST_F(Checkpoint, UncommittedWriterLeavesTheOldFileAndNoTemporary) {
  const auto p = dir_ / "m.ferry";
  write_sample(p, wire::host_order);
  const auto before = slurp(p);
  ::chmod(p.c_str(), 0640);
  {
    auto w = writer::create(p);
    ASSERT_TRUE(w);
    const std::vector<std::byte> d(1024);
    const std::uint64_t shape[] = {256};
    ASSERT_TRUE(w->add({"x", codec::dtype::f32, shape, {}, 0, d}));
  }  // destroyed without commit()
  EXPECT_EQ(slurp(p), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  // A commit keeps the target's permissions.
  write_sample(p, byte_order::big);
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST_F(Checkpoint, NextCommitRemovesTemporariesOfKilledWriters) {
  const auto p = dir_ / "m.ferry";
  const auto stale = dir_ / ".m.ferry.ferry-tmp.12345.00000000deadbeef";
  const auto other = dir_ / ".other.ferry.ferry-tmp.12345.00000000deadbeef";
  spit(stale, std::vector<std::byte>(100));
  spit(other, std::vector<std::byte>(100));
  write_sample(p, wire::host_order);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(other));  // another target's temporary is not ours
}

TEST_F(Checkpoint, ALiveWritersTemporaryIsLeftAlone) {
  const auto p = dir_ / "m.ferry";
  auto first = writer::create(p);
  ASSERT_TRUE(first);
  write_sample(p, wire::host_order);  // a second writer commits meanwhile
  ASSERT_TRUE(first->commit());       // the first one's temporary survived
  auto r = open(p);
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(r->tensors().empty());
}

// --- hand-made hostile files ------------------------------------------------

// The sample file with its manifest and trailer rewritten after `tamper`
// changed the manifest (and `alignment`, if given, in header and trailer).
std::vector<std::byte> tampered(const fs::path& sample_path, const std::function<void(manifest&)>& tamper,
                                std::optional<std::uint32_t> alignment = {}) {
  auto file = slurp(sample_path);
  const auto t = detail::decode_trailer(std::span(file).last<trailer_size>());
  EXPECT_TRUE(t);
  const auto o = t->header.order;
  auto m = graph::read<manifest>(std::span(file).subspan(t->manifest_offset, t->manifest_size)).value();
  tamper(m);
  const auto bytes = graph::write(m, detail::manifest_options({}, o)).value();
  file.resize(t->manifest_offset);
  file.insert(file.end(), bytes.begin(), bytes.end());
  detail::trailer_fields nt = *t;
  nt.manifest_size = bytes.size();
  nt.file_size = file.size() + trailer_size;
  nt.manifest_crc = codec::crc32c(bytes);
  if (alignment) {
    nt.header.alignment = *alignment;
    wire::store(*alignment, file.data() + 12, o);
  }
  const auto tr = detail::encode_trailer(nt);
  file.insert(file.end(), tr.begin(), tr.end());
  return file;
}

class Hostile : public Checkpoint {
 protected:
  void SetUp() override {
    Checkpoint::SetUp();
    sample_ = dir_ / "sample.ferry";
    write_sample(sample_, wire::host_order);
  }
  error_code open_error(std::span<const std::byte> file) {
    const auto p = dir_ / "bad.ferry";
    spit(p, file);
    const auto r = open(p);
    return r ? error_code() : r.error().code();
  }
  fs::path sample_;
};

TEST_F(Hostile, UntamperedRebuildOpens) {
  EXPECT_EQ(open_error(tampered(sample_, [](manifest&) {})), error_code());
}

TEST_F(Hostile, AlignmentZeroNotAPowerOfTwoOrHuge) {
  for (const std::uint32_t a : {0u, 1u, 32u, 96u, 1000u, 1u << 31}) {
    EXPECT_EQ(open_error(tampered(sample_, [](manifest&) {}, a)), checkpoint_errc::bad_alignment) << a;
  }
}

TEST_F(Hostile, ViewPastItsStorage) {
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.tensors[0].offset = 1; })),
            checkpoint_errc::view_out_of_bounds);
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.tensors[2].strides = {5}; })),
            checkpoint_errc::view_out_of_bounds);
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.tensors[2].strides = {UINT64_MAX}; })),
            checkpoint_errc::shape_overflow);
}

TEST_F(Hostile, BroadcastViewsMustBeAddressable) {
  // Stride 0 (torch's expand) legitimately describes more elements than the
  // storage holds. The file opens; fetching needs a contiguous copy to fit
  // this machine's size_t.
  const auto file = tampered(sample_, [](manifest& m) {
    m.tensors[2].shape = {std::uint64_t{1} << 33};
    m.tensors[2].strides = {0};
  });
  EXPECT_EQ(open_error(file), error_code());
  auto r = open(dir_ / "bad.ferry");
  ASSERT_TRUE(r);
  if (sizeof(std::size_t) == 4) {
    EXPECT_EQ(r->get("encoder.embed.column1").error().code(), checkpoint_errc::storage_too_large);
    EXPECT_EQ(r->get_all().error().code(), checkpoint_errc::storage_too_large);
  } else {
    EXPECT_TRUE(r->get("encoder.embed.column1"));
  }
}

TEST_F(Hostile, StorageThatDoesNotExist) {
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.tensors[1].storage = std::make_shared<storage_record>(); })),
            checkpoint_errc::bad_storage_reference);
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.tensors[1].storage = nullptr; })),
            checkpoint_errc::bad_storage_reference);
}

TEST_F(Hostile, NamesAndMetadataMustBeUtf8) {
  for (const char* bad : {"\xFF", "a\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82", ""}) {
    EXPECT_EQ(open_error(tampered(sample_, [&](manifest& m) { m.tensors[3].name = bad; })), checkpoint_errc::bad_name);
    EXPECT_EQ(open_error(tampered(sample_, [&](manifest& m) { m.metadata["x"] = bad; })),
              *bad ? error_code(checkpoint_errc::bad_metadata) : error_code());
  }
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.metadata["\xFF"] = "v"; })), checkpoint_errc::bad_metadata);
}

TEST_F(Hostile, LayoutRules) {
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.tensors[4].name = m.tensors[3].name; })),
            errc::duplicate_key);
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.storages[1]->offset += 64; })),
            checkpoint_errc::bad_layout);
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.storages[4]->nbytes += 1000; })),
            checkpoint_errc::bad_layout);
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.storages.push_back(m.storages[0]); })),
            checkpoint_errc::bad_layout);
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.storages[0]->dtype = 99; })), codec_errc::unknown_dtype);
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.tensors[0].dtype = codec::code(codec::dtype::f64); })),
            checkpoint_errc::element_size_mismatch);
  EXPECT_EQ(open_error(tampered(sample_, [](manifest& m) { m.storages[0]->nbytes = 6; })),
            checkpoint_errc::shape_size_mismatch);
}

TEST_F(Hostile, LimitsAreEnforced) {
  const auto p = dir_ / "x.ferry";
  write_sample(p, wire::host_order);
  limits lim;
  lim.max_tensors = 3;
  EXPECT_EQ(open(p, lim).error().code(), errc::limit_exceeded);
  lim = {};
  lim.max_dims = 1;
  EXPECT_EQ(open(p, lim).error().code(), errc::limit_exceeded);
  lim = {};
  lim.max_manifest_bytes = 100;
  EXPECT_EQ(open(p, lim).error().code(), errc::limit_exceeded);
  lim = {};
  lim.max_name_bytes = 5;
  EXPECT_EQ(open(p, lim).error().code(), checkpoint_errc::bad_name);
}

TEST_F(Hostile, TheWrongKindOfFileIsNamedAsSuch) {
  const std::string lfs =
      "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
      "size 12345\n";
  const std::string html = "<!DOCTYPE html>\n<html><head><title>404</title></head><body>Not found</body></html>\n";
  zip_builder archive;  // a zip, but not of a .pt file
  archive.add("docs/readme.txt", "hello");
  const auto zip_bytes = archive.build();
  const std::string zip(reinterpret_cast<const char*>(zip_bytes.data()), zip_bytes.size());
  for (const auto& text : {lfs, html, zip}) {
    const auto p = dir_ / "wrong.ferry";
    spit(p, std::as_bytes(std::span(text)));
    const auto r = open(p);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), checkpoint_errc::not_a_checkpoint) << text.substr(0, 10);
    EXPECT_EQ(r.error().what().rfind(p.string() + ": ", 0), 0u) << r.error().what();
    EXPECT_TRUE(r.error().what().ends_with("neither a ferry checkpoint or set, a safetensors, PyTorch .pt, NumPy .npy/.npz nor GGUF file"))
        << r.error().what();
  }
  EXPECT_EQ(open(dir_).error().sys_errno(), EISDIR);
}

}  // namespace
}  // namespace ferry::checkpoint::testing
