// NumPy's formats in the table (detail/formats.h): .npy (npy.cpp) and
// .npz (npz.cpp), a zip whose every record is a .npy.
#include <cstring>

#include "ferry/base/require.h"
#include "ferry/checkpoint/detail/formats.h"
#include "ferry/checkpoint/numpy/internal.h"

namespace ferry::checkpoint::detail {

namespace {

constexpr std::string_view npy_suffixes[] = {".npy"};
constexpr std::string_view npz_suffixes[] = {".npz"};

npy_options numpy_options(const save_options& opt) {
  auto no = writer_options<npy_options>(opt);
  no.order = opt.order.value_or(wire::host_order);
  no.compress = opt.compress;
  return no;
}

// NumPy's formats hold no metadata: it is dropped.
result<void, error> write_npy(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                              const std::map<std::string, std::string>&, const save_options& opt) {
  if (tensors.size() != 1) {
    return make_error(errc::bad_value, target.string(), ": a .npy file holds one array, not ", tensors.size(),
                      " (save an .npz)");
  }
  return save_npy(target, tensors.front(), numpy_options(opt));
}

result<void, error> write_npz(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                              const std::map<std::string, std::string>&, const save_options& opt) {
  return save_npz(target, tensors, numpy_options(opt));
}

}  // namespace

extern const format_ops npy_format{
    file_format::npy,
    "npy",
    false,
    [](const source& s, const read_options&) {
      return s.head().size() >= 6 && std::memcmp(s.head().data(), "\x93NUMPY", 6) == 0;
    },
    [](const source& s, const read_options& opt) {
      return in_file(s.path(), parse_npy(s.size(), s.read_at(), opt));
    },
    npy_suffixes,
    write_npy,
    nullptr,
};

// A zip whose records are all .npy (a .pt file is told by its data.pkl),
// or a zip of no records that is nothing but its end record (np.savez()
// of nothing; a .pt file always has records).
extern const format_ops npz_format{
    file_format::npz,
    "npz",
    false,
    [](const source& s, const read_options& opt) {
      if (!zip_head(s.head(), s.size())) return false;
      const auto& dir = s.zip(opt.lim);
      if (!dir) return false;  // the .pt parser reports the zip's error
      return dir->entries.empty() ? dir->offset == 0 : looks_like_npz(*dir);
    },
    [](const source& s, const read_options& opt) -> result<parsed_file, error> {
      auto dir = s.take_zip(opt.lim);  // read by the probe
      if (!dir) return dir.error().wrap(s.path().string());
      return in_file(s.path(), parse_npz(std::move(*dir), s.read_at(), opt));
    },
    npz_suffixes,
    write_npz,
    nullptr,
};

}  // namespace ferry::checkpoint::detail
