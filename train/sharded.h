// ferry-train --checkpoint-sharded: every rank writes a shard of one
// checkpoint set (checkpoint/set.h), at once, and rank 0 commits it.
//
// Replicated state (parameters, buffers, Adam's state: the same bits on
// every rank, checked each epoch) is written once in total: plan_shards()
// splits it by bytes over the ranks, the same plan on every rank. Per-rank
// state is written by its own rank, as that rank's row of a [world, n]
// table (`trainer.residual`, `trainer.partial`), so a reader of the set
// sees the same tensors as in a checkpoint rank 0 wrote alone. Rank 0 picks
// the save's id and, once every rank's shard is committed, gathers their
// records and publishes the index.
//
// The steps are apart so that saver.h can run the middle one (writing the
// shard) on a background thread, from a snapshot of the entries.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/checkpoint/set.h"
#include "ferry/checkpoint/torch/torch.h"

namespace ferry::trainer {

class collectives;

/// A rank's row of a per-rank table of `columns` values: the set's tensor
/// `name` is [world, columns].
struct rank_row {
  std::string name;
  at::Tensor values;  ///< 1-d, contiguous, CPU
};

/// One tensor of a rank's shard: a tensor whole, or elements [begin, begin
/// + values.numel()) of the tensor `name` of `shape` (a piece or a row).
struct shard_item {
  std::string name;
  at::Tensor values;  ///< whole: the tensor; a part: its elements, 1-d
  bool whole = true;
  std::vector<std::uint64_t> shape;  ///< a part's whole tensor's
  std::uint64_t begin = 0;
};

/// What rank `rank` of `world` writes: its planned pieces of `replicated`
/// (every rank passes the same tensors), its rows `own`, and `alone`
/// (tensors only it writes, whole). The values alias the arguments'
/// tensors. Throws ferry::exception naming `index` (an unsupported dtype).
std::vector<shard_item> shard_entries(const std::filesystem::path& index, std::uint32_t rank, std::uint32_t world,
                                       const ferry::libtorch::tensor_map& replicated, std::span<const rank_row> own,
                                       const ferry::libtorch::tensor_map& alone);

/// A new save id from rank 0, on every rank (a collective).
std::string agree_save_id(collectives& comm);

/// Writes, fsyncs and renames this rank's shard of save `save_id`; the
/// record rank 0 needs for the index. With `track`, the record holds every
/// piece's CRC32C and, with `previous` (this rank's record of the last
/// published save), pieces equal to that save's are kept, not written
/// (shard_writer::base_on). Throws ferry::exception naming the shard.
/// Touches no collective: safe on a background thread.
checkpoint::shard_record write_shard(const std::filesystem::path& index, const std::string& save_id,
                                     std::uint32_t rank, std::uint32_t world, std::span<const shard_item> entries,
                                     bool track = false, const checkpoint::shard_record* previous = nullptr);

/// Every rank's encoded record to rank 0 (a collective; `sizes` holds every
/// rank's record length, in rank order); rank 0 gets them decoded, the
/// others nothing.
std::vector<checkpoint::shard_record> gather_records(collectives& comm, std::span<const std::byte> mine,
                                                     std::span<const std::int64_t> sizes);

}  // namespace ferry::trainer
