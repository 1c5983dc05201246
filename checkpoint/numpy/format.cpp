// NumPy's formats in the table (detail/formats.h): .npy (npy.cpp) and
// .npz (npz.cpp), a zip whose every record is a .npy.
#include <cstring>

#include "ferry/checkpoint/detail/formats.h"
#include "ferry/checkpoint/numpy/internal.h"

namespace ferry::checkpoint::detail {

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
    [](const source& s, const read_options& opt) {
      zip_directory dir = *s.zip(opt.lim);  // read by the probe
      return in_file(s.path(), parse_npz(std::move(dir), s.read_at(), opt));
    },
};

}  // namespace ferry::checkpoint::detail
