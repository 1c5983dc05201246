// Write then read: the input describes tensors (dtype, shape, a view over a
// possibly shared storage, bytes) and a byte order; whatever the writer
// accepts must read back bit for bit, with sharing, from the .ferry file,
// from the .pt export (save_pt) and (with copies) from the safetensors
// export.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ferry/checkpoint/pytorch.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/safetensors.h"
#include "ferry/checkpoint/writer.h"
#include "fuzz_check.h"

namespace checkpoint_roundtrip_harness {

namespace ckpt = ferry::checkpoint;

struct input {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

const std::filesystem::path& folder() {
  static const std::filesystem::path dir = [] {
    std::string t = (std::filesystem::temp_directory_path() / "ferry-fuzz.XXXXXX").string();
    FUZZ_CHECK(::mkdtemp(t.data()) != nullptr);
    return std::filesystem::path(t);
  }();
  return dir;
}

}  // namespace checkpoint_roundtrip_harness

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace checkpoint_roundtrip_harness;
  input in{data, size};
  const auto order = (in.byte() & 1) ? ferry::wire::byte_order::big : ferry::wire::byte_order::little;
  const std::size_t count = in.byte() % 8;
  std::vector<std::vector<std::byte>> storages;
  std::vector<std::string> names;
  std::vector<std::vector<std::uint64_t>> shapes, strides;
  struct spec {
    ferry::codec::dtype dtype;
    std::uint64_t offset;
    std::size_t storage;
  };
  std::vector<spec> specs;
  for (std::size_t i = 0; i < count; ++i) {
    const auto dtype = ferry::codec::all_dtypes[in.byte() % std::size(ferry::codec::all_dtypes)];
    const std::size_t width = ferry::codec::size_of(dtype);
    const std::uint8_t how = in.byte();
    std::size_t storage = storages.size();
    if ((how & 1) && !storages.empty()) {
      storage = in.byte() % storages.size();  // share an earlier storage
    } else {
      std::vector<std::byte> bytes((in.byte() % 16) * width);
      for (auto& b : bytes) b = std::byte{in.byte()};
      storages.push_back(std::move(bytes));
    }
    const std::size_t dims = (how >> 1) % 4;
    std::vector<std::uint64_t> shape(dims), stride(dims);
    for (std::size_t d = 0; d < dims; ++d) {
      shape[d] = in.byte() % 5;
      stride[d] = in.byte() % 6;
    }
    if ((how >> 3) & 1) stride.clear();  // contiguous
    names.push_back(std::string("t") + std::to_string(i) + ((how >> 4) & 1 ? "\xC3\xA9" : ""));
    shapes.push_back(std::move(shape));
    strides.push_back(std::move(stride));
    specs.push_back({dtype, static_cast<std::uint64_t>(in.byte() % 8), storage});
  }
  std::vector<ckpt::tensor_ref> refs;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    refs.push_back({names[i], specs[i].dtype, shapes[i], strides[i], specs[i].offset, storages[specs[i].storage]});
  }

  const auto path = folder() / "f.ferry";
  ckpt::write_options opt;
  opt.order = order;
  opt.sync = false;
  auto w = ckpt::writer::create(path, opt);
  FUZZ_CHECK(w.has_value());
  std::vector<std::size_t> accepted;
  std::map<std::size_t, ckpt::storage_id> written;  // input storage -> file storage
  for (std::size_t i = 0; i < refs.size(); ++i) {
    const auto it = written.find(specs[i].storage);
    const auto id = it == written.end() ? w->add(refs[i]) : w->add(refs[i], it->second);
    if (!id) continue;
    accepted.push_back(i);
    written.emplace(specs[i].storage, *id);
  }
  FUZZ_CHECK(w->set_metadata("k", "v").has_value());
  FUZZ_CHECK(w->commit().has_value());

  auto r = ckpt::open(path);
  FUZZ_CHECK(r.has_value());
  FUZZ_CHECK(r->tensors().size() == accepted.size());
  FUZZ_CHECK(r->verify().has_value());
  std::map<std::size_t, const void*> storage_seen;  // input storage -> loaded storage
  std::vector<ckpt::tensor> held;
  for (const std::size_t i : accepted) {
    auto t = r->get(std::string(refs[i].name));
    FUZZ_CHECK(t.has_value());
    FUZZ_CHECK(t->contiguous_copy() == ckpt::gather(refs[i]));
    const auto [it, fresh] = storage_seen.emplace(specs[i].storage, t->storage().get());
    FUZZ_CHECK(fresh || it->second == t->storage().get());  // sharing comes back
    held.push_back(std::move(*t));
  }

  // On to .pt, every tensor (torch has a name for every ferry dtype).
  {
    const auto pt = folder() / "f.pt";
    std::vector<ckpt::tensor_ref> refs_back;
    for (const auto& t : held) refs_back.push_back(t.ref());
    ckpt::pt_options po;
    po.sync = false;
    FUZZ_CHECK(ckpt::save_pt(pt, refs_back, po).has_value());
    auto p = ckpt::open(pt);
    FUZZ_CHECK(p.has_value());
    FUZZ_CHECK(p->tensors().size() == held.size());
    FUZZ_CHECK(p->verify().has_value());
    for (const auto& t : held) {
      auto u = p->get(t.name());
      FUZZ_CHECK(u.has_value());
      FUZZ_CHECK(u->dtype() == t.dtype() && u->info().strides == t.info().strides);
      FUZZ_CHECK(u->contiguous_copy() == t.contiguous_copy());
    }
  }

  // On to safetensors, the tensors of the dtypes it has (C32, C128 and the
  // fnuz FP8s it lacks are refused, tested in safetensors_test.cpp).
  std::erase_if(held, [](const ckpt::tensor& t) { return ckpt::safetensors_dtype_name(t.dtype()).empty(); });
  const auto st = folder() / "f.safetensors";
  std::vector<ckpt::tensor_ref> back;
  for (const auto& t : held) back.push_back(t.ref());
  ckpt::safetensors_options so;
  so.shared = ckpt::safetensors_options::shared_policy::copy;
  so.sync = false;
  FUZZ_CHECK(ckpt::save_safetensors(st, back, r->metadata(), so).has_value());
  auto s = ckpt::open(st);
  FUZZ_CHECK(s.has_value());
  for (const auto& t : held) {
    auto u = s->get(t.name());
    FUZZ_CHECK(u.has_value());
    FUZZ_CHECK(u->contiguous_copy() == t.contiguous_copy());
  }
  return 0;
}
