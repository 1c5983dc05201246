// .pt files torch 1.13 wrote on x86-64 (tests/data/pytorch, made by
// make_pt_files.py golden), read on every architecture: the values torch.load
// read there (X.pt.expected), whatever this host's byte order.
#include <unistd.h>

#include "helpers.h"
#include "pt_expected.h"

namespace ferry::checkpoint::testing {
namespace {

const fs::path pytorch_dir = fs::path(FERRY_TEST_DATA_DIR) / "pytorch";

reader open_golden(const char* name, const read_options& opt = {}) {
  auto r = reader::open(pytorch_dir / name, opt);
  EXPECT_TRUE(r) << r.error();
  return std::move(r).value();
}

// Whether every aligned, non-empty storage of `r` is handed out as a
// mapping of the file: a mapping's address lies at the storage's offset
// within its page, which a copy's almost never does.
bool zero_copy(const reader& r) {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  bool any = false;
  for (const auto& t : r.tensors()) {
    const auto& st = r.storages()[t.storage];
    if (st.nbytes < 64) continue;
    auto got = r.get(t);
    if (!got) return false;
    const auto addr = reinterpret_cast<std::uintptr_t>(got->storage_bytes().data());  // an address, not a read
    if (addr % page != st.offset % page) return false;
    any = true;
  }
  return any;
}

TEST(PytorchGolden, LittleWithoutByteOrderRecord) {
  const reader r = open_golden("golden_little.pt");
  EXPECT_EQ(r.format(), file_format::pytorch);
  EXPECT_EQ(r.order(), wire::byte_order::little);
  EXPECT_EQ(r.metadata().at("pytorch.byteorder"), "absent");
  expect_as_torch_read(r, read_expected(pytorch_dir / "golden_little.pt.expected"));
  EXPECT_TRUE(r.verify()) << r.verify().error();
  if (wire::host_order == wire::byte_order::little) {
    EXPECT_TRUE(zero_copy(r));
  }
}

TEST(PytorchGolden, BigWithSwappedStorages) {
  const reader r = open_golden("golden_big.pt");
  EXPECT_EQ(r.order(), wire::byte_order::big);
  EXPECT_EQ(r.metadata().at("pytorch.byteorder"), "big");
  expect_as_torch_read(r, read_expected(pytorch_dir / "golden_big.pt.expected"));
  EXPECT_TRUE(r.verify()) << r.verify().error();
  if (wire::host_order == wire::byte_order::big) {
    EXPECT_TRUE(zero_copy(r));
  }
}

TEST(PytorchGolden, RezippedWithoutPadding) {
  const reader r = open_golden("golden_rezipped.pt");
  expect_as_torch_read(r, read_expected(pytorch_dir / "golden_rezipped.pt.expected"));
  EXPECT_TRUE(r.verify()) << r.verify().error();
}

TEST(PytorchGolden, PickleProtocol4) {
  const reader r = open_golden("golden_protocol4.pt");
  expect_as_torch_read(r, read_expected(pytorch_dir / "golden_protocol4.pt.expected"));
}

// A file without a byteorder record, read as a big-endian writer's: the
// bytes are swapped, so values differ; the structure does not.
TEST(PytorchGolden, ThePytorchOrderOptionAppliesWithoutARecord) {
  read_options opt;
  opt.pytorch_order = wire::byte_order::big;
  const reader r = open_golden("golden_little.pt", opt);
  EXPECT_EQ(r.order(), wire::byte_order::big);
  const reader big = open_golden("golden_big.pt", opt);  // the record wins
  EXPECT_EQ(big.order(), wire::byte_order::big);
  read_options little;
  little.pytorch_order = wire::byte_order::little;
  EXPECT_EQ(open_golden("golden_big.pt", little).order(), wire::byte_order::big);
}

}  // namespace
}  // namespace ferry::checkpoint::testing
