// PyTorch .pt files built byte by byte (pt_builder.h): the layouts torch.save
// and other zip writers produce, and hostile files, each refused with its
// exact error. Runs on every architecture.
#include <chrono>
#include <random>

#include "helpers.h"
#include "pt_builder.h"

namespace ferry::checkpoint::testing {
namespace {

// The time limits of the issue hold at native speed; qemu-user and the
// sanitizers run the same checks without them.
#ifdef FERRY_TEST_NATIVE_SPEED
constexpr int slowdown = 1;
#else
constexpr int slowdown = 50;
#endif

class Pytorch : public bytes_files {
 protected:
  static std::vector<float> floats(const tensor& t) {
    std::vector<float> v(t.info().numel());
    const auto bytes = t.contiguous_copy();
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
};

TEST_F(Pytorch, StateDictAsTorchLaysItOut) {
  auto r = open_bytes(pt_zip(state_dict_pickle()).build());
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->format(), file_format::pytorch);
  EXPECT_EQ(r->order(), wire::byte_order::little);
  EXPECT_EQ(r->alignment(), 64u);
  ASSERT_EQ(r->tensors().size(), 1u);
  auto w = r->get("w");
  ASSERT_TRUE(w) << w.error();
  EXPECT_EQ(floats(*w), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(r->metadata().at("pytorch.byteorder"), "absent");
  ASSERT_TRUE(r->storages()[0].crc32.has_value());
  EXPECT_TRUE(r->verify()) << r->verify().error();
}

TEST_F(Pytorch, PlainZipWithoutZip64PaddingOrDescriptors) {
  auto z = pt_zip(state_dict_pickle());
  z.zip64 = false;
  z.align = false;
  for (auto& rec : z.records) rec.flags = 0;
  auto r = open_bytes(z.build());
  ASSERT_TRUE(r) << r.error();
  auto w = r->get("w");
  ASSERT_TRUE(w) << w.error();
  EXPECT_EQ(floats(*w), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(r->verify());
}

TEST_F(Pytorch, ByteOrderFromTheRecordOrTheOption) {
  auto z = pt_zip(state_dict_pickle());
  // The same values stored big-endian.
  std::vector<std::byte> big(24);
  for (std::size_t i = 0; i < 6; ++i) wire::store<float>(static_cast<float>(i), big.data() + 4 * i, wire::byte_order::big);
  z.records[1].data = big;
  z.add("archive/byteorder", "big");
  auto r = open_bytes(z.build());
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->order(), wire::byte_order::big);
  EXPECT_EQ(r->metadata().at("pytorch.byteorder"), "big");
  EXPECT_EQ(floats(*r->get("w")), (std::vector<float>{0, 1, 2, 3, 4, 5}));

  // No record: the option says what the writer's order was.
  z.records.pop_back();
  read_options opt;
  opt.pytorch_order = wire::byte_order::big;
  auto o = open_bytes(z.build(), opt);
  ASSERT_TRUE(o) << o.error();
  EXPECT_EQ(floats(*o->get("w")), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(o->metadata().at("pytorch.byteorder"), "absent");

  z.add("archive/byteorder", "middle");
  refused(z.build(), errc::bad_byte_order);
}

TEST_F(Pytorch, CopyOnWriteStoragesNeverReachTheFile) {
  const auto bytes = pt_zip(state_dict_pickle()).build();
  const fs::path p = put(bytes);
  read_options opt;
  opt.copy_on_write = true;
  auto r = reader::open(p, opt);
  ASSERT_TRUE(r) << r.error();
  auto w = r->get("w");
  ASSERT_TRUE(w);
  const auto m = w->storage()->mutable_bytes();
  ASSERT_EQ(m.size(), 24u);
  std::memset(m.data(), 0x7f, m.size());
  EXPECT_EQ(w->storage_bytes()[0], std::byte{0x7f});
  EXPECT_EQ(slurp(p), bytes);
  auto plain = reader::open(p);
  ASSERT_TRUE(plain);
  EXPECT_TRUE(plain->get("w")->storage()->mutable_bytes().empty());
}

TEST_F(Pytorch, UntypedStoragesCountBytes) {
  // torch >= 2.1's uint16/32/64 and float8: _rebuild_tensor_v3 over an
  // UntypedStorage whose numel is in bytes; the dtype is the last argument.
  pickle_builder p;
  p.proto().empty_dict().mark().str("u32").tensor_v3("uint32", "0", 24, 1, {2, 2}, {1, 2}).setitems().stop();
  auto r = open_bytes(pt_zip(p).build());
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("u32");
  ASSERT_TRUE(t) << t.error();
  EXPECT_EQ(t->info().dtype, codec::dtype::u32);
  const auto bytes = t->contiguous_copy();  // elements 1, 3, 2, 4: the bits of those floats
  const float want[] = {1, 3, 2, 4};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wire::load<std::uint32_t>(bytes.data() + 4 * i, wire::host_order), std::bit_cast<std::uint32_t>(want[i]));
  }

