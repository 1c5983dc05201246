#include "sharded.h"

#include <cstring>
#include <optional>

#include "collectives.h"
#include "ferry/checkpoint/set.h"
#include "ferry/trainer/error.h"

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

// The id as the int64 rank 0 broadcasts, and back.
std::int64_t id_word(const std::string& id) { return static_cast<std::int64_t>(std::stoull(id, nullptr, 16)); }
std::string id_text(std::int64_t w) {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(static_cast<std::uint64_t>(w)));
  return out;
}

// This rank's shard: its planned pieces, its rows, its own tensors.
ckpt::shard_record write_shard(const std::filesystem::path& index, const std::string& id, std::uint32_t rank,
                               std::uint32_t world, const ferry::torch::tensor_map& replicated,
                               std::span<const rank_row> own, const ferry::torch::tensor_map& alone) {
  const auto refs = ferry::torch::tensor_refs::make(replicated, index).value();
  const auto plan = ckpt::plan_shards(refs.refs(), world);
  auto w = ckpt::shard_writer::create(index, id, rank, world).value();
  for (const auto& p : plan[rank]) w.add_piece(refs.refs()[p.tensor], p.begin, p.count).value();
  for (const auto& row : own) {
    const ferry::torch::tensor_map one{{row.name, row.values}};
    const auto row_refs = ferry::torch::tensor_refs::make(one, index).value();
    const auto& ref = row_refs.refs().front();
    const std::uint64_t columns = static_cast<std::uint64_t>(row.values.numel());
    const std::size_t width = codec::size_of(ref.dtype);
    const std::uint64_t shape[] = {world, columns};
    w.add_part(row.name, ref.dtype, shape, rank * columns,
               ref.storage.subspan(static_cast<std::size_t>(ref.offset * width), static_cast<std::size_t>(columns * width)))
        .value();
  }
  const auto mine = ferry::torch::tensor_refs::make(alone, index).value();
  for (const auto& ref : mine.refs()) w.add(ref).value();
  return w.commit().value();
}

}  // namespace

void save_sharded(const std::filesystem::path& index, collectives& comm, const ferry::torch::tensor_map& replicated,
                  std::span<const rank_row> own, const ferry::torch::tensor_map& alone,
                  const ferry::torch::metadata_map& metadata) {
  const std::uint32_t rank = comm.rank(), world = comm.world_size();
  std::int64_t id = 0;
  if (rank == 0) id = id_word(ckpt::new_save_id());
  comm.broadcast(std::span(&id, 1));
  const std::string save_id = id_text(id);

  // Each rank's record, or its failure, to every rank: [status, bytes].
  std::vector<std::byte> record;
  std::optional<ferry::exception> failure;
  try {
    record = write_shard(index, save_id, rank, world, replicated, own, alone).encode();
  } catch (const ferry::exception& e) {
    failure = e;
  }
  const std::int64_t mine[2] = {failure ? 1 : 0, static_cast<std::int64_t>(record.size())};
  std::vector<std::int64_t> all(2 * world);
  comm.allgather(std::span<const std::int64_t>(mine), all);
  if (failure) throw *failure;
  for (std::uint32_t r = 0; r < world; ++r) {
    if (all[2 * r] != 0) {
      throw ferry::exception(error(trainer_errc::bad_checkpoint,
                                   index.string() + ": rank " + std::to_string(r) + " could not write its shard"));
    }
  }
  std::size_t longest = 0;
  for (std::uint32_t r = 0; r < world; ++r) longest = std::max(longest, static_cast<std::size_t>(all[2 * r + 1]));
  const std::size_t words = (longest + 7) / 8;
  const auto packed = to_words(record, words);
  std::vector<std::int64_t> gathered(words * world);
  comm.allgather(std::span<const std::int64_t>(packed), gathered);
  if (rank != 0) return;
  std::vector<ckpt::shard_record> records;
  for (std::uint32_t r = 0; r < world; ++r) {
    const auto bytes = from_words(std::span(gathered).subspan(r * words, words), static_cast<std::size_t>(all[2 * r + 1]));
    records.push_back(ckpt::shard_record::decode(bytes).value());
  }
  ckpt::commit_set(index, save_id, world, records, metadata).value();
}

}  // namespace ferry::trainer
