// ferry convert IN OUT: any checkpoint ferry reads to .ferry, .safetensors,
// .pt, .gguf, .npy or .npz, optionally cast and in another byte order. Every
// output is written atomically (a temporary file, renamed over OUT on
// success), so OUT may be IN.
//
// GGUF -> GGUF without --cast or --alignment is convert_gguf_order(): a
// streaming byte-order conversion that keeps every field and every block
// (LE -> BE -> LE gives the original bytes). Otherwise tensors pass through
// host order: .ferry output streams storage by storage (each released after
// its last tensor); the other writers take every tensor at once (mapped, not
// read, where the input's order is the host's).
//
// Quantized GGUF tensors keep their blocks only into .gguf; for any other
// output they need --cast, which dequantizes them to f32 (ferry's reference
// dequantizer, gguf.h get_dequantized()) and then casts like every floating
// tensor. Without it the first such tensor is refused (quantized_tensor),
// before anything is written.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <optional>
#include <string_view>
#include <vector>

#include "cli.h"
#include "error.h"
#include "ferry/checkpoint/cast.h"
#include "ferry/checkpoint/formats.h"
#include "ferry/checkpoint/safetensors.h"
#include "ferry/checkpoint/set.h"
#include "ferry/checkpoint/writer.h"

namespace ferry::tools {
namespace {

// The input's tensors as a writer takes them: host order, floating storages
// cast (--cast), quantized GGUF tensors dequantized (--cast) or as their
// host-order blocks (u8, for a .gguf output).
class fetcher {
 public:
  fetcher(const ckpt::reader& r, std::optional<ferry::codec::dtype> cast_to)
      : r_(r), cast_to_(cast_to), cast_ok_(r.storages().size(), cast_to.has_value()), live_(r.storages().size()),
        shapes_(r.tensors().size()) {
    // Which storages are cast: floating ones whose tensors all have its dtype.
    for (const auto& t : r.tensors()) {
      const auto& s = r.storages()[t.storage];
      if (!ferry::codec::is_floating_point(s.dtype) || t.dtype != s.dtype || s.dtype == cast_to) {
        cast_ok_[t.storage] = false;
      }
    }
  }

  // Tensor i; its spans stay valid until release() of its storage.
  result<ckpt::tensor_ref, error> get(std::size_t i) {
    const ckpt::tensor_info& t = r_.tensors()[i];
    auto& buf = live_[t.storage];
    if (cast_to_ && is_quantized(r_, t)) {  // one storage per tensor (GGUF)
      if (!buf) {
        FERRY_TRY_ASSIGN(auto f32, ckpt::get_dequantized(r_, t.name));
        shapes_[i].assign(f32.shape().begin(), f32.shape().end());
        buf = f32.storage();
        if (*cast_to_ != ferry::codec::dtype::f32) {
          auto c = ckpt::cast(ferry::codec::dtype::f32, buf->bytes(), *cast_to_);
          if (!c) return ferry::error(c.error(), r_.path().string() + ": tensor " + quote(t.name));
          buf = std::make_shared<ckpt::owned_storage>(std::move(c).value());
        }
      }
      return ckpt::tensor_ref{t.name, *cast_to_, shapes_[i], {}, 0, buf->bytes()};
    }
    if (!buf) {
      FERRY_TRY_ASSIGN(auto got, r_.get(t));
      buf = got.storage();
      if (cast_ok_[t.storage]) {
        auto c = ckpt::cast(t.dtype, buf->bytes(), *cast_to_);
        buf = std::make_shared<ckpt::owned_storage>(std::move(c).value());
      }
    }
    return ckpt::tensor_ref{t.name, cast_ok_[t.storage] ? *cast_to_ : t.dtype, t.shape, t.strides, t.offset,
                            buf->bytes()};
  }

  void release(std::uint32_t storage) { live_[storage].reset(); }

