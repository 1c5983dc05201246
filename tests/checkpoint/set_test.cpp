// Checkpoint sets (set.h): the planner, round trips over 1..4 shards in
// mixed byte orders, sharing, the reader's checks of shards against the
// index, commit and cleanup.
#include <gtest/gtest.h>

#include <numeric>

#include "ferry/checkpoint/ferry/layout.h"
#include "ferry/checkpoint/set/internal.h"
#include "ferry/checkpoint/safetensors.h"
#include "ferry/checkpoint/set.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

using wire::byte_order;

// A model-like list: a few big tensors (split), small ones (whole), an
// empty one, a 0-d one, a strided view and two tied tensors.
struct model {
  std::vector<std::vector<float>> data;
  std::vector<std::string> names;
  std::vector<std::vector<std::uint64_t>> shapes;
  std::vector<std::uint64_t> view_strides{1, 4};  // a transposed 4x3 view of data[5]
  std::vector<tensor_ref> refs;

  model() {
    const std::vector<std::vector<std::uint64_t>> s = {{300, 1000}, {7}, {0, 5}, {}, {1000, 300}, {3, 4}, {200, 700}};
    for (std::size_t i = 0; i < s.size(); ++i) {
      std::uint64_t n = 1;
      for (auto e : s[i]) n *= e;
      std::vector<float> d(n);
      for (std::size_t k = 0; k < n; ++k) d[k] = static_cast<float>(i * 1000003 + k) * 0.5f - 7.f;
      data.push_back(std::move(d));
      names.push_back("t" + std::to_string(i));
      shapes.push_back(s[i]);
    }
    shapes.push_back({4, 3});
    names.push_back("view");
    names.push_back("tied");
    for (std::size_t i = 0; i < s.size(); ++i) {
      refs.push_back({names[i], codec::dtype::f32, shapes[i], {}, 0, std::as_bytes(std::span(data[i]))});
    }
    refs.push_back({names[7], codec::dtype::f32, shapes[7], view_strides, 0, std::as_bytes(std::span(data[5]))});
    refs.push_back({names[8], codec::dtype::f32, shapes[1], {}, 0, std::as_bytes(std::span(data[1]))});
  }
};

void expect_model(const reader& r, const model& m) {
  ASSERT_EQ(r.tensors().size(), m.refs.size());
  for (const auto& ref : m.refs) {
    auto t = r.get(ref.name);
    ASSERT_TRUE(t) << t.error();
    EXPECT_TRUE(std::ranges::equal(t->shape(), ref.shape)) << ref.name;
    const auto got = t->contiguous_copy();
    const auto want = gather(ref);
    EXPECT_EQ(got, want) << ref.name;
  }
}

write_options fast(byte_order order = wire::host_order) {
  write_options o;
  o.sync = false;
  o.order = order;
  return o;
}

std::vector<fs::path> shard_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (name.find("-of-") != std::string::npos && name[0] != '.') out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class Set : public scratch_dir {};

TEST(SetPlan, EveryElementOnceBalancedAndDeterministic) {
  model m;
  for (std::uint32_t n = 1; n <= 7; ++n) {
    const auto plan = plan_shards(m.refs, n, 64 * 1024);
    ASSERT_EQ(plan.size(), n);
    EXPECT_EQ(plan, plan_shards(m.refs, n, 64 * 1024));
    std::vector<std::uint64_t> covered(m.refs.size(), 0);
    std::uint64_t total = 0, largest = 0;
    for (const auto& shard : plan) {
      std::uint64_t bytes = 0;
      std::set<std::size_t> seen;
      for (const auto& p : shard) {
        EXPECT_TRUE(seen.insert(p.tensor).second) << "two pieces of one tensor in a shard";
        covered[p.tensor] += p.count;
        bytes += p.count * 4;
      }
      total += bytes;
      largest = std::max(largest, bytes);
    }
    for (std::size_t i = 0; i < m.refs.size(); ++i) {
      std::uint64_t numel = 1;
      for (auto e : m.refs[i].shape) numel *= e;
      EXPECT_EQ(covered[i], numel) << m.refs[i].name << " over " << n;
    }
    // Unsplit tensors (< 64 KiB) shift a boundary by less than their size.
    EXPECT_LE(largest, total / n + 2 * 64 * 1024) << n;
  }
}

