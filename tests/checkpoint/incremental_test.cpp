// Incremental checkpoint sets (set.h, shard_writer::base_on): pieces equal
// to the previous save's are kept in the earlier shard, not written; the
// reader assembles and verifies the whole chain; a damaged earlier shard
// is never trusted; the cleanup keeps what any index in the folder names,
// so removing an older index never breaks a newer one.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/set.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

// Two shards' worth of state: "moving" changes at every save, "frozen"
// never does, "big" is split across both shards (elements below 150000 in
// shard 0) and changes below element 100000 only, "tied" shares frozen's
// storage.
struct state {
  std::vector<float> moving = std::vector<float>(50000), frozen = std::vector<float>(50000),
                     big = std::vector<float>(400000);
  std::vector<tensor_ref> refs;
  explicit state(int version) {
    for (std::size_t i = 0; i < moving.size(); ++i) moving[i] = static_cast<float>(i) + 0.25f * static_cast<float>(version);
    for (std::size_t i = 0; i < frozen.size(); ++i) frozen[i] = -static_cast<float>(i);
    for (std::size_t i = 0; i < big.size(); ++i) {
      big[i] = static_cast<float>(i) + (i < 100000 ? static_cast<float>(version) : 0.f);
    }
    static const std::uint64_t flat[] = {50000}, square[] = {400, 1000};
    refs = {{"moving", codec::dtype::f32, flat, {}, 0, std::as_bytes(std::span(moving))},
            {"frozen", codec::dtype::f32, flat, {}, 0, std::as_bytes(std::span(frozen))},
            {"tied", codec::dtype::f32, flat, {}, 0, std::as_bytes(std::span(frozen))},
            {"big", codec::dtype::f32, square, {}, 0, std::as_bytes(std::span(big))}};
  }
};

write_options fast() {
  write_options o;
  o.sync = false;
  return o;
}

class Incremental : public scratch_dir {
 protected:
  // One save of `s` by 2 writers, each based on its record of the last
  // save (none: a full one); the new records replace them.
  void save(const state& s, std::vector<shard_record>& records, bool full, const fs::path& index) {
    const auto id = new_save_id();
    const auto plan = plan_shards(s.refs, 2, 1 << 16);
    std::vector<shard_record> next;
    for (std::uint32_t r = 0; r < 2; ++r) {
      auto w = shard_writer::create(index, id, r, 2, fast()).value();
      w.base_on(full || records.empty() ? nullptr : &records[r]);
      for (const auto& p : plan[r]) ASSERT_TRUE(w.add_piece(s.refs[p.tensor], p.begin, p.count));
      auto rec = w.commit();
      ASSERT_TRUE(rec) << rec.error();
      // What rank 0 receives went over the network.
      auto back = shard_record::decode(rec->encode());
      ASSERT_TRUE(back) << back.error();
      EXPECT_EQ(back->kept.size(), rec->kept.size());
      next.push_back(std::move(*rec));
    }
    ASSERT_TRUE(commit_set(index, id, 2, next, {{"v", "x"}}, fast()));
    records = std::move(next);
  }
  static std::uint64_t written(const std::vector<shard_record>& records) {
    std::uint64_t n = 0;
    for (const auto& r : records) n += r.size;
    return n;
  }
  static void expect_state(const fs::path& index, const state& s) {
    auto r = open(index);
    ASSERT_TRUE(r) << r.error();
    ASSERT_TRUE(r->verify()) << r->verify().error();
    for (const auto& ref : s.refs) {
      auto t = r->get(ref.name);
      ASSERT_TRUE(t) << t.error();
      EXPECT_EQ(t->contiguous_copy(), gather(ref)) << ref.name;
    }
  }
  static void flip_byte(const fs::path& p, std::uintmax_t at) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    f.seekp(-1, std::ios::cur);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
    ASSERT_TRUE(f.good());
  }
  std::size_t shard_count() const {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.path().filename().string().find("-of-") != std::string::npos;
    return n;
  }
};