  pickle_builder wrong_count;
  wrong_count.proto().empty_dict().mark().str("u").tensor_v3("uint16", "0", 12, 0, {6}, {1}).setitems().stop();
  refused(pt_zip(wrong_count).build(), checkpoint_errc::shape_size_mismatch);

  pickle_builder odd;  // 22 bytes are not whole uint32s
  odd.proto().empty_dict().mark().str("u").tensor_v3("uint32", "0", 22, 0, {5}, {1}).setitems().stop();
  auto z = pt_zip(odd);
  z.records[1].data.resize(22);
  refused(z.build(), checkpoint_errc::shape_size_mismatch);

  pickle_builder mixed;  // one storage read as 2- and 4-byte elements
  mixed.proto().empty_dict().mark().str("a").tensor_v3("uint16", "0", 24, 0, {12}, {1});
  mixed.str("b").tensor_v3("uint32", "0", 24, 0, {6}, {1}).setitems().stop();
  const std::string m = refused(pt_zip(mixed).build(), checkpoint_errc::element_size_mismatch).what();
  EXPECT_NE(m.find("tensor 'b'"), std::string::npos) << m;

  pickle_builder typed;  // v3 takes untyped storages only
  typed.proto().empty_dict().mark().str("u").tensor_v3("uint32", "0", 6, 0, {6}, {1}, "FloatStorage").setitems().stop();
  refused(pt_zip(typed).build(), checkpoint_errc::pickle_malformed);
}

TEST_F(Pytorch, SparseMemoSlotIsCheap) {
  pickle_builder ok;
  ok.proto().empty_dict().op('r').le<std::uint32_t>(0xFFFFFFF0).mark().str("w");
  ok.tensor("FloatStorage", "0", 6, 0, {2, 3}, {3, 1}).setitems().stop();
  auto r = open_bytes(pt_zip(ok).build());
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->tensors().size(), 1u);
}

// --- hostile pickles -------------------------------------------------------

TEST_F(Pytorch, ForbiddenGlobalsStopAtOnce) {
  pickle_builder sys;
  sys.proto().global("posix", "system").str("touch pwned").op(0x85).reduce().stop();
  const std::string line = refused(pt_zip(sys).build(), checkpoint_errc::pickle_forbidden_global).what();
  EXPECT_NE(line.find("m.pt: data.pkl offset 2: global 'posix.system'"), std::string::npos) << line;

  pickle_builder eval;
  eval.proto().global("builtins", "eval").str("1").op(0x85).reduce().stop();
  refused(pt_zip(eval).build(), checkpoint_errc::pickle_forbidden_global);

  pickle_builder getattr;
  getattr.proto().global("__builtin__", "getattr").mark().str("x").str("y").tuple().reduce().stop();
  refused(pt_zip(getattr).build(), checkpoint_errc::pickle_forbidden_global);

  pickle_builder popen;  // protocol 4: the module and name come from the stack
  popen.proto(4).op(0x8c).raw({10}).raw("subprocess").op(0x8c).raw({5}).raw("Popen").op(0x93).stop();
  const std::string l2 = refused(pt_zip(popen).build(), checkpoint_errc::pickle_forbidden_global).what();
  EXPECT_NE(l2.find("global 'subprocess.Popen'"), std::string::npos) << l2;

  EXPECT_FALSE(fs::exists(dir_ / "pwned"));
}

TEST_F(Pytorch, InstanceBuildingOpcodesAreRefused) {
  pickle_builder inst;
  inst.proto().mark().op('i').raw("os\nsystem\n").stop();
  refused(pt_zip(inst).build(), checkpoint_errc::pickle_bad_opcode);
  pickle_builder obj;
  obj.proto().mark().global("collections", "OrderedDict").op('o').stop();
  const std::string line = refused(pt_zip(obj).build(), checkpoint_errc::pickle_bad_opcode).what();
  EXPECT_NE(line.find("OBJ"), std::string::npos) << line;
}

TEST_F(Pytorch, ContainersAreUsedOnlyAsTheirKind) {
  pickle_builder setitem_on_list;
  setitem_on_list.proto().empty_list().str("k").str("v").setitem().stop();
  refused(pt_zip(setitem_on_list).build(), checkpoint_errc::pickle_malformed);
  pickle_builder append_on_dict;
  append_on_dict.proto().empty_dict().str("v").append().stop();
  refused(pt_zip(append_on_dict).build(), checkpoint_errc::pickle_malformed);
  pickle_builder unset;
  unset.proto().binget(7).stop();
  refused(pt_zip(unset).build(), checkpoint_errc::pickle_malformed);
  pickle_builder build_on_list;
  build_on_list.proto().empty_list().empty_dict().op('b').stop();
  refused(pt_zip(build_on_list).build(), checkpoint_errc::pickle_malformed);
  pickle_builder no_stop;
  no_stop.proto().empty_dict();
  refused(pt_zip(no_stop).build(), errc::truncated);
  pickle_builder two_values;
  two_values.proto().empty_dict().empty_dict().stop();
  refused(pt_zip(two_values).build(), checkpoint_errc::pickle_malformed);
}

TEST_F(Pytorch, AHundredThousandMarks) {
  pickle_builder p;
  p.proto();
  for (int i = 0; i < 100'000; ++i) p.mark();
  p.stop();
  refused(pt_zip(p).build(), errc::depth_exceeded);
}

// Ends a dict of "l0" (memo slot 0) with "l1".."l<levels>": l(k) = [l(k-1)] * 10.
std::vector<std::byte> tenfold(pickle_builder& p, std::uint8_t levels) {
  for (std::uint8_t k = 1; k <= levels; ++k) {
    p.str("l" + std::to_string(k)).empty_list().binput(k).mark();
    for (int i = 0; i < 10; ++i) p.binget(static_cast<std::uint8_t>(k - 1));
    p.op('e');
  }
  p.setitems().stop();
  return pt_zip(p).build();
}

TEST_F(Pytorch, BillionLaughsIsRefusedQuickly) {
  // l0 = []: l10 written out would be 10^10 lists.
  pickle_builder p;
  p.proto().empty_dict().mark().str("l0").empty_list().binput(0);
  const auto bytes = tenfold(p, 10);
  const auto start = std::chrono::steady_clock::now();
  refused(bytes, errc::limit_exceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100 * slowdown));
}

TEST_F(Pytorch, DictsInsideTensorFreeListsCountTheirKeys) {
  // l0 = [{60 KB key: True}]: l6 as JSON would be a million copies of the
  // key, 60 GB of text.
  pickle_builder p;
  p.proto().empty_dict().mark().str("l0").empty_list().binput(0);
  p.empty_dict().str(std::string(60'000, 'k')).boolean(true).setitem().append();
  const auto bytes = tenfold(p, 6);
  const auto start = std::chrono::steady_clock::now();
  refused(bytes, errc::limit_exceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100 * slowdown));
}

TEST_F(Pytorch, ACycleIsRefused) {
  pickle_builder p;  // d = {}; d['self'] = [d]
  p.proto().empty_dict().binput(0).str("self").empty_list().binget(0).append().setitem().stop();
  refused(pt_zip(p).build(), checkpoint_errc::pickle_malformed);
}

TEST_F(Pytorch, LengthsAreCheckedBeforeAllocating) {
  pickle_builder p;
  p.proto().op('X').le<std::uint32_t>(0xFFFFFFFF).raw(std::string(1000, 'a'));
  refused(pt_zip(p).build(), errc::truncated);
}

TEST_F(Pytorch, StoragesMustMatchTheirRecords) {
  pickle_builder missing;
  missing.proto().empty_dict().mark().str("w").tensor("FloatStorage", "7", 6, 0, {2, 3}, {3, 1}).setitems().stop();
  const std::string line = refused(pt_zip(missing).build(), checkpoint_errc::record_not_found).what();
  EXPECT_NE(line.find("tensor 'w': record 'archive/data/7'"), std::string::npos) << line;

  pickle_builder too_many;
  too_many.proto().empty_dict().mark().str("w").tensor("FloatStorage", "0", 100, 0, {2, 3}, {3, 1}).setitems().stop();
  refused(pt_zip(too_many).build(), checkpoint_errc::shape_size_mismatch);

  pickle_builder past;
  past.proto().empty_dict().mark().str("w").tensor("FloatStorage", "0", 6, 5, {2, 3}, {3, 1}).setitems().stop();
  refused(pt_zip(past).build(), checkpoint_errc::view_out_of_bounds);

  pickle_builder quantized;
  quantized.proto().empty_dict().mark().str("z").tensor("QInt8Storage", "0", 3, 0, {3}, {1}).setitems().stop();
  const std::string c = refused(pt_zip(quantized).build(), codec_errc::unknown_dtype).what();
  EXPECT_NE(c.find("tensor 'z'"), std::string::npos) << c;
}

TEST_F(Pytorch, PickledModulesLegacyFilesAndTorchScriptSaySo) {
  pickle_builder module;
  module.proto().global("torch.nn.modules.linear", "Linear").stop();
  refused(pt_zip(module).build(), checkpoint_errc::unsupported_pytorch);

  auto script = pt_zip(state_dict_pickle());
  script.add("archive/constants.pkl", "\x80\x02).");
  refused(script.build(), checkpoint_errc::unsupported_pytorch);

  const std::vector<std::uint8_t> legacy = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8};
  std::vector<std::byte> bytes(legacy.size());
  std::memcpy(bytes.data(), legacy.data(), legacy.size());
  const std::string line = refused(bytes, checkpoint_errc::unsupported_pytorch).what();
  EXPECT_NE(line.find("legacy"), std::string::npos) << line;
}

TEST_F(Pytorch, DuplicateNamesAndBadKeys) {
  pickle_builder p;  // {'a.b': t, 'a': {'b': t}}
  p.proto().empty_dict().mark().str("a.b").tensor("FloatStorage", "0", 6, 0, {6}, {1});
  p.str("a").empty_dict().str("b").tensor("FloatStorage", "0", 6, 0, {6}, {1}).setitem().setitems().stop();
  refused(pt_zip(p).build(), errc::duplicate_key);
  pickle_builder float_key;
  float_key.proto().empty_dict().op('G').raw({0x3f, 0xf0, 0, 0, 0, 0, 0, 0}).str("v").setitem().stop();
  refused(pt_zip(float_key).build(), checkpoint_errc::pickle_malformed);
}

// --- hostile zips ----------------------------------------------------------

TEST_F(Pytorch, CompressedRecordsAreNeverInflated) {
  auto z = pt_zip(state_dict_pickle());
  z.records[1].method = 8;
  z.records[1].data.assign(10 << 20, std::byte{0x5a});
  z.records[1].claimed_size = std::uint64_t{10} << 30;  // 10 MB claiming 10 GB
  const fs::path p = put(z.build());
  const auto start = std::chrono::steady_clock::now();
  auto r = reader::open(p);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(10 * slowdown));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), checkpoint_errc::unsupported_zip_feature);
  EXPECT_NE(r.error().what().find("record 'archive/data/0': compressed (method 8)"), std::string::npos)
      << r.error().what();

  auto enc = pt_zip(state_dict_pickle());
  enc.records[0].flags |= 1;
  refused(enc.build(), checkpoint_errc::unsupported_zip_feature);
}