TEST(SetPlan, SmallTensorsStayWholeAndBigOnesSplit) {
  model m;
  const auto plan = plan_shards(m.refs, 4);  // 1 MiB threshold: t0 (1.2 MB) splits
  std::size_t pieces_of_t0 = 0, pieces_of_t1 = 0;
  for (const auto& shard : plan) {
    for (const auto& p : shard) {
      pieces_of_t0 += p.tensor == 0;
      pieces_of_t1 += p.tensor == 1;
    }
  }
  EXPECT_GT(pieces_of_t0, 1u);
  EXPECT_EQ(pieces_of_t1, 1u);
}

TEST_F(Set, RoundTripsOverOneToFourShards) {
  model m;
  for (std::uint32_t n = 1; n <= 4; ++n) {
    const auto index = dir_ / "model.ferry";
    ASSERT_TRUE(save_set(index, m.refs, n, {{"epoch", "3"}}, fast()));
    auto r = open(index);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->format(), file_format::ferry_set);
    EXPECT_EQ(r->shards().size(), n);
    EXPECT_EQ(r->metadata().at("epoch"), "3");
    expect_model(*r, m);
    EXPECT_TRUE(r->verify());
    auto all = r->get_all();
    ASSERT_TRUE(all) << all.error();
    EXPECT_EQ(all->size(), m.refs.size());
    // The previous save's shards are gone: only this one's remain.
    EXPECT_EQ(shard_files(dir_).size(), n);
  }
}

TEST_F(Set, WholeTensorsAreZeroCopyAndKeepSharing) {
  model m;
  const auto index = dir_ / "m.ferry";
  ASSERT_TRUE(save_set(index, m.refs, 2, {}, fast()));
  auto r = open(index);
  ASSERT_TRUE(r) << r.error();
  auto t1 = r->get("t1");
  auto tied = r->get("tied");
  ASSERT_TRUE(t1 && tied);
  EXPECT_EQ(t1->storage().get(), tied->storage().get());
  EXPECT_EQ(r->find("t1")->storage, r->find("tied")->storage);
  auto view = r->get("view");
  auto base = r->get("t5");
  ASSERT_TRUE(view && base);
  EXPECT_EQ(view->storage().get(), base->storage().get());
  EXPECT_EQ(r->find("view")->strides, m.view_strides);
  // Zero-copy: the storage is the shard's own mapping.
  const reader& shard = r->shards()[0].find("t1") ? r->shards()[0] : r->shards()[1];
  auto direct = shard.get("t1");
  ASSERT_TRUE(direct);
  EXPECT_EQ(direct->storage().get(), t1->storage().get());
}

TEST_F(Set, ShardsInBothByteOrdersMix) {
  model m;
  const auto index = dir_ / "mixed.ferry";
  const auto id = new_save_id();
  const auto plan = plan_shards(m.refs, 3, 4096);
  std::vector<shard_record> records;
  for (std::uint32_t k = 0; k < 3; ++k) {
    auto w = shard_writer::create(index, id, k, 3, fast(k % 2 ? byte_order::big : byte_order::little));
    ASSERT_TRUE(w) << w.error();
    for (const auto& p : plan[k]) ASSERT_TRUE(w->add_piece(m.refs[p.tensor], p.begin, p.count));
    auto rec = w->commit();
    ASSERT_TRUE(rec) << rec.error();
    // Through the wire format a rank sends rank 0.
    auto back = shard_record::decode(rec->encode());
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(back->file, rec->file);
    EXPECT_EQ(back->pieces.size(), rec->pieces.size());
    records.push_back(std::move(*back));
  }
  std::reverse(records.begin(), records.end());  // any order
  ASSERT_TRUE(commit_set(index, id, 3, records, {}, fast()));
  auto r = open(index);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->shards()[1].order(), byte_order::big);
  EXPECT_EQ(r->shards()[0].order(), byte_order::little);
  expect_model(*r, m);
  EXPECT_TRUE(r->verify());
}

