// PyTorch's formats in the table (detail/formats.h): a torch.save zip
// (read.cpp), and the legacy pickle stream torch.save wrote before 1.6,
// told apart to be refused with advice.
#include "ferry/checkpoint/detail/formats.h"
#include "ferry/checkpoint/error.h"
#include "ferry/checkpoint/pytorch.h"
#include "ferry/checkpoint/pytorch/internal.h"

namespace ferry::checkpoint::detail {

namespace {

constexpr std::string_view pt_suffixes[] = {".pt", ".pth"};

result<void, error> check_pt(const std::filesystem::path& target, const save_options& opt) {
  return little_endian_only(target, ".pt", opt);
}

// torch.save's layout holds no metadata: it is dropped.
result<void, error> write_pt(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                             const std::map<std::string, std::string>&, const save_options& opt) {
  auto po = writer_options<pt_options>(opt);
  return save_pt(target, tensors, po);
}

}  // namespace

// Any zip the .npz probe before it left: a .pt file, or a zip of
// something else that parse_pytorch() tells apart and refuses.
extern const format_ops pytorch_format{
    file_format::pytorch,
    "pytorch",
    false,
    [](const source& s, const read_options&) { return zip_head(s.head(), s.size()); },
    [](const source& s, const read_options& opt) -> result<parsed_file, error> {
      auto dir = s.take_zip(opt.lim);
      if (!dir) return dir.error().wrap(s.path().string());
      return in_file(s.path(), parse_pytorch(std::move(*dir), s.read_at(), opt));
    },
    pt_suffixes,
    write_pt,
    check_pt,
};

extern const format_ops pytorch_legacy_format{
    file_format::pytorch,
    "pytorch-legacy",
    false,
    [](const source& s, const read_options&) { return legacy_pytorch(s.head()); },
    [](const source& s, const read_options&) -> result<parsed_file, error> {
      return s.fail(checkpoint_errc::unsupported_pytorch, 0,
                    "a legacy torch.save file (PyTorch before 1.6, not a zip): re-save it with a newer torch.save");
    },
    {},  // never written
    nullptr,
    nullptr,
};

}  // namespace ferry::checkpoint::detail
