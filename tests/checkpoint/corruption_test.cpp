// Every single-bit flip and every truncation of a small checkpoint is either
// read correctly or fails with exactly the error its position calls for.
#include <gtest/gtest.h>

#include "ferry/checkpoint/ferry/layout.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

class Corruption : public scratch_dir {
 protected:
  void SetUp() override {
    scratch_dir::SetUp();
    write_sample(dir_ / "sample.ferry", wire::host_order);
    good_ = slurp(dir_ / "sample.ferry");
    auto r = open(dir_ / "sample.ferry");
    ASSERT_TRUE(r);
    for (const auto& s : r->storages()) storages_.push_back(s);
    manifest_offset_ = good_.size() - trailer_size;
    const auto t = detail::decode_trailer(std::span(good_).last<trailer_size>());
    ASSERT_TRUE(t);
    manifest_offset_ = t->manifest_offset;
  }

  // The first error met by open(), then get() of every tensor, then verify().
  error_code first_error(std::span<const std::byte> file) {
    const auto p = dir_ / "bad.ferry";
    spit(p, file);
    auto r = open(p);
    if (!r) return r.error().code();
    for (const auto& t : r->tensors()) {
      if (auto g = r->get(t); !g) return g.error().code();
    }
    if (auto v = r->verify(); !v) return v.error().code();
    // Read correctly: the contents must then be exactly the sample's.
    expect_sample(*r);
    return {};
  }

  std::vector<std::byte> good_;
  std::vector<storage_info> storages_;
  std::uint64_t manifest_offset_ = 0;
};

TEST_F(Corruption, EverySingleBitFlip) {
  const std::size_t n = good_.size();
  for (std::size_t at = 0; at < n; ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      auto file = good_;
      file[at] ^= std::byte(1u << bit);
      const auto orig = std::to_integer<unsigned>(good_[at]);
      const auto now = std::to_integer<unsigned>(file[at]);
      error_code expect;
      if (at < 8) {
        expect = checkpoint_errc::not_a_checkpoint;  // no longer a ferry file
      } else if (at == 8) {
        expect = errc::unsupported_version;
      } else if (at == 9) {
        expect = now <= 1 ? error_code(checkpoint_errc::header_mismatch) : error_code(errc::bad_byte_order);
      } else if (at == 10 && bit == 0) {
        expect = checkpoint_errc::header_mismatch;  // flagged a set's index, which the trailer is not
      } else if (at < 12) {
        expect = errc::bad_value;
      } else if (at < 16) {
        const auto a = wire::load<std::uint32_t>(file.data() + 12, wire::host_order);
        const bool valid = std::has_single_bit(a) && a >= 64 && a <= (1u << 30);
        expect = valid ? error_code(checkpoint_errc::header_mismatch) : error_code(checkpoint_errc::bad_alignment);
      } else if (at < header_size) {
        expect = errc::bad_value;
      } else if (at >= n - 8) {
        expect = errc::truncated;  // the end magic
      } else if (at >= n - trailer_size) {
        expect = errc::checksum_mismatch;  // the trailer's CRC
      } else if (at >= manifest_offset_) {
        expect = errc::checksum_mismatch;  // the manifest's CRC
      } else {
        expect = checkpoint_errc::bad_padding;
        for (const auto& s : storages_) {
          if (at >= s.offset && at < s.offset + s.nbytes) expect = errc::checksum_mismatch;
        }
      }
      (void)orig;
      ASSERT_EQ(first_error(file), expect) << "byte " << at << " bit " << bit;
    }
  }
}

TEST_F(Corruption, EveryTruncation) {
  for (std::size_t len = 0; len < good_.size(); ++len) {
    ASSERT_EQ(first_error(std::span(good_).first(len)), errc::truncated) << "cut at " << len;
  }
  EXPECT_EQ(first_error(good_), error_code());
}

TEST_F(Corruption, AppendedBytes) {
  auto file = good_;
  file.push_back(std::byte{0});
  EXPECT_EQ(first_error(file), errc::truncated);  // the end magic moved
  // A second trailer after a copy of the file: the size field disagrees.
  file = good_;
  file.insert(file.end(), good_.begin(), good_.end());
  EXPECT_EQ(first_error(file), errc::trailing_bytes);
}

}  // namespace
}  // namespace ferry::checkpoint::testing