TEST_F(Set, CopyOnWriteStoragesAreWritableAndPrivate) {
  model m;
  const auto index = dir_ / "cow.ferry";
  ASSERT_TRUE(save_set(index, m.refs, 4, {}, fast()));
  read_options opt;
  opt.copy_on_write = true;
  auto r = open(index, opt);
  ASSERT_TRUE(r) << r.error();
  auto t0 = r->get("t0");
  ASSERT_TRUE(t0);
  ASSERT_FALSE(t0->storage()->mutable_bytes().empty());
  t0->storage()->mutable_bytes()[0] = std::byte{0x55};
  auto again = open(index);
  ASSERT_TRUE(again);
  expect_model(*again, m);
}

TEST_F(Set, ReadIntoCallerMemoryChecksEveryPiece) {
  model m;
  const auto index = dir_ / "into.ferry";
  const auto id = new_save_id();
  const auto plan = plan_shards(m.refs, 3, 4096);
  std::vector<shard_record> records;
  for (std::uint32_t k = 0; k < 3; ++k) {
    auto w = shard_writer::create(index, id, k, 3, fast(k == 1 ? byte_order::big : byte_order::little));
    for (const auto& p : plan[k]) ASSERT_TRUE(w->add_piece(m.refs[p.tensor], p.begin, p.count));
    records.push_back(*w->commit());
  }
  ASSERT_TRUE(commit_set(index, id, 3, records, {}, fast()));
  auto r = open(index);
  ASSERT_TRUE(r) << r.error();
  for (const auto& ref : m.refs) {
    const tensor_info& t = *r->find(ref.name);
    std::vector<std::byte> out(t.nbytes());
    auto got = r->read_into(t, out);
    if (!t.is_contiguous()) {  // the transposed view, whole in its shard
      ASSERT_FALSE(got);
      EXPECT_EQ(got.error().code(), errc::bad_value);
      continue;
    }
    ASSERT_TRUE(got) << got.error();
    EXPECT_EQ(out, gather(ref)) << ref.name;
  }
  std::vector<std::byte> wrong(3);
  EXPECT_FALSE(r->read_into(*r->find("t0"), wrong));
  // A flipped byte in a piece: read_into reports the shard and the tensor.
  const auto file = dir_ / r->shards()[1].path().filename();
  auto bytes = slurp(file);
  bytes[64 + 8] ^= std::byte{4};
  spit(file, bytes);
  auto again = open(index);
  ASSERT_TRUE(again);
  bool failed = false;
  for (const auto& t : again->tensors()) {
    if (!t.is_contiguous()) continue;
    std::vector<std::byte> out(t.nbytes());
    if (auto got = again->read_into(t, out); !got) {
      EXPECT_EQ(got.error().code(), errc::checksum_mismatch);
      EXPECT_NE(got.error().what().find(file.filename().string()), std::string::npos) << got.error();
      failed = true;
    }
  }
  EXPECT_TRUE(failed);
}

TEST_F(Set, ReadIntoASingleFileInEitherOrder) {
  for (const auto order : {byte_order::little, byte_order::big}) {
    const auto p = dir_ / "one.ferry";
    write_sample(p, order);
    auto r = open(p);
    ASSERT_TRUE(r);
    for (const auto& t : r->tensors()) {
      if (!t.is_contiguous()) continue;
      std::vector<std::byte> out(t.nbytes());
      ASSERT_TRUE(r->read_into(t, out)) << t.name;
      auto got = r->get(t);
      ASSERT_TRUE(got);
      EXPECT_EQ(out, got->contiguous_copy()) << t.name;
    }
  }
}

// --- the reader's checks ------------------------------------------------------

TEST_F(Set, MissingShardNamesIt) {
  model m;
  const auto index = dir_ / "m.ferry";
  ASSERT_TRUE(save_set(index, m.refs, 3, {}, fast()));
  const auto shards = shard_files(dir_);
  fs::remove(shards[1]);
  auto r = open(index);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::io_error);
  EXPECT_NE(std::string(r.error().what()).find(shards[1].filename().string()), std::string::npos) << r.error();
}