TEST_F(Pytorch, RecordsMustNotOverlap) {
  auto z = pt_zip(state_dict_pickle());
  z.records[1].claimed_size = 50;  // past its descriptor, into the version record's header
  const std::string line = refused(z.build(), checkpoint_errc::zip_malformed).what();
  EXPECT_NE(line.find("overlaps"), std::string::npos) << line;
}

TEST_F(Pytorch, NamesAreCleanUniqueAndUnderOneFolder) {
  auto twice = pt_zip(state_dict_pickle());
  twice.add("archive/data.pkl", state_dict_pickle().bytes());
  refused(twice.build(), checkpoint_errc::zip_malformed);

  auto dotdot = pt_zip(state_dict_pickle());
  dotdot.add("archive/../x", "x");
  refused(dotdot.build(), checkpoint_errc::zip_malformed);

  auto rooted = pt_zip(state_dict_pickle());
  rooted.records.insert(rooted.records.begin(), rooted.records.back());
  rooted.records.front().name = "/x";
  refused(rooted.build(), checkpoint_errc::zip_malformed);

  auto second = pt_zip(state_dict_pickle());
  second.add("other/x", "x");
  refused(second.build(), checkpoint_errc::zip_malformed);

  auto backslash = pt_zip(state_dict_pickle());
  backslash.add("archive/a\\b", "x");
  refused(backslash.build(), checkpoint_errc::zip_malformed);
}

