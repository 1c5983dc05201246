// save_pt(): tensors as torch.save writes a state dict (pytorch.h says
// what the file holds): a zip of stored records, data.pkl first, written
// in one sequential pass (zip/zip.h's writer) and published atomically.
#include <algorithm>
#include <cassert>
#include <climits>
#include <map>
#include <set>
#include <tuple>

#include "ferry/base/file.h"
#include "ferry/checkpoint/pytorch/pickle.h"
#include "ferry/checkpoint/zip/zip.h"
#include "ferry/checkpoint/pytorch.h"
#include "ferry/wire/cursor.h"

namespace ferry::checkpoint {
namespace {

// A protocol 2 pickle, written forward: the opcodes torch.save's Pickler
// uses for a state dict, with each global and repeated string memoized
// once (BINPUT) and fetched after (BINGET), as Python's Pickler does. The
// memo holds a few globals and two strings: one-byte slots suffice.
class pickler {
 public:
  pickler() { op(0x80), op(2); }  // PROTO 2
  void op(std::uint8_t code) { out_.push_back(static_cast<std::byte>(code)); }
  void u32(std::uint32_t v) {
    const auto b = wire::to_bytes<std::uint32_t>(v, wire::byte_order::little);
    out_.insert(out_.end(), b.begin(), b.end());
  }
  // Requires: v <= INT64_MAX (save_pt checks offsets and strides).
  void integer(std::uint64_t v) {
    assert(v <= static_cast<std::uint64_t>(INT64_MAX));
    if (v < 0x100) {
      op('K'), op(static_cast<std::uint8_t>(v));  // BININT1
    } else if (v < 0x10000) {
      op('M'), op(static_cast<std::uint8_t>(v)), op(static_cast<std::uint8_t>(v >> 8));  // BININT2
    } else if (v < 0x80000000) {
      op('J'), u32(static_cast<std::uint32_t>(v));  // BININT
    } else {  // LONG1: 8 bytes, two's complement, positive below 2^63
      op(0x8a), op(8);
      const auto b = wire::to_bytes<std::uint64_t>(v, wire::byte_order::little);
      out_.insert(out_.end(), b.begin(), b.end());
    }
  }
  void text(std::string_view s) {
    op('X'), u32(static_cast<std::uint32_t>(s.size()));  // BINUNICODE (names are below 4 GiB)
    append(s);
  }
  void global(std::string_view module, std::string_view name) {
    memoized(std::string(module) + "\n" + std::string(name), [&] {
      op('c');  // GLOBAL "module\nname\n"
      append(module), op('\n'), append(name), op('\n');
    });
  }
  void short_text(std::string_view s) {
    memoized("\x01" + std::string(s), [&] { text(s); });
  }
  void tuple(std::span<const std::uint64_t> v) {
    op('(');  // MARK
    for (const std::uint64_t x : v) integer(x);
    op('t');  // TUPLE
  }
  [[nodiscard]] std::vector<std::byte> take() {
    op('.');  // STOP
    return std::move(out_);
  }

 private:
  void append(std::string_view s) {
    const auto b = std::as_bytes(std::span(s));
    out_.insert(out_.end(), b.begin(), b.end());
  }
  // A string or global made once, then fetched from the memo.
  void memoized(const std::string& key, const auto& make) {
    if (const auto it = memo_.find(key); it != memo_.end()) {
      op('h'), op(it->second);  // BINGET
      return;
    }
    make();
    assert(memo_.size() < 0x100);
    const auto slot = static_cast<std::uint8_t>(memo_.size());
    memo_.emplace(key, slot);
    op('q'), op(slot);  // BINPUT
  }