TEST_F(Set, ShardOfAnotherSaveIsRefused) {
  model m;
  const auto a = dir_ / "a";
  const auto b = dir_ / "b";
  fs::create_directory(a);
  fs::create_directory(b);
  ASSERT_TRUE(save_set(a / "m.ferry", m.refs, 2, {}, fast()));
  ASSERT_TRUE(save_set(b / "m.ferry", m.refs, 2, {}, fast()));
  const auto sa = shard_files(a);
  const auto sb = shard_files(b);
  fs::copy_file(sb[0], sa[0], fs::copy_options::overwrite_existing);
  auto r = open(a / "m.ferry");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), checkpoint_errc::bad_shard);
  const std::string what = r.error().what();
  EXPECT_NE(what.find("another save"), std::string::npos) << what;
  EXPECT_NE(what.find(sa[0].filename().string()), std::string::npos) << what;
}

TEST_F(Set, CorruptPieceFailsItsFetchAndVerify) {
  model m;
  const auto index = dir_ / "m.ferry";
  ASSERT_TRUE(save_set(index, m.refs, 2, {}, fast()));
  const auto shards = shard_files(dir_);
  auto bytes = slurp(shards[0]);
  bytes[64 + 100] ^= std::byte{1};  // in the first storage: t0's first piece
  spit(shards[0], bytes);
  auto r = open(index);
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("t0");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), errc::checksum_mismatch);
  const std::string what = t.error().what();
  EXPECT_NE(what.find(shards[0].filename().string()), std::string::npos) << what;
  EXPECT_NE(what.find("'t0'"), std::string::npos) << what;
  EXPECT_FALSE(r->verify());
  EXPECT_FALSE(r->get_all());
  EXPECT_TRUE(r->get("t6"));  // others are fine
}

TEST_F(Set, ShardReplacedByAnotherWriteOfTheSameSaveIsRefused) {
  model m;
  const auto index = dir_ / "m.ferry";
  const auto id = new_save_id();
  std::vector<shard_record> records;
  for (std::uint32_t k = 0; k < 2; ++k) {
    auto w = shard_writer::create(index, id, k, 2, fast());
    ASSERT_TRUE(w);
    ASSERT_TRUE(w->add(m.refs[k]));
    records.push_back(*w->commit());
  }
  ASSERT_TRUE(commit_set(index, id, 2, records, {}, fast()));
  // Rank 1 writes its shard again, differently (a rerun): the index no longer matches.
  auto w = shard_writer::create(index, id, 1, 2, fast());
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->add(m.refs[6]));
  ASSERT_TRUE(w->commit());
  auto r = open(index);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), checkpoint_errc::bad_shard);
}

TEST_F(Set, PiecesThatOverlapOrLeaveAHoleAreRefused) {
  const auto index = dir_ / "m.ferry";
  const auto id = new_save_id();
  std::vector<float> v(100, 1.f);
  const std::uint64_t shape[] = {100};
  const tensor_ref t{"w", codec::dtype::f32, shape, {}, 0, std::as_bytes(std::span(v))};
  const auto two = [&](std::uint64_t b1, std::uint64_t c1) {
    std::vector<shard_record> rec;
    auto w0 = shard_writer::create(index, id, 0, 2, fast());
    auto w1 = shard_writer::create(index, id, 1, 2, fast());
    EXPECT_TRUE(w0->add_piece(t, 0, 50));
    EXPECT_TRUE(w1->add_piece(t, b1, c1));
    rec.push_back(*w0->commit());
    rec.push_back(*w1->commit());
    return commit_set(index, id, 2, rec, {}, fast());
  };
  for (const auto& [b, c] : {std::pair<std::uint64_t, std::uint64_t>{40, 60}, {51, 49}, {50, 40}}) {
    auto r = two(b, c);
    ASSERT_FALSE(r) << b << "+" << c;
    EXPECT_EQ(r.error().code(), checkpoint_errc::bad_pieces) << r.error();
  }
  EXPECT_TRUE(two(50, 50));
  auto w = shard_writer::create(index, id, 0, 1, fast());
  auto past = w->add_piece(t, 90, 20);
  ASSERT_FALSE(past);
  EXPECT_EQ(past.error().code(), checkpoint_errc::bad_pieces);
}