 private:
  const ckpt::reader& r_;
  std::optional<ferry::codec::dtype> cast_to_;
  std::vector<bool> cast_ok_;
  std::vector<std::shared_ptr<const ckpt::storage_buffer>> live_;
  std::vector<std::vector<std::uint64_t>> shapes_;  // of dequantized tensors, by tensor index
};

// Every tensor, fetched, with the progress bar advanced per storage.
result<std::vector<ckpt::tensor_ref>, error> fetch_all(const ckpt::reader& r, fetcher& f, progress_bar& bar) {
  std::vector<ckpt::tensor_ref> refs;
  std::vector<bool> counted(r.storages().size());
  std::uint64_t done = 0;
  for (std::size_t i = 0; i < r.tensors().size(); ++i) {
    FERRY_TRY_ASSIGN(auto ref, f.get(i));
    refs.push_back(ref);
    const auto s = r.tensors()[i].storage;
    if (!counted[s]) {
      done += r.storages()[s].nbytes;
      counted[s] = true;
    }
    bar.update(done);
  }
  return refs;
}

// GGUF metadata for a GGUF output: a GGUF input's, typed; text from other
// formats as strings, but for general.alignment, which GGUF requires as a
// u32 (a GGUF file's alignment survives a trip through safetensors).
// --alignment sets general.alignment.
std::vector<ckpt::gguf_kv> gguf_metadata(const ckpt::reader& r, const convert_options& o) {
  std::vector<ckpt::gguf_kv> md;
  if (const ckpt::gguf_header* h = r.gguf()) {
    md = h->metadata;
  } else {
    for (const auto& [k, v] : r.metadata()) {
      std::uint32_t n = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (k != "general.alignment") md.push_back({k, v});
      else if (ec == std::errc() && end == v.data() + v.size()) md.push_back({k, n});
    }
  }
  if (o.alignment_given) {
    std::erase_if(md, [](const ckpt::gguf_kv& kv) { return kv.key == "general.alignment"; });
    md.push_back({"general.alignment", o.alignment});
  }
  return md;
}

// Bytes someone else holds, seen as a storage (to gather a view).
class borrowed_storage final : public ckpt::storage_buffer {
 public:
  explicit borrowed_storage(std::span<const std::byte> bytes) noexcept { bytes_ = bytes; }
};

// GGUF tensors for save_gguf(): quantized ones as their blocks, the others
// through to_gguf_tensor(), gathered into row-major order first when their
// view is not (a .npy in Fortran order); `gathered` holds those copies.
result<std::vector<ckpt::gguf_tensor_ref>, error> gguf_tensors(const ckpt::reader& r,
                                                               std::span<const ckpt::tensor_ref> refs,
                                                               std::vector<std::vector<std::byte>>& gathered) {
  std::vector<ckpt::gguf_tensor_ref> out;
  gathered.reserve(refs.size());
  for (std::size_t i = 0; i < refs.size(); ++i) {
    const ckpt::tensor_ref& ref = refs[i];
    const ckpt::tensor_info& t = r.tensors()[i];
    if (is_quantized(r, t) && ref.dtype == ferry::codec::dtype::u8) {  // blocks, not dequantized
      const ckpt::gguf_tensor* g = gguf_tensor_of(r, t);
      out.push_back({ref.name, g->type, g->ne, ref.storage.subspan(static_cast<std::size_t>(ref.offset), t.nbytes())});
      continue;
    }
    auto g = ckpt::to_gguf_tensor(ref);
    if (!g && !ref.strides.empty() && ref.strides.size() == ref.shape.size()) {
      ckpt::tensor_info info{std::string(ref.name), ref.dtype,      {ref.shape.begin(), ref.shape.end()},
                             {ref.strides.begin(), ref.strides.end()}, ref.offset, 0};
      gathered.push_back(ckpt::tensor(std::move(info), std::make_shared<borrowed_storage>(ref.storage)).contiguous_copy());
      ckpt::tensor_ref row_major = ref;
      row_major.strides = {};
      row_major.offset = 0;
      row_major.storage = gathered.back();
      g = ckpt::to_gguf_tensor(row_major);
    }
    if (!g) return g.error().wrap(r.path().string());
    out.push_back(std::move(*g));
  }
  return out;
}

int usage_error(const std::string& what) {
  std::fprintf(stderr, "ferry: %s\n", ferry::printable(what).c_str());
  return 2;
}

}  // namespace

int convert(const std::string& in, const std::string& out, const convert_options& o) {
  // --format, else OUT's suffix (the format table's choice; an index of
  // shards is safetensors'), else .ferry.
  auto chosen = ckpt::format_to_write(o.format, out);
  if (o.format.empty() && out.ends_with(".index.json")) chosen = ckpt::file_format::safetensors;
  if (!chosen) return usage_error(chosen.error().what());
  const ckpt::file_format format = *chosen;
  const auto order = ferry::wire::byte_order_from_name(o.order);
  ckpt::save_options so;  // for the table's writers (all but GGUF, sets and the streamed .ferry)
  so.order = order;
  so.alignment = o.alignment;
  so.compress = o.compress;
  so.shared = o.shared;
  if (out.ends_with(".index.json") && o.shard_size == 0) return usage_error(out + ": an index of shards needs --shard-size");
  if (o.shard_size > 0 && format != ckpt::file_format::ferry && format != ckpt::file_format::safetensors) {
    return usage_error(out + ": --shard-size writes .ferry or .safetensors sets only");
  }
  if (o.nested_arrays && format != ckpt::file_format::gguf) return usage_error(out + ": --nested-arrays is for .gguf outputs");
  if (format != ckpt::file_format::gguf) {  // before reading anything
    if (auto c = ckpt::check_save(format, out, so); !c) return fail(c.error());
  }
  auto opened = open_checkpoint(in, o.read);
  if (!opened) return fail(opened.error());
  progress_bar bar("convert", total_storage_bytes(*opened));

  // GGUF -> GGUF: the byte-order conversion, every field and block kept. It
  // reads the header again: this reader's copy goes first, so that a large
  // header is held once.
  if (format == ckpt::file_format::gguf && opened->format() == ckpt::file_format::gguf && o.cast.empty() &&
      !o.alignment_given) {
    ckpt::read_options ropt;
    ropt.gguf_order = opened->order();  // as open_checkpoint() found it (or --gguf-order said)
    { const ckpt::reader dropped = std::move(*opened); }
    ckpt::gguf_write_options wopt;
    wopt.nested_arrays = o.nested_arrays;
    auto c = ckpt::convert_gguf_order(in, out, order.value_or(ferry::wire::host_order), ropt, wopt,
                                      [&bar](std::uint64_t done) { bar.update(done); });
    bar.finish();
    return c ? 0 : fail(c.error());
  }

  const auto& r = *opened;
  std::optional<ferry::codec::dtype> cast_to;
  if (!o.cast.empty()) cast_to = o.cast == "bf16" ? ferry::codec::dtype::bf16
                                 : o.cast == "f16"  ? ferry::codec::dtype::f16
                                                    : ferry::codec::dtype::f32;
  if (format != ckpt::file_format::gguf && !cast_to) {
    for (const auto& t : r.tensors()) {
      if (!is_quantized(r, t)) continue;
      return fail(ferry::error(tools_errc::quantized_tensor, in + ": tensor " + quote(t.name) + " is " +
                                                                 std::string(ckpt::info(gguf_tensor_of(r, t)->type).name)));
    }
  }
  if (format == ckpt::file_format::npy && r.tensors().size() != 1) {
    return fail(ferry::error(tools_errc::npy_holds_one_array,
                             out + ": " + in + " has " + std::to_string(r.tensors().size()) + " tensors"));
  }
  fetcher f(r, cast_to);

  if (format != ckpt::file_format::ferry) {
    auto refs = fetch_all(r, f, bar);
    bar.finish();
    if (!refs) return fail(refs.error());
    result<void, error> w;
    if (format == ckpt::file_format::safetensors && o.shard_size > 0) {
      ckpt::safetensors_options sharded;  // the policy was checked by check_save()
      sharded.alignment = o.alignment;
      sharded.shared = *ckpt::safetensors_options::policy_from_name(o.shared);
      const std::string index = out.ends_with(".index.json") ? out : out + ".index.json";
      if (auto s = ckpt::save_safetensors_sharded(index, *refs, o.shard_size, r.metadata(), sharded); !s) {
        return fail(s.error());
      }
      return 0;
    } else if (format == ckpt::file_format::gguf) {
      std::vector<std::vector<std::byte>> gathered;
      auto tensors = gguf_tensors(r, *refs, gathered);
      if (!tensors) return fail(tensors.error());
      ckpt::gguf_write_options go;
      go.order = order.value_or(ferry::wire::host_order);
      go.nested_arrays = o.nested_arrays;
      w = ckpt::save_gguf(out, gguf_metadata(r, o), *tensors, go);
    } else {  // through the format table's writer
      w = ckpt::save_as(format, out, *refs, r.metadata(), so);
    }
    return w ? 0 : fail(w.error());
  }

  ckpt::write_options wo;
  wo.order = order.value_or(wo.order);
  wo.alignment = o.alignment;
  if (o.shard_size > 0) {  // a set: every storage held (mapped) until the shards are written
    auto refs = fetch_all(r, f, bar);
    bar.finish();
    if (!refs) return fail(refs.error());
    const std::uint64_t total = total_storage_bytes(r);
    const auto shards = static_cast<std::uint32_t>(
        std::clamp<std::uint64_t>((total + o.shard_size - 1) / o.shard_size, 1, ckpt::limits{}.max_shards));
    if (auto w = ckpt::save_set(out, *refs, shards, r.metadata(), wo); !w) return fail(w.error());
    return 0;
  }
  // The index of each storage's last tensor: its bytes are released after it.
  std::vector<std::size_t> last_use(r.storages().size(), 0);
  for (std::size_t i = 0; i < r.tensors().size(); ++i) last_use[r.tensors()[i].storage] = i;
  auto w = ckpt::writer::create(out, wo);
  if (!w) return fail(w.error());
  std::vector<std::optional<ckpt::storage_id>> written(r.storages().size());
  std::uint64_t done = 0;
  for (std::size_t i = 0; i < r.tensors().size(); ++i) {
    const auto& t = r.tensors()[i];
    auto ref = f.get(i);
    if (!ref) return fail(ref.error());
    if (auto a = w->add_shared(*ref, written[t.storage]); !a) return fail(a.error());
    if (last_use[t.storage] == i) {
      f.release(t.storage);
      done += r.storages()[t.storage].nbytes;
      bar.update(done);
    }
  }
  for (const auto& [k, v] : r.metadata()) {
    if (auto m = w->set_metadata(k, v); !m) return fail(m.error());
  }
  bar.finish();
  if (auto c = w->commit(); !c) return fail(c.error());
  return 0;
}

}  // namespace ferry::tools