TEST_F(Incremental, UnchangedPiecesAreKeptNotWritten) {
  const auto index = dir_ / "ck.ferry";
  std::vector<shard_record> records;
  save(state(1), records, true, index);
  const auto full = written(records);
  save(state(2), records, false, index);
  expect_state(index, state(2));
  // frozen, tied and big's second half (a piece of its own in shard 1)
  // were kept: about half the bytes.
  std::size_t kept = 0;
  for (const auto& r : records) kept += r.kept.size();
  EXPECT_EQ(kept, 3u);
  EXPECT_LT(static_cast<double>(written(records)), 0.55 * static_cast<double>(full));
  EXPECT_EQ(shard_count(), 4u);  // both saves' shards: the new index names them all
  // A chain of three: save 3 keeps from save 1 still; save 2's shards
  // hold nothing save 3 needs and are gone.
  save(state(3), records, false, index);
  expect_state(index, state(3));
  EXPECT_EQ(shard_count(), 4u);
  auto r = open(index);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->shards().size(), 4u);
  // A full save ends the chain: only its own shards remain.
  save(state(3), records, true, index);
  expect_state(index, state(3));
  EXPECT_EQ(shard_count(), 2u);
}

// The trainer's paths: whole tensors by add() (a tied pair and a strided
// view among them) and rows of a per-rank table by add_part(): unchanged
// ones are kept, a changed row is written.
TEST_F(Incremental, WholeTensorsAndRowsAreKeptToo) {
  const auto index = dir_ / "ck.ferry";
  const state s(1);
  std::vector<float> rows = {1, 2, 3, 4, 5, 6};
  const std::uint64_t table[] = {2, 3}, view_shape[] = {2, 3}, view_strides[] = {1, 2};
  std::vector<shard_record> previous;
  for (int save = 0; save < 2; ++save) {
    if (save == 1) rows[4] = 50;  // rank 1's row changes
    const auto id = new_save_id();
    std::vector<shard_record> records;
    for (std::uint32_t r = 0; r < 2; ++r) {
      auto w = shard_writer::create(index, id, r, 2, fast()).value();
      w.base_on(previous.empty() ? nullptr : &previous[r]);
      if (r == 0) {
        ASSERT_TRUE(w.add(s.refs[1]));  // frozen
        ASSERT_TRUE(w.add(s.refs[2]));  // tied to it
        ASSERT_TRUE(w.add({"view", codec::dtype::f32, view_shape, view_strides, 0, std::as_bytes(std::span(s.frozen))}));
      }
      ASSERT_TRUE(w.add_part("rows", codec::dtype::f32, table, r * 3,
                             std::as_bytes(std::span(rows)).subspan(r * 12, 12)));
      records.push_back(w.commit().value());
    }
    ASSERT_TRUE(commit_set(index, id, 2, records, {}, fast()));
    if (save == 1) {
      EXPECT_EQ(records[0].kept.size(), 4u);  // frozen, tied, view, row 0
      EXPECT_EQ(records[1].kept.size(), 0u);  // its row changed
    }
    previous = std::move(records);
  }
  auto r = open(index);
  ASSERT_TRUE(r) << r.error();
  ASSERT_TRUE(r->verify());
  EXPECT_EQ(r->get("view")->contiguous_copy(), gather({"view", codec::dtype::f32, view_shape, view_strides, 0,
                                                       std::as_bytes(std::span(s.frozen))}));
  EXPECT_EQ(r->get("tied")->contiguous_copy(), r->get("frozen")->contiguous_copy());
  const auto got = r->get("rows")->contiguous_copy();
  EXPECT_EQ(got.size(), 24u);
  EXPECT_EQ(std::memcmp(got.data(), rows.data(), 24), 0);
}