TEST(SetIndex, CheckSetRules) {
  detail::set_manifest good;
  good.save_id = "0123456789abcdef";
  good.world = 2;
  good.shards = {{"a.ferry", 1, 0, 0, 0, "", 0}, {"b.ferry", 1, 0, 1, 1, "", 0}};
  good.tensors = {{"w", codec::code(codec::dtype::f32), {10}, {{0, 0, 4}, {1, 4, 6}}, false},
                  {"e", codec::code(codec::dtype::f32), {0}, {{1, 0, 0}}, false}};
  ASSERT_TRUE(detail::check_set(good, {}, "i"));
  {  // a shard of an earlier save of another world (incremental)
    auto m = good;
    m.shards[1].save_id = "fedcba9876543210";
    m.shards[1].world = 4;
    m.shards[1].rank = 3;
    EXPECT_TRUE(detail::check_set(m, {}, "i"));
  }
  const auto expect = [&](auto mutate, error_code c) {
    auto m = good;
    mutate(m);
    auto r = detail::check_set(m, {}, "i");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), c) << r.error();
  };
  using M = detail::set_manifest;
  expect([](M& m) { m.save_id = "XYZ"; }, checkpoint_errc::bad_index);
  expect([](M& m) { m.world = 0; }, checkpoint_errc::bad_index);
  expect([](M& m) { m.shards.clear(); }, checkpoint_errc::bad_index);
  expect([](M& m) { m.shards[0].file = "../x"; }, checkpoint_errc::bad_index);
  expect([](M& m) { m.shards[0].file = ".."; }, checkpoint_errc::bad_index);
  expect([](M& m) { m.shards[1].file = "a.ferry"; }, errc::duplicate_key);
  expect([](M& m) { m.shards[1].order = 2; }, errc::bad_byte_order);
  expect([](M& m) { m.shards[1].rank = 2; }, checkpoint_errc::bad_index);
  expect([](M& m) { m.shards[1].save_id = "01234"; }, checkpoint_errc::bad_index);
  expect([](M& m) { m.shards[1].world = 3, m.shards[1].rank = 3; }, checkpoint_errc::bad_index);
  expect([](M& m) { m.tensors[1].name = "w"; }, errc::duplicate_key);
  expect([](M& m) { m.tensors[0].pieces[1].shard = 7; }, checkpoint_errc::bad_index);
  expect([](M& m) { m.tensors[0].pieces[1].shard = 0; }, checkpoint_errc::bad_pieces);
  expect([](M& m) { m.tensors[0].pieces[1].count = 5; }, checkpoint_errc::bad_pieces);
  expect([](M& m) { m.tensors[0].pieces[1].count = 7; }, checkpoint_errc::bad_pieces);
  expect([](M& m) { m.tensors[0].pieces[1].begin = 3; }, checkpoint_errc::bad_pieces);
  expect([](M& m) { m.tensors[0].pieces.clear(); }, checkpoint_errc::bad_pieces);
  expect([](M& m) { m.tensors[1].pieces.push_back({0, 0, 0}); }, checkpoint_errc::bad_pieces);
  expect([](M& m) { m.tensors[0].shape = {UINT64_MAX, 3}; }, checkpoint_errc::shape_overflow);
  expect([](M& m) { m.tensors[0].dtype = 99; }, codec_errc::unknown_dtype);
  limits small;
  small.max_shards = 1;
  auto r = detail::check_set(good, small, "i");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::limit_exceeded);
}

TEST_F(Set, EveryFlippedIndexByteIsRefusedOrHarmless) {
  model m;
  const auto index = dir_ / "m.ferry";
  ASSERT_TRUE(save_set(index, m.refs, 2, {}, fast()));
  const auto good = slurp(index);
  for (std::size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] ^= std::byte{0x10};
    spit(index, bad);
    auto r = open(index);
    EXPECT_FALSE(r) << "byte " << i;
  }
}

TEST_F(Set, OldReadersOfFilesRefuseAnIndex) {
  model m;
  const auto index = dir_ / "m.ferry";
  ASSERT_TRUE(save_set(index, m.refs, 1, {}, fast()));
  const auto bytes = slurp(index);
  EXPECT_EQ(bytes[10], std::byte{set_index_flag});
  std::array<std::byte, header_size> head{};
  std::copy_n(bytes.begin(), header_size, head.begin());
  auto h = detail::decode_header(head);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->flags, set_index_flag);
  head[10] = std::byte{2};
  EXPECT_FALSE(detail::decode_header(head));
}

