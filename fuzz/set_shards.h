// Shards on disk for the set-index fuzzers: a folder, made once per process,
// holding two .ferry shards of one save (tensor "w" in two pieces, "b" and
// its tied twin "c" whole), a shard of an earlier save ("d") and two
// safetensors files, so that an index the
// fuzzer writes beside them opens real shards. Removed at exit.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ferry/checkpoint/safetensors.h"
#include "ferry/checkpoint/set.h"
#include "fuzz_check.h"

namespace ferry::fuzzing {

class set_shards {
 public:
  static constexpr const char* save_id = "00000000000000aa";
  static constexpr const char* earlier_id = "00000000000000bb";

  set_shards() {
    std::string templ = (std::filesystem::temp_directory_path() / "ferry-fuzz-set.XXXXXX").string();
    FUZZ_CHECK(::mkdtemp(templ.data()) != nullptr);
    dir_ = templ;
    namespace ck = ferry::checkpoint;
    std::vector<float> w(100), b(7);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) - 50.5f;
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) * 0.25f;
    const std::uint64_t wshape[] = {10, 10}, bshape[] = {7};
    const ck::tensor_ref tw{"w", codec::dtype::f32, wshape, {}, 0, std::as_bytes(std::span(w))};
    const ck::tensor_ref tb{"b", codec::dtype::f32, bshape, {}, 0, std::as_bytes(std::span(b))};
    const ck::tensor_ref tc{"c", codec::dtype::f32, bshape, {}, 0, std::as_bytes(std::span(b))};
    ck::write_options opt;
    opt.sync = false;
    std::vector<ck::shard_record> records;
    for (std::uint32_t k = 0; k < 2; ++k) {
      opt.order = k == 0 ? wire::byte_order::little : wire::byte_order::big;
      auto s = ck::shard_writer::create(dir_ / "s.ferry", save_id, k, 2, opt);
      FUZZ_CHECK(s.has_value());
      FUZZ_CHECK(s->add_piece(tw, k == 0 ? 0 : 40, k == 0 ? 40 : 60).has_value());
      if (k == 1) {
        FUZZ_CHECK(s->add(tb).has_value());
        FUZZ_CHECK(s->add(tc).has_value());
      }
      auto r = s->commit();
      FUZZ_CHECK(r.has_value());
      records.push_back(std::move(*r));
    }
    FUZZ_CHECK(ck::commit_set(dir_ / "s.ferry", save_id, 2, records, {{"epoch", "1"}}, opt).has_value());
    // A shard of an earlier save of another world (rank 0 of 3), for
    // incremental indexes: tensor "d", which s.ferry does not name.
    auto e = ck::shard_writer::create(dir_ / "s.ferry", earlier_id, 0, 3, opt);
    FUZZ_CHECK(e.has_value());
    const ck::tensor_ref td{"d", codec::dtype::f32, bshape, {}, 0, std::as_bytes(std::span(b))};
    FUZZ_CHECK(e->add(td).has_value());
    FUZZ_CHECK(e->commit().has_value());
    ck::safetensors_options so;
    so.sync = false;
    FUZZ_CHECK(ck::save_safetensors(dir_ / "a.safetensors", std::span(&tw, 1), {}, so).has_value());
    FUZZ_CHECK(ck::save_safetensors(dir_ / "b.safetensors", std::span(&tb, 1), {}, so).has_value());
  }
  ~set_shards() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  set_shards(const set_shards&) = delete;
  set_shards& operator=(const set_shards&) = delete;

  /// Writes `bytes` as the file `name` in the folder; returns its path.
  std::filesystem::path put(const char* name, std::span<const std::byte> bytes) const {
    const auto p = dir_ / name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    FUZZ_CHECK(out.good());
    return p;
  }
  [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }

 private:
  std::filesystem::path dir_;
};

}  // namespace ferry::fuzzing
