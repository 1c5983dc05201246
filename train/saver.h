// How ferry-train writes its checkpoints: by rank 0 alone (one .ferry file)
// or by every rank (a set, sharded.h); synchronously, or asynchronously.
//
// Synchronous: save() returns once the checkpoint is published (rank 0's
// file renamed into place, or the set's index).
//
// Asynchronous (--checkpoint-async): what this rank writes (its share of
// the state) is copied into staging memory, allocated by prepare() before
// training starts and reused by every save; a background thread then
// writes and fsyncs the copy. save() copies at once only what the next
// forward and backward may change (BatchNorm's statistics, residuals,
// counters); the tensors named in `until_update` (parameters, Adam's
// moments) change only at the optimizer step, so the background thread
// copies them while the next step computes, and before_update(), called
// before every optimizer step, waits until it has. The ranks learn of
// each other's progress from one small allgather per step while a save is
// pending (poll()): when every rank's part is written, the records go to
// rank 0 (sets), whose background thread publishes the index. A failure on
// any rank (disk full, an I/O error) is thrown by poll() on every rank at
// the next step, naming the file; the previous checkpoint stays as it was,
// since only the index's (or the file's) rename replaces it. A save waits
// for the one before it to be published; finish() waits for the last.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ferry/checkpoint/torch/torch.h"
#include "sharded.h"

namespace ferry::trainer {

class collectives;
class reporter;

/// What a checkpoint holds, as the live tensors (nothing is copied).
struct save_state {
  ferry::libtorch::tensor_map replicated;  ///< the same bits on every rank
  std::vector<rank_row> own;            ///< this rank's rows of per-rank tables
  ferry::libtorch::tensor_map alone;       ///< written by this rank only, whole
  /// This rank's parts of tensors that ranks hold in pieces (ZeRO's
  /// optimizer state); a set only.
  std::vector<shard_item> pieces;
  ferry::libtorch::metadata_map metadata;  ///< rank 0's is the one written
  /// Names of `replicated` that change only at the optimizer step (see
  /// saver::before_update).
  std::set<std::string> until_update;
};

/// Copies of tensors kept between snapshots: a key's memory is allocated
/// once and reused while its shape and dtype stay.
class staging {
 public:
  /// `t`'s values in the slot of `key` (contiguous).
  at::Tensor copy(const std::string& key, const at::Tensor& t);
  /// Drops the slots not used since the last call; the bytes kept.
  std::size_t trim();

 private:
  std::map<std::string, at::Tensor> slots_;
  std::map<std::string, bool> used_;
};

struct saver_options {
  std::filesystem::path path;  ///< the file, or the set's index
  bool sharded = false;
  bool async = false;
  /// Sets: a save is incremental over the last one this job published
  /// (shard_writer::base_on) except every full_every-th, and the first
  /// one; 1: every save whole.
  std::int64_t full_every = 1;
  /// Test hook (train_config::keep_saves): rank 0 keeps a copy of each.
  bool keep_copies = false;
};

class saver {
 public:
  saver(saver_options o, collectives& comm, reporter* report);
  /// Waits for the background thread (not for the other ranks): a job
  /// leaving through an exception leaves any unpublished save unpublished.
  ~saver();
  saver(const saver&) = delete;
  saver& operator=(const saver&) = delete;

  /// Async: allocates the staging memory for `s` (a snapshot of it) and
  /// says how much. Sync: nothing.
  void prepare(const save_state& s);
  /// A collective: every rank calls it at the same point with its state.
  /// `where` names the position ("epoch 3") and `global_step` counts the
  /// steps it holds, for the report.
  void save(const save_state& s, const std::string& where, std::int64_t global_step);
  /// Called before anything in `until_update` changes: waits until the
  /// pending save's copy of them is taken.
  void before_update();
  /// A collective while a save is pending (every rank knows when): one
  /// allgather of each rank's progress. Throws the failure of any rank's
  /// background work.
  void poll();
  /// Waits until no save is pending.
  void finish();

 private:
  enum class phase { none, writing, publishing };
  using clock_type = std::chrono::steady_clock;
  std::vector<shard_item> entries_of(const save_state& s);
  at::Tensor snapshot(const shard_item& e);
  void gather_rows(save_state& s);
  void start(std::function<void()> work);
  void exchange(bool wait);
  void done();

  saver_options o_;
  collectives& comm_;
  reporter* report_;
  std::uint32_t rank_, world_;
  staging staging_;
  std::size_t staging_bytes_ = 0;
  // The pending save.
  phase phase_ = phase::none;
  std::thread worker_;
  std::atomic<bool> finished_{true};
  std::atomic<bool> copied_{true};
  std::exception_ptr failure_;
  std::string save_id_, where_;
  std::int64_t global_step_ = 0;
  std::vector<shard_item> entries_;
  // The snapshot's copies by source, so that aliases stay aliased.
  std::map<std::tuple<const void*, std::vector<std::int64_t>, std::vector<std::int64_t>, int>, at::Tensor> copies_;
  ferry::libtorch::metadata_map metadata_;
  std::vector<std::byte> record_;
  // Incremental sets: this rank's record of the last published save, the
  // pending one's, and the incremental saves published since a whole one.
  std::optional<checkpoint::shard_record> previous_, written_;
  std::int64_t since_full_ = 0;
  bool incremental_ = false;  // the pending save
  std::uint64_t bytes_ = 0;
  double stall_s_ = 0, poll_s_ = 0;
  clock_type::time_point save_started_, started_;
};

}  // namespace ferry::trainer