// A piece whose earlier copy no longer reads back the same (a flipped data
// byte: its storage CRC fails) is written again, never referenced.
TEST_F(Incremental, ADamagedEarlierShardIsNotTrusted) {
  const auto index = dir_ / "ck.ferry";
  std::vector<shard_record> records;
  save(state(1), records, true, index);
  // frozen's bytes in shard 0 (a third into the file): one flipped.
  flip_byte(dir_ / records[0].file, fs::file_size(dir_ / records[0].file) / 3);
  save(state(2), records, false, index);
  for (const auto& k : records[0].kept) ADD_FAILURE() << k.p.name << " kept from a damaged shard";
  expect_state(index, state(2));
}

// verify() of an incremental index checks the whole chain: a flipped byte
// in an earlier save's shard fails it, naming that shard.
TEST_F(Incremental, VerifyChecksEveryShardOfTheChain) {
  const auto index = dir_ / "ck.ferry";
  std::vector<shard_record> records;
  save(state(1), records, true, index);
  const auto earlier = records[0].file;
  save(state(2), records, false, index);
  ASSERT_EQ(records[0].kept.front().shard.file, earlier);
  flip_byte(dir_ / earlier, fs::file_size(dir_ / earlier) / 2);
  auto r = open(index);
  ASSERT_TRUE(r) << r.error();
  const auto v = r->verify();
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), errc::checksum_mismatch) << v.error();
  EXPECT_NE(v.error().what().find(earlier), std::string::npos) << v.error();
}

// Removing an older checkpoint never breaks a newer one: an index names
// every file it needs. A kept copy of an older index keeps its shards
// until it is removed; an index that cannot be read stops all removal.
TEST_F(Incremental, CleanupKeepsWhatAnyIndexNames) {
  const auto index = dir_ / "ck.ferry";
  std::vector<shard_record> records;
  save(state(1), records, true, index);
  fs::copy_file(index, dir_ / "ck-epoch1.ferry");
  save(state(2), records, true, index);  // full: names none of save 1's
  EXPECT_EQ(shard_count(), 4u);
  expect_state(dir_ / "ck-epoch1.ferry", state(1));
  expect_state(index, state(2));
  fs::remove(dir_ / "ck-epoch1.ferry");
  expect_state(index, state(2));
  // An unreadable index (its header says so, the rest is cut off) might
  // name anything: nothing goes. A .ferry file that is no index (too short
  // for a header) names nothing and stops nothing.
  {
    std::ofstream bad(dir_ / "broken.ferry", std::ios::binary);
    const auto head = read_text(index);
    bad.write(head.data(), 80);
    std::ofstream(dir_ / "notes.ferry") << "not a checkpoint";
  }
  save(state(3), records, true, index);
  EXPECT_EQ(shard_count(), 6u);
  fs::remove(dir_ / "broken.ferry");
  save(state(4), records, false, index);
  expect_state(index, state(4));
  EXPECT_EQ(shard_count(), 4u);  // save 4's and the save 3 shards it keeps from
}

// An incremental index read by a reader: shards of earlier saves carry
// their own save id; one from yet another save is refused naming it.
TEST_F(Incremental, KeptShardsAreCheckedAgainstTheirOwnSave) {
  const auto index = dir_ / "ck.ferry";
  std::vector<shard_record> records;
  save(state(1), records, true, index);
  const auto first = records;
  save(state(2), records, false, index);
  // Replace a kept shard of save 1 with shard 0 of another save of the
  // same name: the index's record of it no longer holds.
  const auto kept_file = records[0].kept.front().shard.file;
  const auto other = dir_ / "other";
  fs::create_directory(other);
  std::vector<shard_record> other_records;
  save(state(1), other_records, true, other / "ck.ferry");
  fs::copy_file(other / other_records[0].file, dir_ / kept_file, fs::copy_options::overwrite_existing);
  auto r = open(index);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), checkpoint_errc::bad_shard);
  EXPECT_NE(r.error().what().find(kept_file), std::string::npos) << r.error().what();
  EXPECT_NE(r.error().what().find(first[0].save_id), std::string::npos) << r.error().what();
}

}  // namespace
}  // namespace ferry::checkpoint::testing
