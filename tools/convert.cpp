// ferry convert IN OUT: any checkpoint ferry reads to .ferry or
// .safetensors, streaming storage by storage (each released after its last
// tensor), optionally cast and in another byte order.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string_view>
#include <vector>

#include "cli.h"
#include "ferry/checkpoint/cast.h"
#include "ferry/checkpoint/safetensors.h"
#include "ferry/checkpoint/set.h"
#include "ferry/checkpoint/writer.h"

namespace ferry::tools {


int convert(const std::string& in, const std::string& out, const convert_options& o) {
  // The output's format: --format, else OUT's suffix (.safetensors), else
  // .ferry. ferry writes no .pt: a .pt OUT without --format is a mistake.
  if (o.format.empty() && (out.ends_with(".pt") || out.ends_with(".pth"))) {
    std::fprintf(stderr, "ferry: %s: ferry does not write .pt files (name a .ferry or .safetensors output, or pass "
                 "--format)\n", out.c_str());
    return 2;
  }
  auto opened = open_checkpoint(in, o.read);
  if (!opened) return fail(opened.error());
  const auto& r = *opened;
  const bool to_safetensors = o.format.empty() ? out.ends_with(".safetensors") || out.ends_with(".index.json")
                                               : o.format == "safetensors";
  if (out.ends_with(".index.json") && o.shard_size == 0) {
    std::fprintf(stderr, "ferry: %s: an index of shards needs --shard-size\n", out.c_str());
    return 2;
  }
  std::optional<ferry::codec::dtype> cast_to;
  if (!o.cast.empty()) cast_to = o.cast == "bf16" ? ferry::codec::dtype::bf16
                                 : o.cast == "f16"  ? ferry::codec::dtype::f16
                                                    : ferry::codec::dtype::f32;

  // Which storages are cast: floating ones whose tensors all have its dtype.
  std::vector<bool> cast_storage_ok(r.storages().size(), cast_to.has_value());
  for (const auto& t : r.tensors()) {
    const auto& s = r.storages()[t.storage];
    if (!ferry::codec::is_floating_point(s.dtype) || t.dtype != s.dtype || s.dtype == cast_to) {
      cast_storage_ok[t.storage] = false;
    }
  }
  // The index of each storage's last tensor: its bytes are released after it.
  std::vector<std::size_t> last_use(r.storages().size(), 0);
  for (std::size_t i = 0; i < r.tensors().size(); ++i) last_use[r.tensors()[i].storage] = i;

  std::vector<std::shared_ptr<const ckpt::storage_buffer>> live(r.storages().size());
  const auto fetch = [&](const ckpt::tensor_info& t) -> ferry::result<ckpt::tensor_ref, ferry::error> {
    auto& buf = live[t.storage];
    if (!buf) {
      FERRY_TRY_ASSIGN(auto got, r.get(t));
      buf = got.storage();
      if (cast_storage_ok[t.storage]) {
        auto c = ckpt::cast(t.dtype, buf->bytes(), *cast_to);
        buf = std::make_shared<ckpt::owned_storage>(std::move(c).value());
      }
    }
    return ckpt::tensor_ref{t.name, cast_storage_ok[t.storage] ? *cast_to : t.dtype, t.shape, t.strides, t.offset,
                            buf->bytes()};
  };

  progress_bar bar("convert", total_storage_bytes(r));
  std::uint64_t done = 0;
  if (to_safetensors) {
    if (!o.order.empty() && o.order != "little") {
      return fail(ferry::error(ferry::errc::bad_value, out + ": safetensors is little-endian only"));
    }
    std::vector<ckpt::tensor_ref> refs;
    for (const auto& t : r.tensors()) {
      auto ref = fetch(t);
      if (!ref) return fail(ref.error());
      refs.push_back(*ref);
      done += r.storages()[t.storage].nbytes;
      bar.update(done);
    }
    ckpt::safetensors_options so;
    so.alignment = o.alignment;
    so.shared = ckpt::safetensors_options::policy_from_name(o.shared).value_or(so.shared);
    bar.finish();
    if (o.shard_size > 0) {
      const std::string index = out.ends_with(".index.json") ? out : out + ".index.json";
      if (auto w = ckpt::save_safetensors_sharded(index, refs, o.shard_size, r.metadata(), so); !w) return fail(w.error());
      return 0;
    }
    if (auto w = ckpt::save_safetensors(out, refs, r.metadata(), so); !w) return fail(w.error());
    return 0;
  }

  ckpt::write_options wo;
  wo.order = ferry::wire::byte_order_from_name(o.order).value_or(wo.order);
  wo.alignment = o.alignment;
  if (o.shard_size > 0) {  // a set: every storage held (mapped) until the shards are written
    std::vector<ckpt::tensor_ref> refs;
    for (const auto& t : r.tensors()) {
      auto ref = fetch(t);
      if (!ref) return fail(ref.error());
      refs.push_back(*ref);
    }
    const std::uint64_t total = total_storage_bytes(r);
    const auto shards = static_cast<std::uint32_t>(
        std::clamp<std::uint64_t>((total + o.shard_size - 1) / o.shard_size, 1, ckpt::limits{}.max_shards));
    bar.finish();
    if (auto w = ckpt::save_set(out, refs, shards, r.metadata(), wo); !w) return fail(w.error());
    return 0;
  }
  auto w = ckpt::writer::create(out, wo);
  if (!w) return fail(w.error());
  std::vector<std::optional<ckpt::storage_id>> written(r.storages().size());
  for (std::size_t i = 0; i < r.tensors().size(); ++i) {
    const auto& t = r.tensors()[i];
    auto ref = fetch(t);
    if (!ref) return fail(ref.error());
    if (auto a = w->add_shared(*ref, written[t.storage]); !a) return fail(a.error());
    if (last_use[t.storage] == i) {
      live[t.storage].reset();
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