// --- commit and cleanup -------------------------------------------------------

TEST_F(Set, AnUncommittedSaveLeavesThePreviousSetAndIsCleanedNextTime) {
  model m;
  const auto index = dir_ / "m.ferry";
  ASSERT_TRUE(save_set(index, m.refs, 2, {}, fast()));
  const auto before = shard_files(dir_);
  // A save that dies after writing its shards, before the index.
  const auto id = new_save_id();
  for (std::uint32_t k = 0; k < 3; ++k) {
    auto w = shard_writer::create(index, id, k, 3, fast());
    ASSERT_TRUE(w->add(m.refs[k]));
    ASSERT_TRUE(w->commit());
  }
  // And one that dies while writing a shard (its temporary, unlocked).
  {
    auto w = shard_writer::create(index, new_save_id(), 0, 1, fast());
    ASSERT_TRUE(w->add(m.refs[0]));
    // Destroyed without commit: removes its temporary. Leave one the way a
    // killed writer would, with no lock held.
  }
  const auto orphan_tmp = dir_ / ".m-0123456789abcdef-00000-of-00001.ferry.ferry-tmp.1.2";
  spit(orphan_tmp, std::vector<std::byte>(10));
  EXPECT_EQ(shard_files(dir_).size(), 2u + 3u);
  auto r = open(index);
  ASSERT_TRUE(r) << r.error();
  expect_model(*r, m);
  ASSERT_TRUE(save_set(index, m.refs, 2, {}, fast()));
  EXPECT_EQ(shard_files(dir_).size(), 2u);
  EXPECT_FALSE(fs::exists(orphan_tmp));
  for (const auto& p : before) EXPECT_FALSE(fs::exists(p));
  // Other files in the folder are never touched.
  spit(dir_ / "m-notes.ferry", std::vector<std::byte>(3));
  spit(dir_ / "other-0123456789abcdef-00000-of-00001.ferry", std::vector<std::byte>(3));
  ASSERT_TRUE(save_set(index, m.refs, 1, {}, fast()));
  EXPECT_TRUE(fs::exists(dir_ / "m-notes.ferry"));
  EXPECT_TRUE(fs::exists(dir_ / "other-0123456789abcdef-00000-of-00001.ferry"));
}

TEST_F(Set, ShardNamesAndSaveIds) {
  const auto id = new_save_id();
  EXPECT_TRUE(detail::valid_save_id(id));
  EXPECT_NE(id, new_save_id());
  EXPECT_EQ(shard_path(dir_ / "step10.ferry", "00000000000000ff", 2, 4).filename(),
            "step10-00000000000000ff-00002-of-00004.ferry");
  EXPECT_FALSE(shard_writer::create(dir_ / "x.ferry", "nothex", 0, 1));
  EXPECT_FALSE(shard_writer::create(dir_ / "x.ferry", id, 1, 1));
}

}  // namespace
}  // namespace ferry::checkpoint::testing