TEST_F(Pytorch, LocalHeadersMustAgree) {
  auto z = pt_zip(state_dict_pickle());
  z.records[2].local_name = "archive/versioX";
  refused(z.build(), checkpoint_errc::zip_malformed);
}

TEST_F(Pytorch, EndRecordMustEndTheFile) {
  auto z = pt_zip(state_dict_pickle());
  z.trailing = "junk";
  refused(z.build(), errc::trailing_bytes);
  auto bytes = pt_zip(state_dict_pickle()).build();
  bytes.resize(bytes.size() - 30);
  refused(bytes, errc::truncated);
}

TEST_F(Pytorch, OtherZipsAreNotCheckpoints) {
  zip_builder z;
  z.add("docs/readme.txt", "hello");
  const std::string line = refused(z.build(), checkpoint_errc::not_a_checkpoint).what();
  EXPECT_NE(line.find("data.pkl"), std::string::npos) << line;
}

TEST_F(Pytorch, VerifyChecksEveryRecordsCrc32) {
  auto bytes = pt_zip(state_dict_pickle()).build();
  auto r0 = open_bytes(bytes);
  ASSERT_TRUE(r0);
  const std::uint64_t at = r0->storages()[0].offset;
  bytes[at + 5] ^= std::byte{1};
  auto r = open_bytes(bytes);
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(r->get("w"));  // fetching checks nothing, as torch.load
  auto v = r->verify();
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), checkpoint_errc::crc32_mismatch);
  EXPECT_NE(v.error().what().find("tensor 'w'"), std::string::npos) << v.error().what();
}

// Every byte of a small .pt flipped in turn: a typed error or a file whose
// tensors fetch; never a crash (ASan and UBSan watch).
TEST_F(Pytorch, EveryByteFlipped) {
  const auto good = pt_zip(state_dict_pickle()).build();
  const fs::path p = dir_ / "flip.pt";
  std::size_t opened = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    auto bytes = good;
    bytes[i] ^= std::byte{0x41};
    spit(p, bytes);
    auto r = reader::open(p);
    if (!r) {
      EXPECT_NE(r.error().code(), error_code{});
      continue;
    }
    ++opened;
    for (const auto& t : r->tensors()) {
      auto got = r->get(t);
      if (got) {
        EXPECT_EQ(got->contiguous_copy().size(), t.nbytes());
      }
    }
    (void)r->verify();
  }
  EXPECT_GT(opened, 0u);  // flips in padding and data leave it readable
}

}  // namespace
}  // namespace ferry::checkpoint::testing
