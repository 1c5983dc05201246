#include "sharded.h"

#include <cstdio>
#include <cstring>

#include "collectives.h"

namespace ferry::trainer {
namespace {

namespace ckpt = ferry::checkpoint;

// Bytes as int64 words whose value does not depend on the host's byte
// order (the collectives carry numbers, converted between orders).
std::vector<std::int64_t> to_words(std::span<const std::byte> bytes, std::size_t words) {
  std::vector<std::int64_t> out(words, 0);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto& w = reinterpret_cast<std::uint64_t&>(out[i / 8]);
    w |= std::uint64_t{std::to_integer<std::uint8_t>(bytes[i])} << (8 * (i % 8));
  }
  return out;
}

std::vector<std::byte> from_words(std::span<const std::int64_t> words, std::size_t n) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto w = static_cast<std::uint64_t>(words[i / 8]);
    out[i] = static_cast<std::byte>((w >> (8 * (i % 8))) & 0xFF);
  }
  return out;
}

}  // namespace

std::vector<shard_item> shard_entries(const std::filesystem::path& index, std::uint32_t rank, std::uint32_t world,
                                       const ferry::libtorch::tensor_map& replicated, std::span<const rank_row> own,
                                       const ferry::libtorch::tensor_map& alone) {
  const auto refs = ferry::libtorch::tensor_refs::make(replicated, index).value();
  const auto plan = ckpt::plan_shards(refs.refs(), world);
  std::vector<shard_item> out;
  for (const auto& p : plan[rank]) {
    const auto& ref = refs.refs()[p.tensor];
    const auto& t = replicated.at(std::string(ref.name));
    if (p.begin == 0 && p.count == static_cast<std::uint64_t>(t.numel())) {
      out.push_back({std::string(ref.name), t, true, {}, 0});
    } else {
      out.push_back({std::string(ref.name),
                     t.reshape(-1).narrow(0, static_cast<std::int64_t>(p.begin), static_cast<std::int64_t>(p.count)),
                     false, {ref.shape.begin(), ref.shape.end()}, p.begin});
    }
  }
  for (const auto& row : own) {
    const auto columns = static_cast<std::uint64_t>(row.values.numel());
    out.push_back({row.name, row.values, false, {world, columns}, rank * columns});
  }
  for (const auto& [name, t] : alone) out.push_back({name, t, true, {}, 0});
  return out;
}

std::string agree_save_id(collectives& comm) {
  std::int64_t id = 0;
  if (comm.rank() == 0) id = static_cast<std::int64_t>(std::stoull(ckpt::new_save_id(), nullptr, 16));
  comm.broadcast(std::span(&id, 1));
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(static_cast<std::uint64_t>(id)));
  return text;
}

ckpt::shard_record write_shard(const std::filesystem::path& index, const std::string& save_id, std::uint32_t rank,
                               std::uint32_t world, std::span<const shard_item> entries, bool track,
                               const ckpt::shard_record* previous) {
  auto w = ckpt::shard_writer::create(index, save_id, rank, world).value();
  if (track) w.base_on(previous);
  // Whole tensors together, so that those sharing a storage share it in
  // the shard too; parts one by one.
  ferry::libtorch::tensor_map whole;
  for (const auto& e : entries) {
    if (e.whole) whole.emplace(e.name, e.values);
  }
  const auto refs = ferry::libtorch::tensor_refs::make(whole, index).value();
  for (const auto& ref : refs.refs()) w.add(ref).value();
  for (const auto& e : entries) {
    if (e.whole) continue;
    const ferry::libtorch::tensor_map one{{e.name, e.values.contiguous()}};
    const auto part = ferry::libtorch::tensor_refs::make(one, index).value();
    const auto& ref = part.refs().front();
    const std::size_t width = codec::size_of(ref.dtype);
    w.add_part(e.name, ref.dtype, e.shape, e.begin,
               ref.storage.subspan(static_cast<std::size_t>(ref.offset) * width,
                                   static_cast<std::size_t>(e.values.numel()) * width))
        .value();
  }
  return w.commit().value();
}

std::vector<ckpt::shard_record> gather_records(collectives& comm, std::span<const std::byte> mine,
                                               std::span<const std::int64_t> sizes) {
  const std::uint32_t world = comm.world_size();
  std::size_t longest = 0;
  for (const auto s : sizes) longest = std::max(longest, static_cast<std::size_t>(s));
  const std::size_t words = (longest + 7) / 8;
  const auto packed = to_words(mine, words);
  std::vector<std::int64_t> gathered(words * world);
  comm.allgather(std::span<const std::int64_t>(packed), gathered);
  std::vector<ckpt::shard_record> records;
  if (comm.rank() != 0) return records;
  for (std::uint32_t r = 0; r < world; ++r) {
    const auto bytes = from_words(std::span(gathered).subspan(r * words, words), static_cast<std::size_t>(sizes[r]));
    records.push_back(ckpt::shard_record::decode(bytes).value());
  }
  return records;
}

}  // namespace ferry::trainer