  std::vector<std::byte> out_;
  std::map<std::string, std::uint8_t> memo_;
};

// One storage of the file: the refs' bytes it holds, written once.
struct storage_plan {
  std::span<const std::byte> bytes;
  codec::dtype dtype;    ///< its first tensor's
  bool untyped = false;  ///< a torch.storage.UntypedStorage (v3 tensors)
};

// Which refs share a storage in the file: equal spans, and what torch lets
// share one: a storage class (FloatStorage...) holds tensors of its dtype
// alone; an UntypedStorage, tensors of any dtypes without a class (the
// float8s as views of one byte buffer), of one element size and byte-swap
// unit (ferry's reader and a big-endian writer need those). Other
// combinations get one storage each, a copy of the bytes.
using storage_key = std::tuple<const std::byte*, std::size_t, int, std::size_t, std::size_t>;
storage_key key_of(const tensor_ref& t, bool untyped) {
  return {t.storage.data(), t.storage.size(), untyped ? -1 : static_cast<int>(t.dtype), codec::size_of(t.dtype),
          codec::order_width(t.dtype)};
}

}  // namespace

result<void, error> save_pt(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                            const pt_options& opt) {
  const std::string file = target.string();
  const auto fail = [&](error_code c, std::string_view what) { return error(c, file + ": " + std::string(what)); };
  if (tensors.size() > opt.limits.max_tensors) {
    return fail(errc::limit_exceeded,
                std::to_string(tensors.size()) + " tensors, over max_tensors " + std::to_string(opt.limits.max_tensors));
  }

  // Check every ref and group them by storage (key_of), in order of first
  // appearance, before anything is written.
  std::map<storage_key, std::uint32_t> storage_of;
  std::vector<storage_plan> storages;
  std::vector<std::uint32_t> tensor_storage(tensors.size());
  std::vector<detail::pickle::torch_name> torch_names(tensors.size());
  std::vector<std::vector<std::uint64_t>> strides(tensors.size());
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const tensor_ref& t = tensors[i];
    if (!valid_name(t.name, opt.limits.max_name_bytes)) return fail(checkpoint_errc::bad_name, "tensor " + quote(t.name));
    if (!names.insert(t.name).second) return fail(errc::duplicate_key, "tensor " + quote(t.name));
    const auto torch = detail::pickle::torch_name_of(t.dtype);
    if (!torch) {
      return fail(codec_errc::unknown_dtype,
                  "tensor " + quote(t.name) + ": .pt has no dtype " + std::string(codec::name(t.dtype)));
    }
    torch_names[i] = *torch;
    const std::size_t width = codec::size_of(t.dtype);
    if (t.storage.size() % width != 0) {
      return fail(checkpoint_errc::shape_size_mismatch,
                  "tensor " + quote(t.name) + ": a storage of " + std::to_string(t.storage.size()) +
                      " bytes is not whole " + std::to_string(width) + "-byte elements");
    }
    strides[i].assign(t.strides.begin(), t.strides.end());
    if (strides[i].empty()) strides[i] = contiguous_strides(t.shape);
    if (auto r = check_view(t.dtype, t.shape, strides[i], t.offset, t.storage.size(), opt.limits.max_dims); !r) {
      return fail(r.error(), "tensor " + quote(t.name));
    }
    // check_view() bounds what a tensor reaches, not a stride over an
    // extent of 1 or the offset of an empty tensor: a pickle int is signed.
    constexpr auto max = static_cast<std::uint64_t>(INT64_MAX);
    if (t.offset > max || std::ranges::any_of(strides[i], [](std::uint64_t s) { return s > max; })) {
      return fail(checkpoint_errc::shape_overflow, "tensor " + quote(t.name) + ": an offset or stride over 2^63 - 1");
    }
    const auto [it, fresh] =
        storage_of.emplace(key_of(t, torch->is_dtype), static_cast<std::uint32_t>(storages.size()));
    if (fresh) storages.push_back({t.storage, t.dtype, torch->is_dtype});
    tensor_storage[i] = it->second;
  }

  // data.pkl: {name: _rebuild_tensor_v2(storage, offset, size, stride,
  // False, OrderedDict()), ...}, or _rebuild_tensor_v3(..., dtype) over an
  // UntypedStorage for dtypes without a storage class.
  pickler p;
  p.op('}');  // EMPTY_DICT
  p.op('(');  // MARK
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const tensor_ref& t = tensors[i];
    const auto& torch = torch_names[i];
    const storage_plan& s = storages[tensor_storage[i]];
    p.text(t.name);
    p.global("torch._utils", torch.is_dtype ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
    p.op('(');
    p.op('(');  // the persistent id ('storage', type, key, 'cpu', numel)
    p.short_text("storage");
    if (s.untyped) {
      p.global("torch.storage", "UntypedStorage");
    } else {
      p.global(torch.module, torch.name);
    }
    p.text(std::to_string(tensor_storage[i]));
    p.short_text("cpu");
    p.integer(s.untyped ? s.bytes.size() : s.bytes.size() / codec::size_of(s.dtype));
    p.op('t');
    p.op('Q');  // BINPERSID
    p.integer(t.offset);
    p.tuple(t.shape);
    p.tuple(strides[i]);
    p.op(0x89);  // NEWFALSE: requires_grad
    p.global("collections", "OrderedDict");
    p.op(')');  // EMPTY_TUPLE
    p.op('R');  // REDUCE: the backward hooks, an empty OrderedDict
    if (torch.is_dtype) p.global(torch.module, torch.name);
    p.op('t');
    p.op('R');
  }
  p.op('u');  // SETITEMS
  const std::vector<std::byte> pickle = p.take();

  FERRY_TRY_ASSIGN(auto out, base::atomic_file::create(target, opt.sync, opt.sync && opt.direct));
  std::vector<detail::zip_written> records;
  records.reserve(storages.size() + 3);
  const auto add = [&](std::string name, std::uint64_t size, const detail::zip_emit& emit) -> result<void, error> {
    FERRY_TRY_ASSIGN(auto r, detail::write_stored_record(out, "archive/" + std::move(name), size, emit));
    records.push_back(std::move(r));
    return {};
  };
  const auto bytes_of = [](std::span<const std::byte> b) {
    return [b](const detail::zip_sink& sink) { return sink(b); };
  };
  FERRY_TRY(add("data.pkl", pickle.size(), bytes_of(pickle)));
  FERRY_TRY(add("byteorder", 6, bytes_of(std::as_bytes(std::span("little", 6)))));
  for (std::size_t k = 0; k < storages.size(); ++k) {
    const storage_plan& s = storages[k];
    FERRY_TRY(add("data/" + std::to_string(k), s.bytes.size(), [&](const detail::zip_sink& sink) {
      return detail::emit_in_order(s.bytes, codec::order_width(s.dtype), wire::byte_order::little, sink);
    }));
  }
  FERRY_TRY(add("version", 2, bytes_of(std::as_bytes(std::span("3\n", 2)))));
  FERRY_TRY(out.write(detail::zip_central_directory(records, out.size())));
  return out.commit();
}

}  // namespace ferry::checkpoint