namespace ferry::checkpoint::testing {
namespace {

// --- Hugging Face sharded safetensors ------------------------------------------

class HfSharded : public scratch_dir {};

TEST_F(HfSharded, RoundTripsAndReplacesItsShards) {
  model m;
  safetensors_options opt;
  opt.sync = false;
  opt.shared = safetensors_options::shared_policy::alias;
  std::vector<tensor_ref> refs(m.refs.begin(), m.refs.end());
  refs.erase(refs.begin() + 7);  // safetensors cannot alias a different view
  const auto index = dir_ / "model.safetensors.index.json";
  auto files = save_safetensors_sharded(index, refs, 1'000'000, {{"step", "7"}}, opt);
  ASSERT_TRUE(files) << files.error();
  EXPECT_EQ(files->size(), 4u);
  EXPECT_EQ(files->front().filename(), "model-00001-of-00004.safetensors");
  auto r = open(index);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->format(), file_format::safetensors_sharded);
  EXPECT_EQ(r->shards().size(), 4u);
  EXPECT_EQ(r->metadata().at("step"), "7");
  EXPECT_TRUE(r->metadata().contains("total_size"));
  ASSERT_EQ(r->tensors().size(), refs.size());
  for (std::size_t i = 0; i < refs.size(); ++i) {
    EXPECT_EQ(r->tensors()[i].name, refs[i].name);  // weight_map order
    auto t = r->get(refs[i].name);
    ASSERT_TRUE(t) << t.error();
    EXPECT_EQ(t->contiguous_copy(), gather(refs[i])) << refs[i].name;
  }
  EXPECT_EQ(r->find("t1")->storage, r->find("tied")->storage);
  EXPECT_TRUE(r->verify());
  // Saved again in fewer shards: the old ones go.
  ASSERT_TRUE(save_safetensors_sharded(index, refs, 100'000'000, {}, opt));
  std::size_t left = 0;
  for (const auto& e : fs::directory_iterator(dir_)) left += e.path().extension() == ".safetensors";
  EXPECT_EQ(left, 1u);
  auto again = open(index);
  ASSERT_TRUE(again) << again.error();
  EXPECT_EQ(again->shards().size(), 1u);
}

TEST_F(HfSharded, IndexGrammar) {
  std::vector<float> v(6, 2.f);
  const std::uint64_t shape[] = {2, 3};
  const tensor_ref t{"a.weight", codec::dtype::f32, shape, {}, 0, std::as_bytes(std::span(v))};
  safetensors_options opt;
  opt.sync = false;
  ASSERT_TRUE(save_safetensors(dir_ / "s1.safetensors", std::span(&t, 1), {}, opt));
  write_sample(dir_ / "f.ferry", wire::host_order);
  const auto index = dir_ / "m.safetensors.index.json";
  const auto open_text = [&](const std::string& text) {
    spit(index, std::as_bytes(std::span(text)));
    return open(index);
  };
  auto ok = open_text(R"(  {"metadata": {"total_size": 24, "nested": {"x": [1, 2]}, "f": 1.5, "n": null},
                           "other": [[{}]], "weight_map": {"a.weight": "s1.safetensors"}})");
  ASSERT_TRUE(ok) << ok.error();
  EXPECT_EQ(ok->metadata().at("total_size"), "24");
  EXPECT_EQ(ok->metadata().at("f"), "1.5");
  EXPECT_FALSE(ok->metadata().contains("nested"));
  EXPECT_EQ(ok->get("a.weight")->contiguous_copy(), gather(t));
  const auto refused = [&](const std::string& text, error_code c) {
    auto r = open_text(text);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().code(), c) << text << ": " << r.error();
  };
  refused(R"({"metadata": {}})", checkpoint_errc::bad_json);
  refused(R"({"weight_map": {}})", checkpoint_errc::bad_json);
  refused(R"({"weight_map": {"a.weight": 3}})", checkpoint_errc::bad_json);
  refused(R"({"weight_map": {"a.weight": ["s1.safetensors"]}})", checkpoint_errc::bad_json);
  refused(R"({"weight_map": {"a.weight": "../s1.safetensors"}})", checkpoint_errc::bad_index);
  refused(R"({"weight_map": {"a.weight": "s1.safetensors", "a.weight": "s1.safetensors"}})", errc::duplicate_key);
  refused(R"({"weight_map": {"a.weight": "s1.safetensors"}, "weight_map": {}})", errc::duplicate_key);
  refused(R"({"weight_map": {"b": "s1.safetensors"}})", checkpoint_errc::bad_shard);
  refused(R"({"weight_map": {"a.weight": "f.ferry"}})", checkpoint_errc::bad_shard);
  refused(R"({"weight_map": {"a.weight": "gone.safetensors"}})", errc::io_error);
  refused(R"({"weight_map": {"a.weight": "s1.safetensors"})", checkpoint_errc::bad_json);
  refused(R"({"weight_map": {"a.weight": "s1.safetensors"}} x)", checkpoint_errc::bad_json);
  // The error names the index and the shard.
  auto r = open_text(R"({"weight_map": {"b": "s1.safetensors"}})");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().what().find("m.safetensors.index.json: shard 's1.safetensors': tensor 'b'"), std::string::npos)
      << r.error();
}

}  // namespace
}  // namespace ferry::checkpoint::testing
