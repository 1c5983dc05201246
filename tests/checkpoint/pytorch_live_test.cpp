// .pt files written by Debian's python3-torch just before this test runs
// (the CTest fixture checkpoint_pytorch_files runs make_pt_files.py live on
// the build machine), read by ferry on every architecture and compared with
// what torch.load read from them: values bit for bit, dtypes, shapes,
// strides, offsets, sharing and the non-tensor leaves. The same test reads
// the files torch 2.6 wrote in Debian 13's roots (x86-64, and s390x under
// qemu: big-endian files) when FERRY_PT_LIVE_DIR names their folder
// (tests/CMakeLists.txt: checkpoint_pytorch26_*). And ferry writes each
// again as a .pt file that torch.load(weights_only=True) checks.
#include <algorithm>
#include <cstdlib>

#include "ferry/checkpoint/pytorch/internal.h"
#include "ferry/checkpoint/pytorch/pickle.h"
#include "ferry/checkpoint/pytorch.h"
#include "helpers.h"
#include "pt_expected.h"

namespace ferry::checkpoint::testing {
namespace {

const fs::path live_dir = std::getenv("FERRY_PT_LIVE_DIR") ? std::getenv("FERRY_PT_LIVE_DIR") : FERRY_PT_LIVE_DIR;

class PytorchLive : public ::testing::Test {
 protected:
  void expect_file(const char* name) {
    SCOPED_TRACE(name);
    auto r = reader::open(live_dir / name);
    ASSERT_TRUE(r) << r.error();
    expect_as_torch_read(*r, read_expected(live_dir / (std::string(name) + ".expected")));
    EXPECT_TRUE(r->verify()) << r->verify().error();
  }
};

TEST_F(PytorchLive, EveryFileReadsAsTorchReadsIt) {
  for (const char* name : {"state_dict.pt", "adam.pt", "nested.pt", "dtypes.pt", "dtypes_2.pt", "stream.pt",
                           "protocol4.pt", "empty_state_dict.pt", "no_tensors.pt", "many_tensors.pt"}) {
    expect_file(name);
  }
}

TEST_F(PytorchLive, TiedWeightsShareOneStorage) {
  auto r = reader::open(live_dir / "state_dict.pt");
  ASSERT_TRUE(r) << r.error();
  std::size_t shared = 0;
  for (const auto& t : r->tensors()) shared += !r->shared_with(t).empty();
  EXPECT_GE(shared, 2u);
  auto all = r->get_all();
  ASSERT_TRUE(all) << all.error();
  for (const auto& a : *all) {
    for (const auto& b : *all) {
      if (a.info().storage == b.info().storage) {
        EXPECT_EQ(a.storage().get(), b.storage().get());
      }
    }
  }
}

TEST_F(PytorchLive, BitsTypesKeepTheirNames) {
  auto r = reader::open(live_dir / "dtypes_2.pt");
  ASSERT_TRUE(r) << r.error();
  const auto m = r->metadata();
  const auto raw = m.find("pytorch.raw_dtypes");
  if (r->find("bits16") == nullptr) {  // torch 1.13 saves no bits types
    EXPECT_EQ(raw, m.end());
    return;
  }
  ASSERT_NE(raw, m.end());
  EXPECT_EQ(raw->second, R"({"bits16":"torch.bits16","bits8":"torch.bits8"})");
  EXPECT_EQ(r->find("bits16")->dtype, codec::dtype::u16);
}

TEST_F(PytorchLive, APickledTensorCostsAboutTwoKiB) {
  // What limits::max_pickle_memory's documentation promises: torch.save's
  // pickle of 2000 tensors runs in at most 2 KiB of values per tensor.
  const auto bytes = slurp(live_dir / "many_tensors.pt");
  auto parsed = detail::parse_pytorch(bytes.size(), detail::memory_reader(bytes), {});
  ASSERT_TRUE(parsed) << parsed.error();
  ASSERT_EQ(parsed->tensors.size(), 2000u);
  const auto pkl = std::find_if(parsed->other_records.begin(), parsed->other_records.end(),
                                [](const auto& r) { return r.name.ends_with("/data.pkl"); });
  ASSERT_NE(pkl, parsed->other_records.end());
  const auto program = detail::pickle::run(
      std::span(bytes).subspan(static_cast<std::size_t>(pkl->data_offset), static_cast<std::size_t>(pkl->size)), {});
  ASSERT_TRUE(program) << program.error();
  EXPECT_LE(program->memory / 2000, 2048u) << program->memory;
}

// Every file with tensors, as ferry read it, written again by save_pt()
// into FOLDER/ferry, where torch.load(weights_only=True) reads it back
// (make_pt_files.py check, the CTest checkpoint_pytorch*_torch_reads_ferry
// after this test): the tensors of X.pt.expected, bit for bit, with their
// dtypes, shapes, strides, offsets and sharing.
TEST_F(PytorchLive, FerryWritesWhatTorchLoads) {
  const fs::path out = live_dir / "ferry";
  fs::create_directories(out);
  for (const char* name : {"state_dict.pt", "adam.pt", "nested.pt", "dtypes.pt", "dtypes_2.pt", "stream.pt",
                           "protocol4.pt", "empty_state_dict.pt", "many_tensors.pt"}) {
    SCOPED_TRACE(name);
    auto r = reader::open(live_dir / name);
    ASSERT_TRUE(r) << r.error();
    auto all = r->get_all();
    ASSERT_TRUE(all) << all.error();
    std::vector<tensor_ref> refs;
    for (const auto& t : *all) refs.push_back(t.ref());
    pt_options opt;
    opt.sync = false;
    auto saved = save_pt(out / name, refs, opt);
    ASSERT_TRUE(saved) << saved.error();
    // ferry reads its own file as it read torch's.
    auto again = reader::open(out / name);
    ASSERT_TRUE(again) << again.error();
    EXPECT_TRUE(again->verify()) << again->verify().error();
    ASSERT_EQ(again->tensors().size(), r->tensors().size());
    EXPECT_EQ(again->storages().size(), r->storages().size());
    for (std::size_t i = 0; i < refs.size(); ++i) {
      const auto got = again->get(again->tensors()[i].name);
      ASSERT_TRUE(got) << got.error();
      EXPECT_EQ(got->info().shape, (*all)[i].info().shape) << refs[i].name;
      EXPECT_EQ(got->info().strides, (*all)[i].info().strides) << refs[i].name;
      EXPECT_EQ(got->info().offset, (*all)[i].info().offset) << refs[i].name;
      EXPECT_TRUE(std::ranges::equal(got->storage_bytes(), (*all)[i].storage_bytes())) << refs[i].name;
    }
  }
}

TEST_F(PytorchLive, OtherKindsOfFileSaySo) {
  for (const auto& [name, kind] : {std::pair{"torchscript.pt", "TorchScript"}, std::pair{"legacy2.pt", "legacy"},
                                   std::pair{"legacy4.pt", "legacy"}}) {
    auto r = reader::open(live_dir / name);
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.error().code(), checkpoint_errc::unsupported_pytorch) << r.error().what();
    EXPECT_NE(r.error().what().find(kind), std::string::npos) << r.error().what();
  }
}

}  // namespace
}  // namespace ferry::checkpoint::testing
